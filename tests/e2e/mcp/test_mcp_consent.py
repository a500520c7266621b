"""Consent-gated reads (``consentMessage``): MRTR at 2026-07-28 (MRTR-1..11, CACHE-3, CACHE-8,
META-3) and server-initiated elicitation in 2025-11-25 sessions (COMPAT-11); the purpose is audited."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import mcp_types as types
import pytest
import pytest_asyncio
from mcp.shared.exceptions import MCPError
from sqlalchemy.engine import make_url

from catalog.core.schemas.base import MAX_CONSENT_PURPOSE_LENGTH
from catalog.mcp.context import CONSENT_DECLINED
from tests.mcp_helpers import (
    Served,
    accepting,
    answering,
    envelope,
    mcp_settings,
    modern_headers,
    module_database,
    raw,
    served,
)

pytestmark = pytest.mark.asyncio(loop_scope="session")

GATED = "file:///project/docs/internal-notes.md"
GATED_TEXT = "# Internal notes\n\nThe greeting should become configurable.\n"
ACCEPT = {"consent": {"action": "accept", "content": {"accept": True, "purpose": "raw purpose"}}}
FORM = {"elicitation": {"form": {}}}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def srv(postgres_server: Any, template_database: str, tmp_path_factory: Any) -> AsyncIterator[Served]:
    async with module_database(postgres_server, template_database) as url:
        settings = mcp_settings(url, Path(tmp_path_factory.mktemp("home")))
        async with served(settings) as s:
            yield s


async def consent_audit(srv: Served) -> list[tuple[str, str, str]]:
    url = make_url(srv.database_url).set(drivername="postgresql")
    conn = await asyncpg.connect(url.render_as_string(hide_password=False))
    try:
        rows = await conn.fetch(
            "SELECT principal, uri, detail->>'purpose' AS purpose FROM audit_log"
            " WHERE action = 'resource.consent' ORDER BY id"
        )
    finally:
        await conn.close()
    return [(r["principal"], r["uri"], r["purpose"]) for r in rows]


async def test_accept_returns_contents_uncached_and_audits_the_purpose_mrtr_1_cache_8(srv: Served) -> None:
    async with srv.client(elicitation_callback=accepting("write the release notes")) as client:
        result = await client.read_resource(GATED)  # the SDK's MRTR driver answers and retries
    [item] = result.contents
    assert item.text == GATED_TEXT  # type: ignore[union-attr]
    assert (result.ttl_ms, result.cache_scope) == (0, "private")
    assert ("anonymous", GATED, "write the release notes") in await consent_audit(srv)


async def test_interim_result_has_form_sealed_state_and_no_cache_hints_mrtr_3_mrtr_4_cache_3(
    srv: Served,
) -> None:
    """RES-10, MRTR-1, MRTR-12 (docs/requirements.toml)."""
    response = raw(srv, "resources/read", {"uri": GATED}, caps=FORM)
    assert response.status_code == 200
    result = response.json()["result"]
    assert result["resultType"] == "input_required"
    assert "ttlMs" not in result and "cacheScope" not in result
    request = result["inputRequests"]["consent"]
    assert request["method"] == "elicitation/create"
    assert request["params"]["message"] == "These notes are internal. Say why you need them."
    schema = request["params"]["requestedSchema"]
    assert set(schema["required"]) == {"accept", "purpose"}
    assert result["requestState"].startswith("v1.") and "consent" not in result["requestState"]


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_decline_or_cancel_is_an_error_never_empty_contents_res_18(srv: Served, action: str) -> None:
    before = await consent_audit(srv)
    async with srv.client(elicitation_callback=answering(action)) as client:
        with pytest.raises(MCPError) as err:
            await client.read_resource(GATED)
    assert err.value.code == CONSENT_DECLINED
    assert err.value.error.data == {"uri": GATED, "action": action}
    assert await consent_audit(srv) == before


async def test_client_without_elicitation_gets_32021_naming_the_capability_meta_3_mrtr_5(srv: Served) -> None:
    async with srv.client() as client:  # no elicitation callback: the capability is not declared
        with pytest.raises(MCPError) as err:
            await client.read_resource(GATED)
    assert err.value.code == -32021
    assert err.value.error.data == {"requiredCapabilities": {"elicitation": {"form": {}}}}
    response = raw(srv, "resources/read", {"uri": GATED})
    assert response.status_code == 400 and response.json()["error"]["code"] == -32021


async def test_capability_declared_earlier_is_not_remembered_meta_2(srv: Served) -> None:
    assert (
        raw(srv, "resources/read", {"uri": GATED}, caps=FORM).json()["result"]["resultType"]
        == "input_required"
    )
    assert raw(srv, "resources/read", {"uri": GATED}).json()["error"]["code"] == -32021


async def test_retry_on_a_fresh_connection_completes_statelessly_mrtr_11(srv: Served) -> None:
    """META-8 (docs/requirements.toml)."""
    first = raw(srv, "resources/read", {"uri": GATED}, caps=FORM).json()["result"]
    retry = raw(
        srv,
        "resources/read",
        {"uri": GATED, "requestState": first["requestState"], "inputResponses": ACCEPT},
        caps=FORM,
        id=2,
    )
    assert retry.status_code == 200
    result = retry.json()["result"]
    assert result["resultType"] == "complete" and result["contents"][0]["text"] == GATED_TEXT
    assert (result["ttlMs"], result["cacheScope"]) == (0, "private")


async def test_retry_without_purpose_or_answer_asks_again_mrtr_9(srv: Served) -> None:
    state = raw(srv, "resources/read", {"uri": GATED}, caps=FORM).json()["result"]["requestState"]
    no_purpose = {"consent": {"action": "accept", "content": {"accept": True, "purpose": " "}}}
    for responses in (no_purpose, {}, {"unrelated": {"action": "accept"}}):
        again = raw(
            srv,
            "resources/read",
            {"uri": GATED, "requestState": state, "inputResponses": responses},
            caps=FORM,
        )
        assert again.json()["result"]["resultType"] == "input_required"


async def test_extra_input_responses_are_ignored_mrtr_10(srv: Served) -> None:
    state = raw(srv, "resources/read", {"uri": GATED}, caps=FORM).json()["result"]["requestState"]
    responses = {**ACCEPT, "extra": {"action": "decline"}}
    result = raw(
        srv, "resources/read", {"uri": GATED, "requestState": state, "inputResponses": responses}, caps=FORM
    )
    assert result.json()["result"]["contents"][0]["text"] == GATED_TEXT


async def test_tampered_replayed_or_moved_state_is_rejected_mrtr_6_mrtr_7(srv: Served) -> None:
    """MRTR-8 (docs/requirements.toml)."""
    state = raw(srv, "resources/read", {"uri": GATED}, caps=FORM).json()["result"]["requestState"]
    flipped = state[:-3] + ("A" if state[-3] != "A" else "B") + state[-2:]
    cases: list[tuple[str, str, str | None]] = [
        (flipped, GATED, None),
        ("consent", GATED, None),  # the plaintext itself is not accepted
        (state, "file:///project/README.md", None),  # minted for another URI
        (state, GATED, "staff"),  # minted for another principal
    ]
    for request_state, uri, token in cases:
        response = raw(
            srv,
            "resources/read",
            {"uri": uri, "requestState": request_state, "inputResponses": ACCEPT},
            caps=FORM,
            token=token,
        )
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == -32602 and error["data"] == {"reason": "invalid_request_state"}


async def test_no_interim_result_for_an_invisible_gated_resource(srv: Served) -> None:
    response = raw(srv, "resources/read", {"uri": GATED}, caps=FORM, token="src")
    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": -32602,
        "message": "Resource not found",
        "data": {"uri": GATED},
    }


# -- 2025-11-25 sessions: server-initiated elicitation ---------------------------------------------


async def test_legacy_session_elicits_and_audits_compat_11(srv: Served) -> None:
    asked: list[str] = []

    async def callback(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"accept": True, "purpose": "legacy purpose"})

    async with srv.client("legacy", token="staff", elicitation_callback=callback) as client:
        result = await client.read_resource(GATED)
    assert result.contents[0].text == GATED_TEXT  # type: ignore[union-attr]
    assert asked == ["These notes are internal. Say why you need them."]
    audit = await consent_audit(srv)
    assert audit[-1][1:] == (GATED, "legacy purpose") and audit[-1][0].startswith("token:")


async def test_legacy_decline_is_an_error_and_no_elicitation_capability_is_32602(srv: Served) -> None:
    async with srv.client("legacy", elicitation_callback=answering("decline")) as client:
        with pytest.raises(MCPError) as err:
            await client.read_resource(GATED)
        assert err.value.code == CONSENT_DECLINED
    async with srv.client("legacy") as client:
        with pytest.raises(MCPError) as err:
            await client.read_resource(GATED)
        assert err.value.code == -32602
        assert err.value.error.data["requiredCapabilities"] == {"elicitation": {"form": {}}}


async def test_directory_read_leaves_out_gated_children_without_asking(srv: Served) -> None:
    async with srv.client(elicitation_callback=accepting()) as client:
        result = await client.read_resource("file:///project/docs")
    assert [c.uri for c in result.contents] == ["file:///project/docs/guide.md"]


# -- the purpose is free text: bounded, no NUL, valid Unicode ----------------------------------------


def _retry_with_purpose(srv: Served, purpose_json: str) -> Any:
    """A consent retry whose purpose is the raw JSON string literal ``purpose_json`` (so lone
    surrogates can be sent as ``\\ud800`` escapes, which no client library would produce)."""
    state = raw(srv, "resources/read", {"uri": GATED}, caps=FORM).json()["result"]["requestState"]
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "resources/read",
            "params": {
                "_meta": envelope(caps=FORM),
                "uri": GATED,
                "requestState": state,
                "inputResponses": {
                    "consent": {"action": "accept", "content": {"accept": True, "purpose": "@PURPOSE@"}}
                },
            },
        }
    ).replace('"@PURPOSE@"', purpose_json)
    headers = modern_headers("resources/read", GATED)
    return httpx.post(srv.mcp_url, content=body.encode(), headers=headers, timeout=30)


@pytest.mark.parametrize(
    ("purpose_json", "reason"),
    [
        ('"to debug\\u0000 it"', "NUL"),
        ('"to debug \\ud800 it"', "surrogate"),
        ('"to debug \\udfff"', "surrogate"),
        (json.dumps("x" * (MAX_CONSENT_PURPOSE_LENGTH + 1)), "at most"),
    ],
)
async def test_an_unstorable_or_oversized_purpose_is_32602_and_nothing_is_read_res_23(
    srv: Served, purpose_json: str, reason: str
) -> None:
    """MRTR-10 (docs/requirements.toml)."""
    before = await consent_audit(srv)
    response = _retry_with_purpose(srv, purpose_json)
    error = response.json()["error"]
    assert error["code"] == -32602, error
    assert "purpose" in error["message"] and reason in error["message"], error
    assert "result" not in response.json()
    assert await consent_audit(srv) == before


async def test_a_purpose_at_the_limit_is_audited_whole(srv: Served) -> None:
    purpose = "é" * MAX_CONSENT_PURPOSE_LENGTH
    response = _retry_with_purpose(srv, json.dumps(purpose))
    assert response.json()["result"]["contents"][0]["text"] == GATED_TEXT
    assert (await consent_audit(srv))[-1][2] == purpose
