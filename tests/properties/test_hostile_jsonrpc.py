"""A JSON-RPC fuzzer on /mcp over real HTTP.

Hypothesis sends malformed JSON, non-object bodies, batches, wrong types for ``jsonrpc``/``id``/
``method``/``params``, unknown methods, bad ``_meta`` envelopes (missing or mistyped keys, reserved
keys, unknown versions) and mismatched or missing ``MCP-Protocol-Version``/``Mcp-Method``/
``Mcp-Name`` headers. Every answer must be a 2xx/4xx, never a 5xx; every error body must be a
well-formed JSON-RPC error whose code is one the spec allows (ERR-2) with the HTTP status the spec's
table gives it (HTTP-5/6/8, SEP-2164: -32601 is 404, the others 400), repeating the request's id
when it could be read (ERR-3); ``id: null`` is never accepted as a request (ERR-4). After every
batch of examples the server still answers a normal read (no crashed worker).
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.mcp_helpers import (
    LEGACY,
    MODERN,
    Served,
    envelope,
    mcp_settings,
    module_database,
    served,
    sse_messages,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.process,
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

# JSON-RPC codes this server may put on the wire, and the HTTP status each travels with.
STATUS_OF_CODE = {
    -32700: {400},
    -32600: {400, 406, 413, 415},  # also the transport's Accept/Content-Type refusals
    -32601: {404},
    -32602: {400},
    -32603: {200, 503},
    -32020: {400},
    -32021: {400},
    -32022: {400},
    -32002: {200},  # legacy (2025-11-25 session) not found
    -31001: {200},  # consent declined (application-defined)
}
# Where a legacy (2025-11-25) transport refuses a request it has no session for, it answers 4xx
# with an id of its own choosing; those are checked for shape and status, not for id equality.
LEGACY_IDLESS_IDS = {"server-error", None}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def srv(postgres_server: Any, template_database: str, tmp_path_factory: Any) -> AsyncIterator[Served]:
    async with module_database(postgres_server, template_database) as url:
        settings_ = mcp_settings(url, Path(tmp_path_factory.mktemp("home")))
        async with served(settings_) as s:
            yield s


@pytest.fixture(scope="module")
def http(srv: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=srv.base_url, timeout=30) as client:
        yield client


# -- strategies ------------------------------------------------------------------------------------

METHODS = [
    "resources/list", "resources/read", "resources/templates/list", "completion/complete",
    "subscriptions/listen", "server/discover", "initialize", "ping", "foo/bar", "", "resources/",
    "notifications/cancelled", "notifications/initialized", "rpc.discover", "RESOURCES/LIST",
    "resources/read\x00", "résources/list", "a" * 300,
]  # fmt: skip
URIS = [
    "test://static-text", "file:///private/notes.txt", "file:///project/../private/notes.txt",
    "test://template/1/data", "", "\x00", "x" * 3000, "é://x", "\ud800",
]  # fmt: skip
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=12)
    | st.sampled_from(URIS)
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
MISSING = object()


def bad_meta() -> st.SearchStrategy[Any]:
    good = envelope()
    return st.one_of(
        st.just(good),
        st.just(envelope(LEGACY)),
        st.just(envelope("1999-01-01")),
        st.builds(lambda k: {kk: v for kk, v in good.items() if kk != k}, st.sampled_from(sorted(good))),
        st.builds(lambda k, v: {**good, k: v}, st.sampled_from(sorted(good)), JSON),
        st.builds(
            lambda k, v: {**good, f"io.modelcontextprotocol/{k}": v},
            st.sampled_from(["subscriptionId", "progressToken", "related-task", "x", ""]),
            JSON,
        ),
        JSON,
    )


def params_for(method: Any) -> st.SearchStrategy[Any]:
    extra = st.fixed_dictionaries(
        {},
        optional={
            "uri": st.sampled_from(URIS) | JSON,
            "cursor": st.text(max_size=40) | JSON,
            "ref": st.fixed_dictionaries({"type": st.just("ref/resource"), "uri": st.sampled_from(URIS)})
            | JSON,
            "argument": st.fixed_dictionaries({"name": st.text(max_size=5), "value": st.text(max_size=5)})
            | JSON,
            "notifications": JSON,
            "requestState": st.text(max_size=40),
            "inputResponses": JSON,
        },
    )
    with_meta = st.builds(lambda meta, rest: {"_meta": meta, **rest}, bad_meta(), extra)
    return st.one_of(with_meta, with_meta, extra, JSON)


@st.composite
def requests(draw: st.DrawFn) -> Any:
    message: dict[str, Any] = {}
    jsonrpc = draw(st.sampled_from(["2.0", "2.0", "2.0", "1.0", 2.0, None, MISSING]))
    if jsonrpc is not MISSING:
        message["jsonrpc"] = jsonrpc
    request_id = draw(
        st.one_of(
            st.integers(min_value=-(2**53), max_value=2**53),
            st.text(max_size=10),
            st.sampled_from([None, MISSING, True, 1.5, [], {}, 2**80]),
        )
    )
    if request_id is not MISSING:
        message["id"] = request_id
    method = draw(st.sampled_from(METHODS) | JSON)
    message["method"] = method
    params = draw(params_for(method) | st.just(MISSING))
    if params is not MISSING:
        message["params"] = params
    return message


def headers_for(message: Any) -> st.SearchStrategy[dict[str, str]]:
    method = message.get("method") if isinstance(message, dict) else None
    params = message.get("params") if isinstance(message, dict) else None
    uri = params.get("uri") if isinstance(params, dict) else None

    def encode(value: Any) -> str:
        text = value if isinstance(value, str) else json.dumps(value)
        if text.isascii() and text.isprintable() and text == text.strip():
            return text
        return "=?base64?" + base64.b64encode(text.encode("utf-8", "surrogatepass")).decode() + "?="

    version = st.sampled_from([MODERN, MODERN, MODERN, LEGACY, "1999-01-01", "", MISSING])
    method_header = st.sampled_from(["match", "match", "match", "other", "garbage", MISSING])
    name_header = st.sampled_from(["match", "match", "other", MISSING])

    def build(v: Any, m: Any, n: Any, accept: Any) -> dict[str, str]:
        h = {"Content-Type": "application/json"}
        if accept is not MISSING:
            h["Accept"] = accept
        if v is not MISSING:
            h["MCP-Protocol-Version"] = v
        if m == "match" and method is not None:
            h["Mcp-Method"] = encode(method)
        elif m == "other":
            h["Mcp-Method"] = "resources/list"
        elif m == "garbage":
            h["Mcp-Method"] = "=?base64?!!!?="
        if n == "match" and uri is not None:
            h["Mcp-Name"] = encode(uri)
        elif n == "other":
            h["Mcp-Name"] = "test://static-binary"
        return h

    accept = st.sampled_from(
        ["application/json, text/event-stream"] * 4 + ["application/json", "text/html", MISSING]
    )
    return st.builds(build, version, method_header, name_header, accept)


# -- checking one answer ---------------------------------------------------------------------------


def readable_id(message: Any) -> Any:
    """The request id as JSON-RPC allows it (string or integer), else MISSING."""
    if isinstance(message, dict) and "id" in message:
        value = message["id"]
        if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
            return value
    return MISSING


def check_error(error_message: Any, status: int, request: Any, legacy: bool) -> None:
    assert isinstance(error_message, dict) and error_message.get("jsonrpc") == "2.0", error_message
    assert "result" not in error_message, error_message
    error = error_message["error"]
    assert isinstance(error["code"], int) and not isinstance(error["code"], bool), error
    assert isinstance(error["message"], str) and error["message"], error
    code = error["code"]
    assert code in STATUS_OF_CODE, error  # ERR-2: no code outside the defined/documented set
    assert status in STATUS_OF_CODE[code], (status, error)
    # The database is up: -32603 would be an unhandled exception in a handler (a bug), not input.
    assert code != -32603, (request, error)
    wanted = readable_id(request)
    if code in (-32700, -32600) and error_message.get("id") is None:
        # JSON-RPC 2.0 section 5: a Parse error / Invalid Request (the object is not a request, so
        # its id is not trusted) carries id null; the SDK does so for any malformed request object.
        return
    if wanted is not MISSING and not (legacy and error_message.get("id") in LEGACY_IDLESS_IDS):
        assert error_message.get("id") == wanted, (request, error_message)  # ERR-3


def check_answer(response: httpx.Response, request: Any, legacy: bool) -> None:
    assert response.status_code < 500, (response.status_code, response.text[:500], request)
    if response.status_code == 202:
        assert response.content == b""  # an accepted notification: no body (HTTP-3)
        assert isinstance(request, dict) and "id" not in request
        return
    content_type = response.headers.get("content-type", "")
    if content_type.startswith("text/event-stream"):
        messages = sse_messages(response.text)
    elif content_type.startswith("application/json"):
        messages = [response.json()]
    else:
        # The SDK's bare 4xx (406 without a usable Accept, 405 for a method, 400 for a 2025 request
        # without its session): plain HTTP refusals before any JSON-RPC exists.
        assert 400 <= response.status_code < 500, (response.status_code, response.text[:300])
        return
    for message in messages:
        if isinstance(message, dict) and "error" in message:
            check_error(message, response.status_code, request, legacy)
            if isinstance(request, dict) and request.get("id") is None and "id" in request:
                pass  # id null: an error is the only acceptable answer (ERR-4); checked below
        else:
            assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", message
            if "id" in message and "result" in message:
                assert 200 <= response.status_code < 300
                assert readable_id(request) == message["id"], (request, message)  # ERR-4: never id null


LISTEN_ACKNOWLEDGED = "notifications/subscriptions/acknowledged"


def post(http: httpx.Client, body: bytes, headers: dict[str, str]) -> httpx.Response:
    """The answer to ``body``, read to its end -- or, for a stream that a valid
    ``subscriptions/listen`` keeps open (SUB-*: keep-alives every 15 s, so no read ever times
    out), to the event that answers the request or acknowledges the subscription."""
    with http.stream("POST", "/mcp", content=body, headers=headers) as response:
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            response.read()
            return response
        lines: list[str] = []
        for line in response.iter_lines():
            lines.append(line)
            if line.startswith("data:") and line[5:].strip():
                message = json.loads(line[5:])
                answered = isinstance(message, dict) and ("result" in message or "error" in message)
                if answered or (isinstance(message, dict) and message.get("method") == LISTEN_ACKNOWLEDGED):
                    break
    text = "\n".join(lines) + "\n"
    return httpx.Response(response.status_code, headers={"content-type": "text/event-stream"}, text=text)


def still_serving(srv: Served, http: httpx.Client) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": "alive",
        "method": "resources/read",
        "params": {"_meta": envelope(), "uri": "test://static-text"},
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "resources/read",
        "Mcp-Name": "test://static-text",
    }
    response = http.post("/mcp", json=body, headers=headers)
    assert response.status_code == 200, response.text
    assert response.json()["result"]["contents"][0]["uri"] == "test://static-text"


FUZZ = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def encode_json(value: Any) -> bytes:
    return json.dumps(value).encode("utf-8", "surrogatepass")


@FUZZ
@given(data=st.data())
def test_fuzzed_requests_get_well_formed_errors_or_results(
    srv: Served, http: httpx.Client, data: st.DataObject
) -> None:
    """ERR-1, ERR-2, ERR-3, ERR-5, HTTP-3 (docs/requirements.toml)."""
    request = data.draw(requests())
    headers = data.draw(headers_for(request))
    response = post(http, encode_json(request), headers)
    legacy = headers.get("MCP-Protocol-Version") != MODERN
    check_answer(response, request, legacy)


@FUZZ
@given(
    body=st.one_of(
        st.binary(max_size=200),
        st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
        JSON.map(encode_json),  # any JSON value: scalars, arrays, objects that are not requests
        st.lists(requests(), min_size=0, max_size=4).map(encode_json),  # batches
        st.sampled_from(
            [b"", b"{", b"[", b'{"jsonrpc":"2.0","id":1', b"null", b"[]", b"{}", b"\xff\xfe", b"\x00" * 10]
        ),
    ),
    version=st.sampled_from([MODERN, LEGACY, None]),
)
def test_fuzzed_bodies_that_are_not_one_request_are_refused_cleanly(
    srv: Served, http: httpx.Client, body: bytes, version: str | None
) -> None:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if version:
        headers["MCP-Protocol-Version"] = version
        headers["Mcp-Method"] = "resources/list"
    try:
        request = json.loads(body)
    except ValueError:
        request = None
    response = post(http, body, headers)
    check_answer(response, request, version != MODERN)
    if isinstance(request, dict) and "id" in request:
        return
    # Not a request: never a result.
    assert not (response.status_code == 200 and '"result"' in response.text), response.text


def test_a_valid_listen_among_the_fuzzed_requests_is_read_to_its_acknowledgement(
    srv: Served, http: httpx.Client
) -> None:
    """The fuzzer can draw a valid ``subscriptions/listen``: its stream stays open, so ``post``
    reads it to the acknowledgement (SUB-3) instead of waiting for an end that never comes."""
    request = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "subscriptions/listen",
        "params": {"_meta": envelope(), "notifications": {"resourcesListChanged": True}},
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "subscriptions/listen",
    }
    response = post(http, encode_json(request), headers)
    check_answer(response, request, legacy=False)
    messages = sse_messages(response.text)
    assert [m.get("method") for m in messages] == [LISTEN_ACKNOWLEDGED], messages


def test_the_server_still_answers_after_the_fuzzing(srv: Served, http: httpx.Client) -> None:
    still_serving(srv, http)
    ready = http.get("/readyz")
    assert ready.status_code == 200, ready.text


def test_id_null_is_an_error_never_a_result_err_4(srv: Served, http: httpx.Client) -> None:
    body = {"jsonrpc": "2.0", "id": None, "method": "resources/list", "params": {"_meta": envelope()}}
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "resources/list",
    }
    response = http.post("/mcp", json=body, headers=headers)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32600
    assert "result" not in response.json()


def test_a_batch_array_is_refused_with_32600(srv: Served, http: httpx.Client) -> None:
    """HTTP-1 (docs/requirements.toml)."""
    one = {"jsonrpc": "2.0", "id": 1, "method": "resources/list", "params": {"_meta": envelope()}}
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "resources/list",
    }
    response = http.post("/mcp", json=[one, {**one, "id": 2}], headers=headers)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32600
