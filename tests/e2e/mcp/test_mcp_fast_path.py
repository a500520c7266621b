"""The one-statement read path (``catalog.mcp.fast``): a plain 2026-07-28
``resources/read`` is answered without the SDK's stack, with exactly the SDK's answer; everything
else (every refusal, every error, consent, directories, templates) still goes through the SDK.

Each test counts the reads the path answered (``catalog_mcp_plain_answers_total``), so a test fails
when the path is taken where it must not be, or not taken where it should. A read is sent to the
SDK on purpose by adding a progress token to its envelope (the path leaves those to the SDK).
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from catalog.core.direct import listing as fast_listing
from catalog.core.grants import create_grant, delete_grant
from catalog.core.principal import Principal
from catalog.core.resources import LISTING_ENTRY_FIELDS
from catalog.core.schemas.grants import GrantIn
from catalog.core.tokens import delete_token, list_tokens
from catalog.observability import metrics
from tests.mcp_helpers import (
    HIDDEN,
    Served,
    acting_catalog,
    b64_header,
    envelope,
    mcp_settings,
    modern_headers,
    module_database,
    raw,
    served,
)

asynchronous = pytest.mark.asyncio(loop_scope="session")

README = "file:///project/README.md"
APP_PY = "file:///project/src/app.py"
BINARY = "test://static-binary"
CONSENT = "file:///project/docs/internal-notes.md"
DIRECTORY = "file:///project"
TEMPLATED = "test://template/42/data"


@pytest_asyncio.fixture(loop_scope="session")
async def srv(postgres_server: Any, template_database: str, tmp_path: Path) -> AsyncIterator[Served]:
    async with (
        module_database(postgres_server, template_database) as url,
        served(mcp_settings(url, tmp_path)) as s,
    ):
        yield s


async def revoke_admin_token(srv: Served) -> None:
    async with acting_catalog(srv) as catalog:
        (victim,) = [t for t in await list_tokens(catalog, srv.fixture.tenant) if t.admin]
        await delete_token(catalog, Principal.system("tests"), srv.fixture.tenant, victim.id)


def plain_reads() -> float:
    return metrics.MCP_PLAIN_ANSWERS.labels("resources/read")._value.get()  # type: ignore[attr-defined]


def read(srv: Served, uri: str, *, token: str | None = None, through_sdk: bool = False) -> httpx.Response:
    meta = {**envelope(), "progressToken": "to-the-sdk"} if through_sdk else envelope()
    return raw(srv, "resources/read", {"uri": uri, "_meta": meta}, token=token)


def counted(srv: Served, uri: str, *, token: str | None = None) -> tuple[httpx.Response, float]:
    before = plain_reads()
    response = read(srv, uri, token=token)
    return response, plain_reads() - before


@asynchronous
@pytest.mark.parametrize(
    ("uri", "token"),
    [
        (README, None),  # anonymous: the public tenant's grants
        (BINARY, None),  # a blob, base64 on the wire
        (APP_PY, "src"),  # a prefix grant
        (HIDDEN, "staff"),  # a tag grant
        (HIDDEN, "admin"),  # the tenant's admin sees everything
        ("TEST://static-text", "admin"),  # answered under the URI as the client spelt it
    ],
)
async def test_a_plain_read_takes_the_one_statement_path_and_answers_exactly_as_the_sdk(
    srv: Served, uri: str, token: str | None
) -> None:
    """RES-17 (a read answers the resource's contents), HTTP-4 (one JSON object): the same result
    as the SDK's, byte for byte once parsed, for text and blob, for each kind of grant."""
    fast, taken = counted(srv, uri, token=token)
    before = plain_reads()
    slow = read(srv, uri, token=token, through_sdk=True)
    assert plain_reads() == before, "a read with a progress token must go to the SDK"
    assert taken == 1
    assert fast.status_code == slow.status_code == 200
    assert fast.headers["content-type"] == slow.headers["content-type"] == "application/json"
    assert fast.json() == slow.json()
    (item,) = fast.json()["result"]["contents"]
    assert item["uri"] == uri
    assert fast.json()["result"]["resultType"] == "complete"
    assert fast.json()["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "catalog"
    if uri == BINARY:
        assert base64.b64decode(item["blob"]).startswith(b"\x89PNG")


@asynchronous
async def test_the_sdk_client_reads_through_the_one_statement_path(srv: Served) -> None:
    async with srv.client(token="src") as client:
        before = plain_reads()
        result = await client.read_resource(APP_PY)
        assert plain_reads() - before == 1
    assert "def greet" in result.contents[0].text  # type: ignore[union-attr]


@asynchronous
@pytest.mark.parametrize(
    ("uri", "token", "code"),
    [
        (HIDDEN, None, -32602),  # exists, invisible: the same answer as a missing URI
        (HIDDEN, "src", -32602),
        ("file:///nope.txt", "admin", -32602),
        ("test://static-text", "none", -32602),  # a scope no grant names
        ("test://other/1", "admin", -32602),  # the other tenant's template
        ("file:///a/../etc/passwd", "admin", -32602),  # a refused URI
    ],
)
async def test_what_the_path_cannot_answer_is_answered_by_the_sdk(
    srv: Served, uri: str, token: str | None, code: int
) -> None:
    response, taken = counted(srv, uri, token=token)
    assert taken == 0
    assert response.status_code == 400
    assert response.json()["error"]["code"] == code


@asynchronous
async def test_directories_consent_and_templates_take_the_full_path(srv: Served) -> None:
    directory, taken = counted(srv, DIRECTORY)
    assert taken == 0
    assert len(directory.json()["result"]["contents"]) >= 3  # its descendants' contents

    before = plain_reads()
    consent = raw(srv, "resources/read", {"uri": CONSENT}, token="admin", caps={"elicitation": {"form": {}}})
    assert plain_reads() == before
    assert consent.json()["result"]["resultType"] == "input_required"

    templated, taken = counted(srv, TEMPLATED)
    assert taken == 0
    assert '"id":"42"' in templated.json()["result"]["contents"][0]["text"]


@asynchronous
async def test_header_and_envelope_faults_are_the_sdks_to_refuse(srv: Served) -> None:
    """HTTP-5, HTTP-8: a mismatched ``Mcp-Name`` or version is -32020 from the SDK, never a read;
    a base64-encoded ``Mcp-Name`` (HTTP-8's encoding) is still a plain read.
    Also HTTP-14 (docs/requirements.toml)."""
    before = plain_reads()
    mismatch = raw(srv, "resources/read", {"uri": README}, headers={"Mcp-Name": APP_PY})
    assert mismatch.status_code == 400 and mismatch.json()["error"]["code"] == -32020
    version = raw(
        srv, "resources/read", {"uri": README, "_meta": envelope("2026-01-01")}, headers={"Mcp-Name": README}
    )
    assert version.status_code == 400
    assert plain_reads() == before
    encoded = raw(srv, "resources/read", {"uri": README}, headers={"Mcp-Name": b64_header(README)})
    assert encoded.status_code == 200 and plain_reads() == before + 1


@asynchronous
async def test_credentials_are_checked_on_every_plain_read(srv: Served) -> None:
    """A bogus token and a token in the query string get the full path's 401; a revoked token is
    refused on its very next read (the lookup is part of the read's one statement)."""
    before = plain_reads()
    bogus = raw(srv, "resources/read", {"uri": README}, headers={"Authorization": "Bearer cat_bogus"})
    assert bogus.status_code == 401 and bogus.headers["www-authenticate"].startswith("Bearer")
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "resources/read",
        "params": {"_meta": envelope(), "uri": README},
    }
    async with httpx.AsyncClient() as client:
        in_query = await client.post(
            srv.mcp_url + "?access_token=x", json=body, headers=modern_headers("resources/read", README)
        )
    assert in_query.status_code == 401
    assert plain_reads() == before

    response, taken = counted(srv, README, token="admin")
    assert (response.status_code, taken) == (200, 1)
    await revoke_admin_token(srv)
    refused, taken = counted(srv, README, token="admin")
    assert (refused.status_code, taken) == (401, 0)
    assert refused.headers["www-authenticate"].startswith("Bearer")


def plain_lists() -> float:
    return metrics.MCP_PLAIN_ANSWERS.labels("resources/list")._value.get()  # type: ignore[attr-defined]


def list_page(
    srv: Served, cursor: str | None, *, token: str | None, through_sdk: bool = False
) -> httpx.Response:
    meta = {**envelope(), "progressToken": "to-the-sdk"} if through_sdk else envelope()
    params: dict[str, Any] = {"_meta": meta}
    if cursor is not None:
        params["cursor"] = cursor
    return raw(srv, "resources/list", params, token=token)


@asynchronous
@pytest.mark.parametrize("token", [None, "src", "staff", "admin", "none"])
async def test_plain_list_pages_are_the_sdks_pages_page_for_page(srv: Served, token: str | None) -> None:
    """RES-1..RES-4 (pages, opaque cursors, the last page without ``nextCursor``): every page of
    the plain path equals the SDK's page for the same cursor, resource for resource (icons,
    annotations with ``lastModified``, ``_meta``), for each kind of principal.
    Also PAG-1 (docs/requirements.toml)."""
    cursor: str | None = None
    pages = 0
    seen: list[str] = []
    while True:
        before = plain_lists()
        fast = list_page(srv, cursor, token=token)
        assert plain_lists() - before == 1
        slow = list_page(srv, cursor, token=token, through_sdk=True)
        assert plain_lists() - before == 1, "a list with a progress token must go to the SDK"
        assert fast.status_code == slow.status_code == 200
        assert fast.json() == slow.json()
        result = fast.json()["result"]
        seen.extend(item["uri"] for item in result["resources"])
        pages += 1
        cursor = result.get("nextCursor")
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) and seen == sorted(seen, key=lambda uri: uri.encode())
    if token == "admin":
        assert pages == 3 and HIDDEN in seen  # the 250 bulk resources and the demo's
    if token in (None, "src", "none"):
        assert HIDDEN not in seen
    if token == "none":
        assert seen == []


@asynchronous
async def test_a_foreign_or_damaged_cursor_is_the_sdks_to_refuse(srv: Served) -> None:
    """PAG-5 (docs/requirements.toml)."""
    first = list_page(srv, None, token="admin").json()["result"]["nextCursor"]
    before = plain_lists()
    foreign = list_page(srv, first, token="src")  # another standing: another caller's cursor
    damaged = list_page(srv, first[:-2] + "xx", token="admin")
    assert plain_lists() == before
    for response in (foreign, damaged):
        assert response.status_code == 400
        assert response.json()["error"]["code"] == -32602
        assert response.json()["error"]["data"] == {"reason": "invalid_cursor"}


def plain_completions() -> float:
    return metrics.MCP_PLAIN_ANSWERS.labels("completion/complete")._value.get()  # type: ignore[attr-defined]


def complete(
    srv: Served,
    template: str,
    argument: dict[str, Any],
    *,
    context: dict[str, Any] | None = None,
    token: str | None = None,
    through_sdk: bool = False,
    ref_type: str = "ref/resource",
) -> httpx.Response:
    meta = {**envelope(), "progressToken": "to-the-sdk"} if through_sdk else envelope()
    params: dict[str, Any] = {"_meta": meta, "ref": {"type": ref_type, "uri": template}, "argument": argument}
    if context is not None:
        params["context"] = context
    return raw(srv, "completion/complete", params, token=token)


SRC_TEMPLATE = "file:///project/src/{name}"


@asynchronous
@pytest.mark.parametrize(
    ("argument", "context", "token"),
    [
        ({"name": "name", "value": ""}, None, None),
        ({"name": "name", "value": "ma"}, None, "src"),
        ({"name": "name", "value": ""}, {"arguments": {}}, "admin"),
        ({"name": "id", "value": "4"}, None, "admin"),  # another template's argument: no values
    ],
)
async def test_a_plain_completion_is_the_sdks_completion(
    srv: Served, argument: dict[str, Any], context: dict[str, Any] | None, token: str | None
) -> None:
    """COMP-1..3 (values of a template's argument from what the caller may see): the plain path's
    answer equals the SDK's."""
    template = SRC_TEMPLATE if argument["name"] == "name" else "test://template/{id}/data"
    before = plain_completions()
    fast = complete(srv, template, argument, context=context, token=token)
    assert plain_completions() - before == 1
    slow = complete(srv, template, argument, context=context, token=token, through_sdk=True)
    assert plain_completions() - before == 1
    assert fast.status_code == slow.status_code == 200
    assert fast.json() == slow.json()
    values = fast.json()["result"]["completion"]["values"]
    if template == SRC_TEMPLATE:
        assert "main.py" in values or argument["value"] == "ma"
        assert all(value.startswith(argument["value"]) for value in values)


@asynchronous
async def test_completion_refusals_are_the_sdks(srv: Served) -> None:
    """COMP-5 (docs/requirements.toml)."""
    before = plain_completions()
    unknown = complete(srv, "file:///nowhere/{x}", {"name": "x", "value": ""}, token="admin")
    foreign = complete(srv, "test://other/{x}", {"name": "x", "value": ""}, token="admin")
    prompt = complete(srv, "greeting", {"name": "x", "value": ""}, token="admin", ref_type="ref/prompt")
    wrong_argument = complete(srv, SRC_TEMPLATE, {"name": "nope", "value": ""}, token="admin")
    assert plain_completions() == before
    for response in (unknown, foreign, prompt, wrong_argument):
        assert response.json()["error"]["code"] == -32602, response.text


@asynchronous
async def test_completion_refusals_are_the_sdks_for_a_credential_seen_before(srv: Served) -> None:
    """Once a credential's visibility is remembered, its completion is authenticated by the scan's
    own statement: an unknown template, a refused argument and a revoked token still go to the SDK."""
    assert complete(srv, SRC_TEMPLATE, {"name": "name", "value": ""}, token="admin").status_code == 200
    before = plain_completions()
    unknown = complete(srv, "file:///nowhere/{x}", {"name": "x", "value": ""}, token="admin")
    wrong_argument = complete(srv, SRC_TEMPLATE, {"name": "nope", "value": ""}, token="admin")
    assert plain_completions() == before
    for response in (unknown, wrong_argument):
        assert response.json()["error"]["code"] == -32602, response.text
    assert complete(srv, SRC_TEMPLATE, {"name": "name", "value": ""}, token="admin").status_code == 200
    assert plain_completions() == before + 1
    await revoke_admin_token(srv)
    refused = complete(srv, SRC_TEMPLATE, {"name": "name", "value": ""}, token="admin")
    assert plain_completions() == before + 1
    assert refused.status_code == 401, refused.text


@asynchronous
async def test_trace_context_in_the_envelope_does_not_keep_a_read_off_the_plain_path(srv: Served) -> None:
    """A client with OpenTelemetry sends ``traceparent`` in ``_meta`` (spec 1.1); with catalog's
    tracing off nothing would record it, so the read is still plain (and still the SDK's answer)."""
    meta = {**envelope(), "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    before = plain_reads()
    traced = raw(srv, "resources/read", {"uri": README, "_meta": meta})
    assert plain_reads() - before == 1
    assert traced.json() == read(srv, README, through_sdk=True).json()


def post_method(srv: Served, method: Any) -> httpx.Response:
    """A read's body and headers with ``method`` in place of the method name."""
    body = {"jsonrpc": "2.0", "id": 0, "method": method, "params": {"_meta": envelope(), "uri": README}}
    return httpx.post(srv.mcp_url, json=body, headers=modern_headers("resources/read", README), timeout=30)


@asynchronous
@pytest.mark.parametrize("method", [[], {}, ["resources/read"], 7, None])
async def test_a_method_that_is_not_a_string_is_the_sdks_to_refuse(srv: Served, method: Any) -> None:
    """Found by the fuzzer: an unhashable ``method`` (a list) reached a set lookup and answered 500.
    The path now leaves every non-string method to the SDK, which refuses it as invalid JSON-RPC."""
    before = plain_reads()
    response = post_method(srv, method)
    assert plain_reads() == before
    assert response.status_code == 400
    assert response.json()["error"]["code"] in (-32600, -32602), response.text


async def change_grant(srv: Served, body: dict[str, Any] | None, grant_id: int | None = None) -> int:
    """Create a grant of the fixture tenant (``body``) or delete one (``grant_id``); its id."""
    system = Principal.system("tests")
    async with acting_catalog(srv) as catalog:
        if grant_id is not None:
            await delete_grant(catalog, system, srv.fixture.tenant, grant_id)
            return grant_id
        return (await create_grant(catalog, system, srv.fixture.tenant, GrantIn.model_validate(body))).id


@asynchronous
async def test_a_credentials_next_page_rides_on_its_authentication_until_its_grants_change(
    srv: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain list page is one statement: the credential's authentication and grants, and the page
    read with the selectors its last page had (migration 0009). A grant made or removed between two
    pages shows on the very next one (the stale page is discarded and asked again), and every page
    is still the SDK's."""
    asked_again: list[str | None] = []
    visible_page = fast_listing.visible_page

    async def counted(*args: Any, **kwargs: Any) -> Any:
        asked_again.append(kwargs.get("cursor"))
        return await visible_page(*args, **kwargs)

    monkeypatch.setattr(fast_listing, "visible_page", counted)

    def listed() -> list[str]:
        fast = list_page(srv, None, token="src")
        assert fast.json() == list_page(srv, None, token="src", through_sdk=True).json()
        return [item["uri"] for item in fast.json()["result"]["resources"]]

    listed()  # remembers this credential's visibility (if an earlier test did not already)
    asked_again.clear()
    before = listed()
    assert asked_again == [] and HIDDEN not in before and APP_PY in before

    grant_id = await change_grant(srv, {"scope": "src", "uri": HIDDEN})
    assert listed() == sorted([*before, HIDDEN], key=lambda uri: uri.encode())
    assert asked_again == [None]  # the remembered selectors were stale: asked again
    asked_again.clear()
    assert HIDDEN in listed() and asked_again == []

    await change_grant(srv, None, grant_id)
    assert listed() == before and asked_again == [None]


async def test_a_plain_pages_rows_are_a_listing_entrys_fields_in_order(db: Any) -> None:
    """``catalog_plain_page``'s page columns (after the principal's) are ``ListingEntry``'s fields
    in order: the plain list path hands each row's values to the wire by position."""
    columns = await db.fetchval(
        "SELECT array_agg(name ORDER BY n) FROM pg_proc,"
        " unnest(proargnames, proargmodes::text[]) WITH ORDINALITY AS a(name, mode, n)"
        " WHERE proname = 'catalog_plain_page' AND mode = 't'"
    )
    assert tuple(columns[fast_listing.FAST_PAGE_LISTED :]) == LISTING_ENTRY_FIELDS
