"""Edges of authentication and of the edge itself (``catalog.auth``): refusals that repeat the
request's id, failed authentication charged to the caller's address, JWT and JWKS edge cases,
malformed ``Authorization`` headers, and text logs that a credential cannot forge lines in."""

from __future__ import annotations

import asyncio
import http.server
import json
import secrets
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

import catalog.auth
import catalog.core.direct.standing
from catalog.auth.jwt import JwksSource, JwtVerifier
from catalog.auth.refusals import INTERNAL_ERROR, RATE_LIMITED, request_id_of
from catalog.core.errors import Unauthenticated
from catalog.observability.logs import JsonFormatter, TextFormatter
from catalog.settings import Settings
from tests.admin_support import ADMIN_TOKEN, API, assert_problem
from tests.e2e.test_oauth import AUDIENCE, ISSUER, Issuer
from tests.mcp_helpers import Served, envelope, mcp_settings, modern_headers, module_database, served

asynchronous = pytest.mark.asyncio(loop_scope="session")
MCP_PRM = "https://catalog.test/.well-known/oauth-protected-resource/mcp"
ADMIN_PRM = "https://catalog.test/.well-known/oauth-protected-resource/admin/v1"


@pytest.fixture
def issuer(tmp_path: Path) -> Issuer:
    return Issuer(tmp_path)


class JwksServer:
    """The issuer's JWKS over real HTTP, answering as ``mode`` says: ``ok``, ``status`` (500),
    ``redirect`` (302 to the same document), ``array`` (a JSON array), ``text`` (not JSON) or
    ``slow`` (the document once ``release`` is set)."""

    def __init__(self, document: str) -> None:
        self.mode = "ok"
        self.asked = 0
        self.release = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.asked += 1
                mode = outer.mode
                if mode == "slow":
                    outer.release.wait(timeout=60)
                status, body, extra = {
                    "status": (500, b'{"error": "down"}', {}),
                    "redirect": (302, b"", {"Location": "/jwks.json"}),
                    "array": (200, json.dumps(json.loads(document)["keys"]).encode(), {}),
                    "text": (200, b"<html>maintenance</html>", {}),
                }.get(mode, (200, document.encode(), {}))
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **extra}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/jwks.json"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def jwks_server(issuer: Issuer) -> Iterator[JwksServer]:
    server = JwksServer(issuer.jwks_path.read_text())
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def settings(
    database_url: str, tmp_path: Path, issuer: Issuer, jwks_server: JwksServer, request: pytest.FixtureRequest
) -> Settings:
    """conftest's app (in-process) with an OAuth issuer whose JWKS is a file; a test may change
    fields by parametrizing this fixture indirectly with a dict (``jwks_url``: the JWKS over HTTP
    from ``jwks_server`` instead)."""
    overrides = dict(getattr(request, "param", {}))
    if overrides.pop("jwks_url", False):
        overrides["oauth_jwks"] = jwks_server.url
    values = {
        "database_url": database_url,
        "home": tmp_path / "home",
        "admin_token": ADMIN_TOKEN,
        "secret_key": "test-secret-key-0123456789abcdef",
        "public_tenant": None,
        "oauth_issuer": ISSUER,
        "oauth_audience": AUDIENCE,
        "oauth_jwks": str(issuer.jwks_path),
        "rate_limit_per_minute": 0,
    }
    return Settings(**{**values, **overrides})


def _challenge_params(value: str) -> dict[str, str]:
    scheme, _, rest = value.partition(" ")
    assert scheme == "Bearer", value
    return dict(
        (name, quoted.strip('"')) for name, _, quoted in (p.strip().partition("=") for p in rest.split(", "))
    )


@pytest_asyncio.fixture(loop_scope="session")
async def limited(postgres_server: Any, template_database: str, tmp_path: Path) -> AsyncIterator[Served]:
    """A server whose callers get a burst of 3 requests and next to no refill."""
    async with module_database(postgres_server, template_database) as url:
        # next to no refill: a test's count of admitted requests never depends on how long it took
        settings = mcp_settings(url, tmp_path, rate_limit_per_minute=0.0001, rate_limit_burst=3)
        async with served(settings) as s:
            yield s


def _list_body(request_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "resources/list", "params": {"_meta": envelope()}}


# -- ERR-3: a refusal at the edge repeats the request's id ---------------------------------------------


def test_request_id_of_reads_only_a_single_objects_string_or_integer_id() -> None:
    """ERR-3, ERR-4: the id is echoed when it is readable and valid, else null."""
    assert request_id_of(b'{"jsonrpc":"2.0","id":"abc","method":"x"}') == "abc"
    assert request_id_of(b' \n{"id": 7}') == 7
    assert request_id_of(b'[{"jsonrpc":"2.0","id":1,"method":"x"}]') is None  # a batch: no single id
    for body in (b'{"id": true}', b'{"id": 1.5}', b'{"id": null}', b'{"id": {"a": 1}}', b'{"method": "x"}'):
        assert request_id_of(body) is None, body
    for body in (b"", b"not json", b'{"id": 1', b"\xff\xfe{", b"{" + b"[" * 100_000, b'"id"'):
        assert request_id_of(body) is None, body
    assert request_id_of(b'{"id": "\\ud800"}') == "\ud800"  # echoed ASCII-escaped, never a 500


@asynchronous
async def test_a_rate_limited_mcp_request_gets_its_own_id_back_err_3(limited: Served) -> None:
    """ERR-3: the edge's 429 on /mcp repeats the id of the request it refuses (read from the bounded
    body); a batch, a notification or a body that is not JSON gets ``id: null``."""
    headers = {**modern_headers("resources/list"), "Authorization": f"Bearer {limited.token('staff')}"}
    async with httpx.AsyncClient(base_url=limited.base_url, timeout=10) as http:
        for n in range(3):
            assert (await http.post("/mcp", json=_list_body(n), headers=headers)).status_code == 200
        for request_id in ("req-\ud800-x", 41, 0):
            refused = await http.post("/mcp", content=json.dumps(_list_body(request_id)), headers=headers)
            assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
            answer = refused.json()
            assert answer["id"] == request_id and answer["error"]["code"] == RATE_LIMITED
            assert answer["jsonrpc"] == "2.0" and "too many requests" in answer["error"]["message"]
        for content in (json.dumps([_list_body(5)]), "}{", json.dumps({**_list_body(6), "id": True})):
            refused = await http.post("/mcp", content=content, headers=headers)
            assert refused.status_code == 429 and refused.json()["id"] is None, content
        # A refused GET has no body to read: null.
        refused = await http.get("/mcp", headers=headers)
        assert refused.status_code == 429 and refused.json()["id"] is None


# -- failed authentication is charged to the caller's address --------------------------------------


@asynchronous
async def test_rotating_random_tokens_from_one_address_is_refused_before_any_lookup(
    limited: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each distinct ``Authorization`` value has its own request budget, but a failed authentication
    also spends its address's: after the burst (3) of failures, an unknown credential from that
    address gets 429 (-31003 on /mcp, problem JSON on the admin API) without a token lookup. A
    credential that has authenticated, and anonymous callers, from the same address still work."""
    lookups: list[str] = []
    looked_up, standing = catalog.auth.token_principal, catalog.core.direct.standing.fast_standing

    async def counted_lookup(catalog_: Any, token: str) -> Any:
        lookups.append(token)
        return await looked_up(catalog_, token)

    async def counted_standing(catalog_: Any, key: Any, token: Any, principal: Any) -> Any:
        if token is not None:  # the plain path's own lookup of an opaque token
            lookups.append(token)
        return await standing(catalog_, key, token, principal)

    monkeypatch.setattr(catalog.auth, "token_principal", counted_lookup)
    monkeypatch.setattr(catalog.core.direct.standing, "fast_standing", counted_standing)
    staff = {"Authorization": f"Bearer {limited.token('staff')}"}
    admin = {"Authorization": "Bearer cat_test-platform-admin-token"}
    async with httpx.AsyncClient(base_url=limited.base_url, timeout=10) as http:
        # Known before the attack: each has authenticated once.
        assert (await http.get("/admin/v1/tenants", headers=admin)).status_code == 200
        known = await http.post(
            "/mcp", json=_list_body(1), headers={**modern_headers("resources/list"), **staff}
        )
        assert known.status_code == 200
        lookups.clear()
        answers: list[httpx.Response] = []
        for n in range(20):
            forged = {"Authorization": f"Bearer cat_{secrets.token_urlsafe(32)}"}
            if n % 2:
                answers.append(await http.get("/admin/v1/tenants", headers=forged))
            else:
                headers = {**modern_headers("resources/list"), **forged}
                answers.append(await http.post("/mcp", json=_list_body(f"forged-{n}"), headers=headers))
        statuses = [answer.status_code for answer in answers]
        assert statuses == [401] * 3 + [429] * 17
        # An unknown opaque token costs one lookup on the admin API, two on /mcp (its fast path
        # looks it up, then the full path that explains the refusal): bounded by the burst.
        assert 3 <= len(lookups) <= 2 * 3
        for n, answer in enumerate(answers[3:], start=3):
            assert int(answer.headers["retry-after"]) >= 1
            if n % 2:
                assert answer.headers["content-type"] == "application/problem+json"
                assert answer.json()["status"] == 429 and answer.json()["title"] == "Too many requests"
            else:
                assert answer.json()["error"]["code"] == RATE_LIMITED and answer.json()["id"] == f"forged-{n}"
        lookups.clear()
        assert (await http.get("/admin/v1/tenants", headers=admin)).status_code == 200
        again = await http.post(
            "/mcp", json=_list_body(2), headers={**modern_headers("resources/list"), **staff}
        )
        assert again.status_code == 200 and again.json()["id"] == 2
        anonymous = await http.post("/mcp", json=_list_body(3), headers=modern_headers("resources/list"))
        assert anonymous.status_code == 200 and anonymous.json()["result"]["resources"]


# -- AUTH-10, AUTH-4: what a refused caller is told ----------------------------------------------------


@pytest.mark.parametrize("settings", [{"public_tenant": "acme"}], indirect=True)
async def test_a_malformed_or_foreign_authorization_is_answered_alike_on_both_surfaces_auth_10(
    anon: httpx.AsyncClient, tenant: str
) -> None:
    """AUTH-10, RFC 6750 section 3.1: ``Bearer`` without exactly one token is 400 ``invalid_request``;
    another scheme is no credential this server supports: 401 with a Bearer challenge and no error
    code, on /mcp too (never the anonymous public tenant: the caller meant to authenticate)."""
    cases = [
        ("Bearer", 400, "invalid_request"),
        ("Bearer a b", 400, "invalid_request"),
        ("Basic dXNlcjpwYXNz", 401, None),
    ]
    for header, status, error in cases:
        on_admin = await anon.get(f"{API}/tenants/{tenant}/resources", headers={"Authorization": header})
        assert_problem(on_admin, status)
        on_mcp = await anon.post(
            "/mcp", json=_list_body(1), headers={**modern_headers("resources/list"), "Authorization": header}
        )
        assert on_mcp.status_code == status, (header, on_mcp.text)
        assert on_mcp.json()["error"] == (error or "unauthorized")
        for response, metadata, scope in (
            (on_admin, ADMIN_PRM, "catalog:admin"),
            (on_mcp, MCP_PRM, "public"),
        ):
            params = _challenge_params(response.headers["www-authenticate"])
            assert params.get("error") == error, (header, params)
            assert params["resource_metadata"] == metadata and params["scope"] == scope
    # Without any header, /mcp still serves the public tenant anonymously.
    anonymous = await anon.post("/mcp", json=_list_body(2), headers=modern_headers("resources/list"))
    assert anonymous.status_code == 200 and anonymous.json()["id"] == 2


async def test_the_mcp_challenge_and_metadata_name_the_scopes_to_ask_for_by_default_auth_4(
    anon: httpx.AsyncClient, tenant: str
) -> None:
    """AUTH-4: every 401 on /mcp names the scopes to ask for (``public`` unless CATALOG_OAUTH_SCOPES
    says otherwise), the same set as the metadata's ``scopes_supported``.
    Also AUTH-3 (docs/requirements.toml)."""
    metadata = (await anon.get("/.well-known/oauth-protected-resource/mcp")).json()
    assert metadata["scopes_supported"] == ["public"]
    missing = await anon.post("/mcp", json=_list_body(1), headers=modern_headers("resources/list"))
    assert missing.status_code == 401
    assert (
        missing.headers["www-authenticate"]
        == f'Bearer realm="catalog", scope="public", resource_metadata="{MCP_PRM}"'
    )
    invalid = await anon.post(
        "/mcp",
        json=_list_body(1),
        headers={**modern_headers("resources/list"), "Authorization": "Bearer cat_x"},
    )
    assert invalid.status_code == 401
    assert _challenge_params(invalid.headers["www-authenticate"]) == {
        "realm": "catalog",
        "error": "invalid_token",
        "scope": "public",
        "resource_metadata": MCP_PRM,
    }


@pytest.mark.parametrize("settings", [{"oauth_scopes": ["docs", "src"]}], indirect=True)
async def test_configured_scopes_replace_the_default_in_challenge_and_metadata_auth_4(
    anon: httpx.AsyncClient, tenant: str
) -> None:
    metadata = (await anon.get("/.well-known/oauth-protected-resource/mcp")).json()
    assert metadata["scopes_supported"] == ["docs", "src"]
    missing = await anon.post("/mcp", json=_list_body(1), headers=modern_headers("resources/list"))
    assert _challenge_params(missing.headers["www-authenticate"])["scope"] == "docs src"


# -- JWT claims and audiences ----------------------------------------------------------------------


async def _both_surfaces(
    anon: httpx.AsyncClient, tenant: str, token: str
) -> tuple[httpx.Response, httpx.Response]:
    headers = {"Authorization": f"Bearer {token}"}
    on_admin = await anon.get(f"{API}/tenants/{tenant}/resources", headers=headers)
    on_mcp = await anon.post(
        "/mcp", json=_list_body(9), headers={**modern_headers("resources/list"), **headers}
    )
    return on_admin, on_mcp


@pytest.mark.parametrize(
    "claims",
    [
        {"exp": "9999999999"},
        {"exp": 10**30},
        {"exp": 1e300},
        {"exp": True},
        {"sub": "agent\x00-7"},
        {"sub": "agent-\ud800"},
        {"sub": "agent-7\nINFO forged line"},
        {"sub": "a" * 5000},
        {"tenant": "acme\x00"},
        {"scope": "catalog:admin bad\x00scope"},
    ],
    ids=lambda claims: repr(claims)[:40],
)
async def test_a_signed_token_with_unusable_claims_is_401_invalid_token_never_500(
    anon: httpx.AsyncClient, tenant: str, issuer: Issuer, claims: dict[str, Any]
) -> None:
    """AUTH-5: a correctly signed token whose expiry is not a usable number, or whose subject, tenant
    or scopes are not printable text (a NUL, a lone surrogate, a line break), is refused as the
    token's fault on both surfaces."""
    token = issuer.token(**{"tenant": tenant, "scope": "catalog:admin public", **claims})
    on_admin, on_mcp = await _both_surfaces(anon, tenant, token)
    assert_problem(on_admin, 401)
    assert _challenge_params(on_admin.headers["www-authenticate"])["error"] == "invalid_token"
    assert on_mcp.status_code == 401 and on_mcp.json()["error"] == "invalid_token"
    good_admin, good_mcp = await _both_surfaces(
        anon, tenant, issuer.token(tenant=tenant, scope="catalog:admin")
    )
    assert (good_admin.status_code, good_mcp.status_code) == (200, 200)


async def test_an_audience_is_compared_whole_and_each_surface_accepts_what_it_advertises_auth_5(
    anon: httpx.AsyncClient, tenant: str, issuer: Issuer
) -> None:
    """AUTH-5, AUTH-13, RFC 8707: an audience with a query or fragment names another resource. The
    admin API accepts a token for the resource its metadata advertises (what a client following it
    asks for), and /mcp does not (a token for the admin API is not one for /mcp).
    Also AUTH-6 (docs/requirements.toml)."""
    for audience in (
        f"{AUDIENCE}?tenant=other",
        f"{AUDIENCE}#x",
        f"{AUDIENCE}/?x=1",
        "https://catalog.test/mcpx",
    ):
        on_admin, on_mcp = await _both_surfaces(
            anon, tenant, issuer.token(tenant=tenant, scope="catalog:admin", aud=audience)
        )
        assert (on_admin.status_code, on_mcp.status_code) == (401, 401), audience
        assert "another resource" in on_admin.json()["detail"]
    advertised = (await anon.get("/.well-known/oauth-protected-resource/admin/v1")).json()["resource"]
    assert advertised == "https://catalog.test/admin/v1"
    for spelling in (advertised, "HTTPS://Catalog.TEST/admin/v1/"):
        token = issuer.token(tenant=tenant, scope="catalog:admin", aud=spelling)
        on_admin, on_mcp = await _both_surfaces(anon, tenant, token)
        assert on_admin.status_code == 200 and on_admin.json()["items"] is not None
        assert on_mcp.status_code == 401 and on_mcp.json()["error"] == "invalid_token"
    # The /mcp audience (what its metadata advertises) is accepted on both, as before.
    mcp_resource = (await anon.get("/.well-known/oauth-protected-resource/mcp")).json()["resource"]
    on_admin, on_mcp = await _both_surfaces(
        anon, tenant, issuer.token(tenant=tenant, scope="catalog:admin", aud=mcp_resource)
    )
    assert (on_admin.status_code, on_mcp.status_code) == (200, 200)


# -- a JWKS URL: fetched off the request path, bounded wait, last good set kept ------------------------


@pytest.mark.parametrize("settings", [{"jwks_url": True, "oauth_jwks_wait_seconds": 5}], indirect=True)
@pytest.mark.parametrize("mode", ["status", "redirect", "array", "text"])
async def test_an_unusable_jwks_answer_is_503_naming_the_key_set_on_both_surfaces(
    anon: httpx.AsyncClient, tenant: str, issuer: Issuer, jwks_server: JwksServer, mode: str
) -> None:
    """An error status, a redirect (not followed), an array or a body that is not JSON: no key set is
    known, which is the server's trouble: 503 naming CATALOG_OAUTH_JWKS, not a 500, not a 401 blaming
    the token, not "database unavailable"."""
    jwks_server.mode = mode
    on_admin, on_mcp = await _both_surfaces(anon, tenant, issuer.token(tenant=tenant, scope="catalog:admin"))
    problem = assert_problem(on_admin, 503)
    assert on_admin.headers["retry-after"] == on_mcp.headers["retry-after"] == "1"
    assert "CATALOG_OAUTH_JWKS" in problem["detail"] and jwks_server.url in problem["detail"]
    assert "database" not in problem["detail"]
    assert on_mcp.status_code == 503 and on_mcp.json()["id"] == 9
    error = on_mcp.json()["error"]
    assert error["code"] == INTERNAL_ERROR and "CATALOG_OAUTH_JWKS" in error["message"]
    assert error["data"] == {"retryable": True} and "database" not in error["message"]
    # Opaque tokens never wait for the key set.
    assert (
        await anon.get(f"{API}/tenants", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    ).status_code == 200


@pytest.mark.parametrize("settings", [{"jwks_url": True, "oauth_jwks_wait_seconds": 0.2}], indirect=True)
async def test_a_slow_jwks_is_fetched_once_in_the_background_and_waited_for_a_bounded_time(
    app: Any, anon: httpx.AsyncClient, tenant: str, issuer: Issuer, jwks_server: JwksServer
) -> None:
    """A JWKS that does not answer: each JWT request waits at most CATALOG_OAUTH_JWKS_WAIT_SECONDS,
    then gets 503 naming the key set; the one fetch under way is shared (the server is asked once),
    and once it answers, the key set is used."""
    jwks_server.mode = "slow"
    token = issuer.token(tenant=tenant, scope="catalog:admin")
    for _ in range(3):
        on_admin, on_mcp = await _both_surfaces(anon, tenant, token)
        assert "no answer within 0.2 s" in assert_problem(on_admin, 503)["detail"]
        assert on_mcp.status_code == 503 and "CATALOG_OAUTH_JWKS" in on_mcp.json()["error"]["message"]
    assert jwks_server.asked == 1
    jwks_server.release.set()
    fetching = app.state.catalog.jwt_verifier.jwks._fetching
    await asyncio.wait_for(asyncio.shield(fetching), 30)
    on_admin, on_mcp = await _both_surfaces(anon, tenant, token)
    assert (on_admin.status_code, on_mcp.status_code) == (200, 200)
    assert jwks_server.asked == 1


async def test_a_failed_refresh_keeps_the_last_good_key_set(issuer: Issuer, jwks_server: JwksServer) -> None:
    """A refetch (a token naming a kid not in the set) that fails leaves the known keys in use."""
    source = JwksSource(jwks_server.url, wait_seconds=5, min_refetch_seconds=0)
    verifier = JwtVerifier(issuer=ISSUER, audience=AUDIENCE, jwks=source)
    assert (await verifier.claims(issuer.token(tenant="acme")))["sub"] == "agent-7"
    for mode in ("status", "array", "text", "redirect"):
        jwks_server.mode = mode
        with pytest.raises(Unauthenticated, match="unknown key"):
            await verifier.claims(issuer.token(tenant="acme", kid="rotated"))
        assert (await verifier.claims(issuer.token(tenant="acme")))["sub"] == "agent-7", mode
    assert jwks_server.asked == 5  # the first fetch and one refetch per failed mode


# -- text logs: one record, one line ---------------------------------------------------------------

FORGED = (
    "agent-7\n2026-12-05T09:00:00.000+00:00 INFO    catalog.request: GET /admin/v1/tenants 200 principal=root"
)


def test_a_text_log_line_cannot_be_forged_by_a_value_message_or_traceback() -> None:
    """CATALOG_LOG_FORMAT=text: a control character, line separator or lone surrogate in a value
    (a JWT sub, a header), the message (a decoded path) or an exception's text is escaped; a value
    with spaces, quotes or ``=`` is quoted, so it cannot pass for another field; traceback lines are
    indented, so every line at column 0 is a record's own."""
    error = (
        "Traceback (most recent call last):\nValueError: bad input\n2026-12-05T09:00:00.000+00:00 INFO forged"
    )
    text = TextFormatter().line(
        0.0,
        "INFO",
        "catalog.request",
        "GET /x\r\nforged 200",
        {
            "principal": FORGED,
            "tenant": "acme status=500",
            "odd": "\ud800\u2028\x1b[31m\x85",
            "request_id": "r-1",
        },
        error,
    )
    first, *rest = text.split("\n")
    assert first == (
        "1970-01-01T00:00:00.000+00:00 INFO    catalog.request: GET /x\\r\\nforged 200"
        ' principal="agent-7\\n2026-12-05T09:00:00.000+00:00 INFO    catalog.request: GET /admin/v1/tenants 200'
        ' principal=root" tenant="acme status=500" odd="\\ud800\\u2028\\x1b[31m\\x85" request_id=r-1'
    )
    assert rest == [
        "  Traceback (most recent call last):",
        "  ValueError: bad input",
        "  2026-12-05T09:00:00.000+00:00 INFO forged",
    ]
    text.encode("utf-8")  # writable: no lone surrogate left


def test_a_json_log_line_is_one_line_of_utf_8_whatever_a_value_holds() -> None:
    """JSON logs escape line breaks already; a lone surrogate (which orjson refuses) is written as an
    ASCII escape instead of losing the line to an encoding error."""
    for principal in (FORGED, FORGED + "\ud800"):
        line = JsonFormatter().line(
            0.0, "INFO", "catalog.request", "GET /x 200", {"principal": principal}, None
        )
        assert "\n" not in line and "\u2028" not in line
        line.encode("utf-8")
        assert json.loads(line)["principal"] == principal


# -- Origin: a loopback page on another port is another origin ----------------------------------------


async def _origin_status(anon: httpx.AsyncClient, host: str, origin: str) -> int:
    response = await anon.get("/healthz", headers={"Host": host, "Origin": origin})
    if response.status_code == 403:
        assert "CATALOG_ALLOWED_ORIGINS" in response.json()["detail"]
    return response.status_code


async def test_the_default_origins_allow_the_servers_own_port_not_any_loopback_port_http_2(
    anon: httpx.AsyncClient,
) -> None:
    """HTTP-2 (DNS rebinding, cross-origin pages): the default loopback origins name no port; they
    allow a page of this server (the Origin's host and port are the request's Host) and one on the
    default port, never another port of the same host (a development server at localhost:5173 is
    another origin, possibly hostile)."""
    cases = [
        ("localhost:8000", "http://localhost:8000", 200),
        ("127.0.0.1:8000", "http://127.0.0.1:8000", 200),
        ("[::1]:8000", "http://[::1]:8000", 200),
        ("localhost", "http://localhost", 200),
        ("localhost:8000", "http://localhost:5173", 403),
        ("localhost:8000", "http://127.0.0.1:8000", 403),
        ("127.0.0.1:8000", "http://127.0.0.1:9", 403),
        ("[::1]:8000", "http://[::1]:3000", 403),
        ("localhost:8000", "https://localhost:8000", 403),
        ("localhost:8000", "http://evil.example:8000", 403),
        ("localhost:8000", "null", 403),
    ]
    assert [(host, origin, await _origin_status(anon, host, origin)) for host, origin, _ in cases] == cases


@pytest.mark.parametrize(
    "settings", [{"allowed_origins": ["http://localhost:*", "https://app.example:8443"]}], indirect=True
)
async def test_an_origin_entry_names_its_ports_explicitly(anon: httpx.AsyncClient) -> None:
    """``scheme://name:*`` allows any port, an entry with a port that port only."""
    cases = [
        ("localhost:8000", "http://localhost:5173", 200),
        ("localhost:8000", "https://app.example:8443", 200),
        ("localhost:8000", "https://app.example:9443", 403),
        ("localhost:8000", "http://127.0.0.1:8000", 403),
    ]
    assert [(host, origin, await _origin_status(anon, host, origin)) for host, origin, _ in cases] == cases
