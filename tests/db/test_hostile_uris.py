"""Traversal and URI-confusion payloads against every URI-taking surface.

Tenant ``acme`` holds ``file:///public/readme.txt`` and a template ``file:///public/{name}`` (both
granted to scope ``pub`` by a ``uriPrefix`` grant on ``file:///public/``) and a secret at
``file:///secret/key.txt``. A token holding only ``pub`` sends each payload of :data:`CORPUS` to
``resources/read``, ``completion/complete`` (as the argument value and as the template reference)
and ``subscriptions/listen`` (``resourceSubscriptions``); the admin API's ``uriPrefix`` filter and
``PUT ?uri=`` get them too. Nothing may answer 5xx, no answer may carry the secret's content, every
content returned must lie under the grant, and no listen event may name the secret.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from catalog.app import create_app
from catalog.core.uris import InvalidUri, normalize_uri
from catalog.events import events_lifespan
from tests.mcp_helpers import envelope, mcp_settings, modern_headers, module_database, serve

ADMIN = {"Authorization": "Bearer cat_test-platform-admin-token"}
API = "/admin/v1/tenants/acme"
SECRET_TEXT = "TOP-SECRET-7f3a9c"
PUBLIC = "file:///public/"
README = "file:///public/readme.txt"
TEMPLATE = "file:///public/{name}"
WAIT = 20

S = "secret/key.txt"
CORPUS = [
    f"file:///public/../{S}",
    f"file:///public/%2e%2e/{S}",
    f"file:///public/%2E%2E/{S}",
    f"file:///public/.%2e/{S}",
    f"file:///public/%2e./{S}",
    "file:///public/..%2fsecret/key.txt",
    "file:///public/..%2Fsecret%2Fkey.txt",
    "file:///public/%2e%2e%2fsecret%2fkey.txt",
    f"file:///public/%252e%252e/{S}",
    f"file:///public/%25252e%25252e/{S}",
    "file:///public/%252e%252e%252fsecret%252fkey.txt",
    "file:///public/..\\secret\\key.txt",
    "file:///public\\..\\secret\\key.txt",
    "file:///public/..%5csecret%5ckey.txt",
    "file:///public/%2e%2e%5c%2e%2e%5csecret%5ckey.txt",
    f"file://localhost/../{S}",
    f"file://localhost/public/../{S}",
    f"file://localhost/{S}",
    f"file:///public/\u2024\u2024/{S}",
    f"file:///public/\uff0e\uff0e/{S}",
    f"file:///public/%e2%80%a4%e2%80%a4/{S}",
    f"file:///public/%ef%bc%8e%ef%bc%8e/{S}",
    "file:///public/..\u2215secret\u2215key.txt",
    f"file:///public/\x00/../../{S}",
    f"file:///public/%00/../../{S}",
    f"file:///public/readme.txt%00/../../{S}",
    f"file:///public/..%00/{S}",
    f"file:///public/\r\n/../../{S}",
    f"file:///public/%0d%0a/../../{S}",
    f"file:///public/%c0%ae%c0%ae/{S}",
    "file:///public/%c0%ae%c0%ae%c0%afsecret%c0%afkey.txt",
    f"file:///public/%e0%80%ae%e0%80%ae/{S}",
    f"file:///public/%u002e%u002e/{S}",
    f"FILE:///public/../{S}",
    f"File:///{S}",
    f"FILE:///{S}",
    f"file:////{S}",
    f"file:///public//../{S}",
    f"file:///public/./../{S}",
    f"file:///public/..;/{S}",
    f"file:///public/?/../../{S}",
    f"file:///public/#/../../{S}",
    f"file:///pub%6cic/../{S}",
    f"file:///%70ublic/%2e%2e/{S}",
    f"file:///public/\u00fc/../../{S}",
    f"file:///public/%F0%9F%98%80/../../{S}",
    f"file:///\uff50\uff55\uff42\uff4c\uff49\uff43/../{S}",
    f" file:///public/../{S}",
    f"file:///public/../{S} ",
    f"file:/public/../{S}",
    f"file:public/../{S}",
    "file://public@secret/key.txt",
    "file://user:pass@localhost/secret/key.txt",
    "test://public@secret/",
    "test://public@secret/key.txt",
    "file:///public/" + "../" * 50 + S,
    "file:///public/" + "a/" * 1200 + "../" * 1201 + S,
    "file:///public/" + "x" * 5000,
    f"file:///{S}",
    "file:///secret/",
    "file:///secret",
    "file:///SECRET/key.txt",
    f"file:///{S}/",
    "file:///secret/./key.txt",
    "file:///public",  # the grant's prefix without its slash is not under it
    "file:///publicity/../secret/key.txt",
]


def test_the_corpus_is_large_and_distinct() -> None:
    assert len(set(CORPUS)) == len(CORPUS) >= 40


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def srv(
    postgres_server: Any, template_database: str, tmp_path_factory: Any
) -> AsyncIterator[dict[str, str]]:
    async with module_database(postgres_server, template_database) as url:
        app = create_app(mcp_settings(url, Path(tmp_path_factory.mktemp("home")), public_tenant=None))
        if events_lifespan not in app.state.lifespan_hooks:
            app.state.lifespan_hooks.insert(0, events_lifespan)
        with serve(app) as (base_url, _loop, _stop):
            token = seed(base_url)
            yield {"base_url": base_url, "token": token}


def seed(base_url: str) -> str:
    with httpx.Client(base_url=base_url, timeout=30) as http:
        assert http.post("/admin/v1/tenants", json={"slug": "acme"}, headers=ADMIN).status_code == 201
        for uri, text in ((README, "public readme"), ("file:///secret/key.txt", SECRET_TEXT)):
            body = {"uri": uri, "name": uri.rsplit("/", 1)[-1], "mimeType": "text/plain", "text": text}
            assert http.post(f"{API}/resources", json=body, headers=ADMIN).status_code == 201
        template = {"uriTemplate": TEMPLATE, "name": "public", "mimeType": "text/plain", "text": "t:{name}"}
        assert http.post(f"{API}/templates", json=template, headers=ADMIN).status_code == 201
        grant = {"scope": "pub", "uriPrefix": PUBLIC}
        assert http.post(f"{API}/grants", json=grant, headers=ADMIN).status_code == 201
        return http.post(f"{API}/tokens", json={"scopes": ["pub"]}, headers=ADMIN).json()["token"]


@pytest.fixture(scope="module")
def http(srv: dict[str, str]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=srv["base_url"], timeout=30) as client:
        yield client


def rpc(http: httpx.Client, token: str, method: str, params: dict[str, Any]) -> httpx.Response:
    headers = modern_headers(method)
    headers["Authorization"] = f"Bearer {token}"
    if method == "resources/read" and isinstance(params.get("uri"), str):
        uri = params["uri"]
        plain = uri.isascii() and uri.isprintable() and uri == uri.strip() and not uri.startswith("=?")
        headers["Mcp-Name"] = uri if plain else "=?base64?" + _b64(uri) + "?="
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"_meta": envelope(), **params}}
    return http.post("/mcp", content=json.dumps(body), headers=headers)


def _b64(value: str) -> str:
    import base64

    return base64.b64encode(value.encode("utf-8", "surrogatepass")).decode()


def assert_no_leak(response: httpx.Response) -> None:
    assert response.status_code < 500, (response.status_code, response.text[:300])
    assert SECRET_TEXT not in response.text
    assert '/secret/key.txt"' not in json.dumps(response.json().get("result", {}))


def canonical_or_none(uri: str) -> str | None:
    try:
        return normalize_uri(uri)
    except InvalidUri:
        return None


def under_grant(uri: str) -> bool:
    try:
        return normalize_uri(uri).startswith(PUBLIC)
    except Exception:
        return False


@pytest.mark.parametrize("payload", CORPUS)
def test_read_never_leaves_the_grant(http: httpx.Client, srv: dict[str, str], payload: str) -> None:
    """RES-24 (docs/requirements.toml)."""
    response = rpc(http, srv["token"], "resources/read", {"uri": payload})
    assert_no_leak(response)
    body = response.json()
    if "result" in body:
        for content in body["result"]["contents"]:
            assert content["uri"].startswith(PUBLIC) and under_grant(content["uri"]), content
            assert content["text"] in ("public readme",) or content["text"].startswith("t:"), content
    else:
        assert response.status_code in (400, 413), response.text[:300]
        assert body["error"]["code"] in (-32602, -32020, -32600, -32700), body


@pytest.mark.parametrize("payload", CORPUS)
def test_completion_never_suggests_outside_the_grant(
    http: httpx.Client, srv: dict[str, str], payload: str
) -> None:
    """RES-23, COMP-6 (docs/requirements.toml)."""
    for ref, value in ((TEMPLATE, payload), (payload, "")):
        params = {
            "ref": {"type": "ref/resource", "uri": ref},
            "argument": {"name": "name", "value": value},
        }
        response = rpc(http, srv["token"], "completion/complete", params)
        assert_no_leak(response)
        body = response.json()
        if "result" in body:
            values = body["result"]["completion"]["values"]
            assert all("secret" not in v and ".." not in v for v in values), values
            assert set(values) <= {"readme.txt"}, values
        else:
            assert body["error"]["code"] == -32602, body


def test_admin_uri_filters_and_writes_refuse_confusion(http: httpx.Client) -> None:
    for payload in CORPUS:
        listed = http.get(f"{API}/resources", params={"uriPrefix": payload}, headers=ADMIN)
        assert listed.status_code in (200, 422), (payload, listed.status_code, listed.text[:200])
        if listed.status_code == 200 and payload.startswith(PUBLIC):
            # A filter spelled under /public/ never reaches out of it, whatever it hides.
            assert all(item["uri"].startswith(PUBLIC) for item in listed.json()["items"]), payload
        try:
            canonical = normalize_uri(payload)
        except Exception:
            canonical = None
        if canonical in (README, "file:///secret/key.txt"):
            continue  # an equivalent spelling of a stored URI (file://localhost/...): the same resource
        put = http.put(
            f"{API}/resources",
            params={"uri": payload},
            json={"uri": payload, "name": "alias", "text": "alias"},
            headers=ADMIN,
        )
        assert put.status_code in (201, 422), (payload, put.status_code, put.text[:200])
        if put.status_code == 201:
            # Accepted only as its own canonical resource, never a traversal alias.
            stored = put.json()["uri"]
            path = stored.split("?", 1)[0].split("#", 1)[0]  # in a query, "/../" is only data
            assert stored == canonical and "/../" not in path and "/./" not in path, (payload, stored)
            assert http.delete(f"{API}/resources/{put.json()['id']}", headers=ADMIN).status_code == 204
        else:
            assert canonical is None, (payload, canonical, put.text[:200])
    # The secret is untouched by any of it.
    listed = http.get(f"{API}/resources", params={"uriPrefix": "file:///secret/"}, headers=ADMIN)
    [secret] = listed.json()["items"]
    assert secret["version"] == 1


def test_listen_subscriptions_never_fire_for_the_secret(http: httpx.Client, srv: dict[str, str]) -> None:
    """The payloads that are valid URIs are subscribed to (a listen naming any invalid one is
    refused whole, SUB-3: see the assertion below and tests/e2e/mcp/test_mcp_audit_fixes.py).
    Also SUB-7 (docs/requirements.toml)."""
    headers = modern_headers("subscriptions/listen")
    headers["Authorization"] = f"Bearer {srv['token']}"
    valid = [payload for payload in CORPUS if canonical_or_none(payload) is not None]
    invalid = [payload for payload in CORPUS if canonical_or_none(payload) is None]
    refused = http.post(
        "/mcp",
        json={
            "jsonrpc": "2.0",
            "id": "refused",
            "method": "subscriptions/listen",
            "params": {"_meta": envelope(), "notifications": {"resourceSubscriptions": [*invalid, README]}},
        },
        headers=headers,
    )
    assert refused.status_code == 400 and refused.json()["error"]["code"] == -32602, refused.text[:300]
    assert refused.json()["error"]["data"]["invalidCount"] == len(invalid)
    body = {
        "jsonrpc": "2.0",
        "id": "hostile",
        "method": "subscriptions/listen",
        "params": {"_meta": envelope(), "notifications": {"resourceSubscriptions": [*valid, README]}},
    }
    frames: list[Any] = []
    acked, public_seen = threading.Event(), threading.Event()
    status: list[int] = []

    def listen() -> None:
        with (
            httpx.stream("POST", f"{srv['base_url']}/mcp", json=body, headers=headers, timeout=WAIT) as r,
            contextlib.suppress(httpx.HTTPError),
        ):
            status.append(r.status_code)
            for line in r.iter_lines():
                if line.startswith("data:") and line[5:].strip():
                    frame = json.loads(line[5:])
                    frames.append(frame)
                    acked.set()
                    if frame.get("params", {}).get("uri") == README:
                        public_seen.set()
                        return

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    assert acked.wait(WAIT), (status, frames)
    assert status == [200]
    ack = frames[0]
    assert ack["method"] == "notifications/subscriptions/acknowledged", ack
    # Change the secret first, then the public file: events arrive in commit order, so once the
    # public update is here, any event for the secret would have come before it.
    for uri, text in (("file:///secret/key.txt", SECRET_TEXT + " v2"), (README, "public readme")):
        changed = http.put(
            f"{API}/resources",
            params={"uri": uri},
            json={"uri": uri, "name": "x", "mimeType": "text/plain", "text": text + " "},
            headers=ADMIN,
        )
        assert changed.status_code == 200, changed.text
    assert public_seen.wait(WAIT), frames
    thread.join(timeout=WAIT)
    updates = [f["params"]["uri"] for f in frames if f.get("method") == "notifications/resources/updated"]
    assert updates == [README], frames
    assert SECRET_TEXT not in json.dumps(frames)
