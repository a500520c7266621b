"""Differential properties of the fast path: where ``catalog.mcp.fast`` answers a
2026-07-28 request, its answer is the SDK handlers' answer to the same request, byte for byte once
serialised canonically; where it does not, the SDK answers (so it refuses nothing the SDK accepts).

One served app answers every request twice, with ``CATALOG_MCP_FAST_PATH`` ``on`` and then ``off``
(the setting is read per request), and the two answers are compared: status, media type, body.
Hypothesis draws the request around the acceptance edges (the JSON-RPC fuzzer's strategies,
``tests/properties/test_hostile_jsonrpc.py``, for envelopes and values): principals (anonymous, tokens whose
grants are a prefix, a tag, admin, nothing, another tenant's, an unknown token, and tokens whose
grants are drawn at random from a small space of URIs, prefixes and tags), URIs (visible,
hidden, missing, templated, other tenant's, malformed), cursors (each principal's real next-page
cursors, another principal's, tampered, garbage), completion arguments, and envelopes with good and
bad ``clientCapabilities``, ``clientInfo``, extra keys and ids of every JSON type.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from catalog.core.grants import create_grant
from catalog.core.schemas.grants import GrantIn
from catalog.core.schemas.tokens import TokenIn
from catalog.core.tokens import create_token
from catalog.mcp.shadow import canonical, differences
from catalog.observability import metrics
from tests.mcp_helpers import (
    HIDDEN,
    MODERN,
    SYSTEM,
    Served,
    acting_catalog,
    envelope,
    mcp_settings,
    module_database,
    served,
)
from tests.properties.test_hostile_jsonrpc import JSON, URIS, bad_meta

pytestmark = [pytest.mark.slow, pytest.mark.fast_path]

READ, LIST, COMPLETE = "resources/read", "resources/list", "completion/complete"
# Tokens with generated grants: each holds a scope of its own (and sometimes another's too), whose
# grants are drawn from GRANT_SPACE: prefixes that cover one another or end at a character's edge,
# single URIs (a directory, a hidden one, a templated one), tags. Seeded: the same sets every run,
# so a failure is reproduced.
GENERATED = [f"generated-{n}" for n in range(6)]
GRANT_SPACE: list[dict[str, str]] = [
    *(
        {"uriPrefix": prefix}
        for prefix in [
            "file:///project",
            "file:///project/",
            "file:///project/s",
            "test://",
            "test://bulk/00",
            "test://bulk/01",
            "test://static-",
        ]
    ),
    *(
        {"uri": uri}
        for uri in [
            "test://static-text",
            "file:///project",
            HIDDEN,
            "test://bulk/0007",
            "test://template/42/data",
        ]
    ),
    *({"tag": tag} for tag in ["docs", "code", "staff", "internal"]),
]
PRINCIPALS = [None, "src", "staff", "admin", "none", "other-admin", "unknown", *GENERATED]
LISTERS = [None, "src", "staff", "admin", "none", *GENERATED]
VISIBLE_URIS = [
    "test://static-text",
    "TEST://static-text",
    "test://static-binary",
    "file:///project/README.md",
    "file:///project/src/app.py",
    "file:///project/docs/internal-notes.md",  # needs consent: the SDK's
    "file:///project",  # a directory
    "test://template/42/data",
    "test://bulk/0007",
    "test://bulk",
    "test://other/1",  # the other tenant's template
    HIDDEN,
    "test://missing",
    "test://static-text?x=1",
    "test://static-text#f",
    "test://static-text/",
]
TEMPLATES = ["test://template/{id}/data", "test://other/{x}", "test://missing/{x}", "", "{x}"]
CAPABILITIES = [{}, {"elicitation": {"form": {}}}, {"x": 1}, 5, "x", None, [], True, {"elicitation": 5}]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def srv(postgres_server: Any, template_database: str, tmp_path_factory: Any) -> AsyncIterator[Served]:
    async with (
        module_database(postgres_server, template_database) as url,
        served(mcp_settings(url, Path(tmp_path_factory.mktemp("home")))) as s,
    ):
        yield s


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def generated_grants(srv: Served) -> dict[str, list[dict[str, str]]]:
    """The GENERATED tokens, made in the served tenant: each one's grants (by scope), drawn from
    GRANT_SPACE."""
    draw = random.Random(23)
    drawn: dict[str, list[dict[str, str]]] = {}
    async with acting_catalog(srv) as catalog:
        for name in GENERATED:
            drawn[name] = draw.sample(GRANT_SPACE, draw.randint(1, 4))
            for selector in drawn[name]:
                grant = GrantIn.model_validate({"scope": name, **selector})
                await create_grant(catalog, SYSTEM, srv.fixture.tenant, grant)
        for name in GENERATED:
            scopes = [name, *draw.sample(GENERATED, draw.randint(0, 1))]
            token = TokenIn.model_validate({"scopes": sorted(set(scopes))})
            srv.fixture.tokens[name] = (await create_token(catalog, SYSTEM, srv.fixture.tenant, token)).token
    return drawn


@pytest.fixture(scope="module")
def http(srv: Served, generated_grants: dict[str, list[dict[str, str]]]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=srv.base_url, timeout=30) as client:
        yield client


def headers_of(srv: Served, method: str, principal: str | None, uri: Any = None) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
    }
    if method == READ and isinstance(uri, str) and uri.isascii() and uri.isprintable() and uri == uri.strip():
        headers["Mcp-Name"] = uri
    if principal == "unknown":
        headers["Authorization"] = "Bearer cat_not-a-token-of-this-catalogue"
    elif principal is not None:
        headers["Authorization"] = f"Bearer {srv.token(principal)}"
    return headers


def plain_answers() -> float:
    return sum(
        metrics.MCP_PLAIN_ANSWERS.labels(method)._value.get()  # type: ignore[attr-defined]
        for method in (READ, LIST, COMPLETE)
    )


def answered(srv: Served, http: httpx.Client, mode: str, body: bytes, headers: dict[str, str]) -> Any:
    """The answer to one request with the fast path ``mode`` (``on`` or ``off``), as compared: its
    status, media type and parsed body; and whether the fast path answered it."""
    srv.app.state.mcp.settings.mcp_fast_path = mode
    before = plain_answers()
    response = http.post("/mcp", content=body, headers=headers)
    fast = plain_answers() > before
    media = response.headers.get("content-type", "").split(";")[0]
    try:
        parsed: Any = response.json()
    except ValueError:
        parsed = response.text
    return {"status": response.status_code, "media": media, "body": parsed}, fast


def both(srv: Served, http: httpx.Client, message: dict[str, Any], headers: dict[str, str]) -> bool:
    """Send ``message`` on the fast path and on the SDK's; assert the same answer. Whether the
    fast path answered it."""
    body = json.dumps(message).encode("utf-8", "surrogatepass")
    try:
        fast, taken = answered(srv, http, "on", body, headers)
        sdk, sdk_taken = answered(srv, http, "off", body, headers)
    finally:
        srv.app.state.mcp.settings.mcp_fast_path = "on"
    assert not sdk_taken
    assert canonical(fast) == canonical(sdk), (message, differences(fast, sdk))
    return taken


_CURSORS: dict[str | None, list[str]] = {}


def cursors(srv: Served, http: httpx.Client) -> dict[str | None, list[str]]:
    """Each principal's next-page cursors over its whole listing (drawn from, and given to others)."""
    if _CURSORS:
        return _CURSORS
    for principal in PRINCIPALS:
        found: list[str] = []
        cursor: str | None = None
        for _ in range(5):
            params: dict[str, Any] = {"_meta": envelope()}
            if cursor is not None:
                params["cursor"] = cursor
            message = {"jsonrpc": "2.0", "id": 1, "method": LIST, "params": params}
            response = http.post("/mcp", json=message, headers=headers_of(srv, LIST, principal))
            cursor = (
                response.json().get("result", {}).get("nextCursor") if response.status_code == 200 else None
            )
            if cursor is None:
                break
            found.append(cursor)
        _CURSORS[principal] = found
    return _CURSORS


def tampered(cursor: str, where: int) -> str:
    if not cursor:
        return "x"
    i = where % len(cursor)
    return cursor[:i] + ("A" if cursor[i] != "A" else "B") + cursor[i + 1 :]


# Each request starts as one the fast path answers, then at most two edges are applied to it: the
# fast path must answer often enough for its answers to be compared, and each edge is a step or two
# away from a request it answers.
PLAIN_READS = [
    (None, "test://static-text"),
    (None, "test://static-binary"),
    (None, "file:///project/README.md"),
    ("staff", "file:///private/notes.txt"),
    ("admin", "TEST://static-text"),
    ("src", "file:///project/src/app.py"),
    ("admin", "test://bulk/0007"),
    *((name, uri) for name in GENERATED for uri in ["test://static-text", "file:///project/src/app.py"]),
]
PLAIN_COMPLETIONS = [
    (None, {"name": "id", "value": ""}),
    *((name, {"name": "id", "value": ""}) for name in GENERATED[:3]),
    ("staff", {"name": "id", "value": "4"}),
    ("admin", {"name": "id", "value": "1"}),
]
ENVELOPES = st.one_of(
    st.builds(
        lambda caps: {**envelope(), "io.modelcontextprotocol/clientCapabilities": caps},
        st.sampled_from(CAPABILITIES),
    ),
    st.builds(lambda info: {**envelope(), "io.modelcontextprotocol/clientInfo": info}, JSON),
    st.builds(
        lambda level: {**envelope(), "io.modelcontextprotocol/logLevel": level},
        st.sampled_from(["debug", "info", "nope", 3]),
    ),
    st.builds(
        lambda parent: {**envelope(), "traceparent": parent},
        st.sampled_from(["00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "garbage", 7]),
    ),
    bad_meta(),
)
IDS = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63),
    st.text(max_size=8),
    st.sampled_from([0, -1, 2**53 + 1, "", "1", 1.0, 1.5, True, None]),
)
EDGES = ["principal", "uri", "envelope", "id", "param", "cursor", "ref", "argument", "context"]


@st.composite
def requests(draw: st.DrawFn, srv: Served, http: httpx.Client) -> tuple[dict[str, Any], str | None, Any]:
    method = draw(st.sampled_from([READ, LIST, COMPLETE]))
    params: dict[str, Any] = {"_meta": envelope()}
    request_id: Any = draw(st.integers(min_value=0, max_value=2**31))
    uri: Any = None
    if method == READ:
        principal, uri = draw(st.sampled_from(PLAIN_READS))
    elif method == LIST:
        principal = draw(st.sampled_from(LISTERS))
        known = cursors(srv, http)[principal]
        if known and draw(st.booleans()):
            params["cursor"] = draw(st.sampled_from(known))
    else:
        principal, argument = draw(st.sampled_from(PLAIN_COMPLETIONS))
        params["ref"] = {"type": "ref/resource", "uri": "test://template/{id}/data"}
        params["argument"] = argument
    for edge in draw(st.lists(st.sampled_from(EDGES), max_size=2, unique=True)):
        if edge == "principal":
            principal = draw(st.sampled_from(PRINCIPALS))
        elif edge == "uri" and method == READ:
            uri = draw(st.one_of(st.sampled_from(VISIBLE_URIS), st.sampled_from(URIS), JSON))
        elif edge == "envelope":
            params["_meta"] = draw(ENVELOPES)
        elif edge == "id":
            request_id = draw(IDS)
        elif edge == "param":
            key = draw(
                st.sampled_from(["x", "cursor", "uri", "ref", "requestState", "inputResponses", "_meta"])
            )
            params[key] = draw(JSON)
        elif edge == "cursor" and method == LIST:
            choices = cursors(srv, http)[draw(st.sampled_from(PRINCIPALS))] or [""]
            params["cursor"] = draw(
                st.one_of(
                    st.sampled_from(choices),  # another principal's
                    st.builds(tampered, st.sampled_from(choices), st.integers(min_value=0, max_value=200)),
                    st.sampled_from(["", "null", "e30", "x" * 500]),
                    JSON,
                )
            )
        elif edge == "ref" and method == COMPLETE:
            params["ref"] = draw(
                st.sampled_from(
                    [
                        *({"type": "ref/resource", "uri": template} for template in TEMPLATES),
                        {"type": "ref/prompt", "name": "x"},
                        {"type": "ref/resource"},
                        {"type": "ref/resource", "uri": "test://template/{id}/data", "x": 1},
                    ]
                )
                | JSON
            )
        elif edge == "argument" and method == COMPLETE:
            params["argument"] = draw(
                st.fixed_dictionaries(
                    {"name": st.sampled_from(["id", "x", ""]), "value": st.text(max_size=3)}
                )
                | st.fixed_dictionaries({"name": st.just("id"), "value": JSON})
                | JSON
            )
        elif edge == "context" and method == COMPLETE:
            params["context"] = draw(
                st.sampled_from([{}, {"arguments": {}}, {"arguments": {"id": "4"}}, {"arguments": {"id": 4}}])
                | JSON
            )
    if method == READ:
        params["uri"] = uri
    message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    return message, principal, uri


PROPERTY = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@PROPERTY
@given(data=st.data())
def test_where_the_fast_path_answers_its_answer_is_the_sdks(
    srv: Served, http: httpx.Client, data: st.DataObject
) -> None:
    message, principal, uri = data.draw(requests(srv, http))
    taken = both(srv, http, message, headers_of(srv, message["method"], principal, uri))
    event(f"{message['method']}: {'the fast path' if taken else 'the SDK'} answered")


@pytest.mark.parametrize("method", [READ, LIST, COMPLETE])
def test_the_properties_requests_reach_the_fast_path(srv: Served, http: httpx.Client, method: str) -> None:
    """The property above proves something only if the fast path answers some of its requests:
    a plain request of each method is answered there, and equals the SDK's answer."""
    params: dict[str, Any] = {"_meta": envelope()}
    if method == READ:
        params["uri"] = "test://static-text"
    elif method == COMPLETE:
        params["ref"] = {"type": "ref/resource", "uri": "test://template/{id}/data"}
        params["argument"] = {"name": "id", "value": ""}
    message = {"jsonrpc": "2.0", "id": 3, "method": method, "params": params}
    assert both(srv, http, message, headers_of(srv, method, "staff", params.get("uri")))


@pytest.mark.parametrize("caps", [5, "x", None, [], True])
@pytest.mark.parametrize("method", [READ, LIST, COMPLETE])
def test_client_capabilities_that_are_not_an_object_are_refused_on_both_paths(
    srv: Served, http: httpx.Client, method: str, caps: Any
) -> None:
    """The audit's example: ``clientCapabilities: 5`` was answered by the fast path where
    the SDK refuses it; both now give the SDK's refusal."""
    params: dict[str, Any] = {"_meta": {**envelope(), "io.modelcontextprotocol/clientCapabilities": caps}}
    if method == READ:
        params["uri"] = "test://static-text"
    elif method == COMPLETE:
        params["ref"] = {"type": "ref/resource", "uri": "test://template/{id}/data"}
        params["argument"] = {"name": "id", "value": ""}
    message = {"jsonrpc": "2.0", "id": 4, "method": method, "params": params}
    assert not both(srv, http, message, headers_of(srv, method, "staff", params.get("uri")))
