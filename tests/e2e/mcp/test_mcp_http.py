"""Streamable HTTP rules over raw HTTP (HTTP-1..13, DISC-2, META-1, COMPAT-5/8, AUTH-3/7/13,
ERR-3): headers, versions, methods, Accept, auth, DNS rebinding and protected-resource metadata."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from tests.mcp_helpers import (
    LEGACY,
    MODERN,
    Served,
    b64_header,
    envelope,
    mcp_settings,
    modern_headers,
    module_database,
    raw,
    served,
    sse_messages,
)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def srv(postgres_server: Any, template_database: str, tmp_path_factory: Any) -> AsyncIterator[Served]:
    async with module_database(postgres_server, template_database) as url:
        settings = mcp_settings(url, Path(tmp_path_factory.mktemp("home")))
        async with served(settings) as s:
            yield s


def error_of(response: httpx.Response) -> dict[str, Any]:
    return response.json()["error"]


# -- Mcp-Method / Mcp-Name / version ---------------------------------------------------------------


def test_missing_or_mismatched_mcp_method_is_400_32020_http_8(srv: Served) -> None:
    for response in (
        raw(srv, "resources/list", drop=("Mcp-Method",)),
        raw(srv, "resources/list", headers={"Mcp-Method": "resources/read"}),
    ):
        assert response.status_code == 400 and error_of(response)["code"] == -32020
        assert response.json()["id"] == 1  # ERR-3


def test_missing_or_mismatched_mcp_name_is_400_32020_http_8(srv: Served) -> None:
    """HTTP-14 (docs/requirements.toml)."""
    for response in (
        raw(srv, "resources/read", {"uri": "test://static-text"}, drop=("Mcp-Name",)),
        raw(
            srv, "resources/read", {"uri": "test://static-text"}, headers={"Mcp-Name": "test://static-binary"}
        ),
    ):
        assert response.status_code == 400 and error_of(response)["code"] == -32020


def test_base64_encoded_mcp_name_is_decoded_before_comparison_http_8(srv: Served) -> None:
    """DISC-3 (docs/requirements.toml)."""
    response = raw(
        srv,
        "resources/read",
        {"uri": "test://static-text"},
        headers={"Mcp-Name": b64_header("test://static-text")},
    )
    assert response.status_code == 200
    assert (
        response.json()["result"]["contents"][0]["text"] == "This is the content of the static text resource."
    )


def test_body_version_differing_from_header_is_400_32020_http_5(srv: Served) -> None:
    """HTTP-14 (docs/requirements.toml)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "resources/list", "params": {"_meta": envelope(LEGACY)}}
    response = httpx.post(srv.mcp_url, json=body, headers=modern_headers("resources/list"))
    assert response.status_code == 400 and error_of(response)["code"] == -32020


def test_unsupported_version_is_400_32022_with_supported_list_disc_2(srv: Served) -> None:
    """HTTP-6, COMPAT-8 (docs/requirements.toml)."""
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "resources/list",
        "params": {"_meta": envelope("2027-01-01")},
    }
    headers = {**modern_headers("resources/list"), "MCP-Protocol-Version": "2027-01-01"}
    response = httpx.post(srv.mcp_url, json=body, headers=headers)
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == -32022 and error["data"]["requested"] == "2027-01-01"
    assert MODERN in error["data"]["supported"] and response.json()["id"] == 7


def test_missing_envelope_keys_are_400_32602_meta_1(srv: Served) -> None:
    for meta in ({}, {"io.modelcontextprotocol/protocolVersion": MODERN}):
        body = {"jsonrpc": "2.0", "id": 3, "method": "resources/list", "params": {"_meta": meta}}
        response = httpx.post(srv.mcp_url, json=body, headers=modern_headers("resources/list"))
        assert response.status_code == 400 and error_of(response)["code"] == -32602


def test_unknown_and_removed_methods_are_404_32601_with_a_body_http_6_http_7_sub_15(
    srv: Served,
) -> None:
    """COMPAT-8 (docs/requirements.toml)."""
    for method in (
        "foo/bar",
        "resources/subscribe",
        "resources/unsubscribe",
        "initialize",
        "ping",
        "prompts/list",  # tools/list is served unless CATALOG_MCP_TOOLS=off (tests/e2e/mcp/test_mcp_tools.py)
    ):
        response = raw(srv, method, {"uri": "test://static-text"} if "subscribe" in method else None)
        assert response.status_code == 404, method
        assert error_of(response)["code"] == -32601


def test_not_found_over_http_is_400_with_data_uri_sep_2164(srv: Served) -> None:
    """RES-17 (docs/requirements.toml)."""
    uri = "test://nonexistent-resource-for-conformance-testing"
    response = raw(srv, "resources/read", {"uri": uri})
    assert response.status_code == 400
    assert error_of(response) == {"code": -32602, "message": "Resource not found", "data": {"uri": uri}}


# -- GET / DELETE / Accept / session id ------------------------------------------------------------


def test_modern_get_and_delete_are_405_http_12(srv: Served) -> None:
    headers = {"MCP-Protocol-Version": MODERN, "Accept": "text/event-stream"}
    for method in ("GET", "DELETE"):
        response = httpx.request(method, srv.mcp_url, headers=headers)
        assert response.status_code == 405 and "POST" in response.headers["allow"]


def test_get_without_a_session_is_400_for_the_2025_transport(srv: Served) -> None:
    assert httpx.get(srv.mcp_url, headers={"Accept": "text/event-stream"}).status_code == 400


def test_accept_rules_http_13(srv: Served) -> None:
    """Modern requests are answered with plain JSON (HTTP-4), so a JSON-only Accept is enough; a
    listen response is a stream and needs ``text/event-stream``; no Accept at all is 406 (HTTP-13).
    Also HTTP-1 (docs/requirements.toml)."""
    json_only = raw(srv, "resources/list", headers={"Accept": "application/json"})
    assert json_only.status_code == 200 and json_only.headers["content-type"] == "application/json"
    assert json_only.json()["result"]["resultType"] == "complete"
    listen = {"notifications": {"resourcesListChanged": True}}
    assert raw(srv, "subscriptions/listen", listen, headers={"Accept": "application/json"}).status_code == 406
    assert raw(srv, "resources/list", headers={"Accept": "*/*"}).status_code == 200
    with httpx.Client() as client:
        del client.headers["accept"]
        body = {"jsonrpc": "2.0", "id": 1, "method": "resources/list", "params": {"_meta": envelope()}}
        headers = modern_headers("resources/list")
        del headers["Accept"]
        response = client.post(srv.mcp_url, json=body, headers=headers)
        assert "accept" not in response.request.headers and response.status_code == 406


def test_modern_ignores_session_ids_and_answers_plain_json_http_4_http_12(srv: Served) -> None:
    response = raw(srv, "resources/list", headers={"Mcp-Session-Id": "bogus"})
    assert response.status_code == 200 and "mcp-session-id" not in response.headers
    assert response.headers["content-type"].startswith("application/json")
    result = response.json()["result"]
    assert (
        result["resultType"] == "complete"
        and result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "catalog"
    )


def test_legacy_session_wire_has_no_modern_fields_and_is_bound_to_its_credential_compat_5(
    srv: Served,
) -> None:
    """ERR-5, HTTP-3, COMPAT-2, COMPAT-7 (docs/requirements.toml)."""
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY,
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }
    response = httpx.post(srv.mcp_url, json=init, headers=headers)
    session = response.headers["mcp-session-id"]
    assert sse_messages(response.text)[0]["result"]["protocolVersion"] == LEGACY
    in_session = {**headers, "Mcp-Session-Id": session, "MCP-Protocol-Version": LEGACY}
    notified = httpx.post(
        srv.mcp_url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=in_session
    )
    assert notified.status_code == 202 and notified.content == b""  # HTTP-3
    listed = httpx.post(
        srv.mcp_url, json={"jsonrpc": "2.0", "id": 2, "method": "resources/list"}, headers=in_session
    )
    result = sse_messages(listed.text)[0]["result"]
    assert result["resources"] and not {"ttlMs", "cacheScope", "resultType", "_meta"} & set(result)
    subscribed = httpx.post(
        srv.mcp_url,
        json={
            "jsonrpc": "2.0",
            "id": 3,
            "method": "resources/subscribe",
            "params": {"uri": "test://watched-resource"},
        },
        headers=in_session,
    )
    assert sse_messages(subscribed.text)[0]["result"] == {}
    missing = httpx.post(
        srv.mcp_url,
        json={"jsonrpc": "2.0", "id": 4, "method": "resources/read", "params": {"uri": "test://nope"}},
        headers=in_session,
    )
    assert sse_messages(missing.text)[0]["error"] == {
        "code": -32002,
        "message": "Resource not found",
        "data": {"uri": "test://nope"},
    }
    stolen = httpx.post(
        srv.mcp_url,
        json={"jsonrpc": "2.0", "id": 5, "method": "resources/list"},
        headers={**in_session, "Authorization": f"Bearer {srv.token('staff')}"},
    )
    assert stolen.status_code == 404
    assert httpx.delete(srv.mcp_url, headers=in_session).status_code == 200


# -- authentication --------------------------------------------------------------------------------


def test_bad_token_is_401_with_a_challenge_naming_the_error_auth_10(srv: Served) -> None:
    """Without OAuth the challenge names no metadata (there is no authorization server to find;
    tests/e2e/test_admin_scopes.py covers the OAuth case)."""
    response = raw(srv, "resources/list", headers={"Authorization": "Bearer cat_not-a-token"})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == 'Bearer realm="catalog", error="invalid_token"'
    assert response.json()["error"] == "invalid_token"


def test_token_in_query_is_refused_auth_7(srv: Served) -> None:
    response = httpx.post(
        srv.mcp_url + f"?access_token={srv.token('admin')}",
        json={"jsonrpc": "2.0", "id": 1, "method": "resources/list", "params": {"_meta": envelope()}},
        headers=modern_headers("resources/list"),
    )
    assert response.status_code == 401


@pytest.mark.parametrize(
    ("query", "refused"),
    [
        ("access_token=x", True),
        ("access%5Ftoken=x", True),  # the same name, percent-encoded
        ("a=1&access_token=", True),
        ("xaccess_token=1", False),  # another name
        ("note=access_token%3Dx", False),  # only a value mentions it
    ],
)
def test_both_surfaces_judge_a_token_in_the_query_string_alike_auth_7(
    srv: Served, query: str, refused: bool
) -> None:
    """One rule (``catalog.auth.request_credentials``): a raw substring test on /mcp and a decoded
    one on the admin API once disagreed in both directions."""
    admin = {"Authorization": "Bearer cat_test-platform-admin-token"}
    on_admin = httpx.get(f"{srv.base_url}/admin/v1/tenants?{query}", headers=admin)
    body = {"jsonrpc": "2.0", "id": 1, "method": "resources/list", "params": {"_meta": envelope()}}
    on_mcp = httpx.post(
        f"{srv.mcp_url}?{query}",
        json=body,
        headers={**modern_headers("resources/list"), "Authorization": f"Bearer {srv.token('staff')}"},
    )
    expected = 400 if refused else 200  # beside a header: two methods at once (RFC 6750 3.1)
    assert (on_admin.status_code, on_mcp.status_code) == (expected, expected)
    if refused:
        assert 'error="invalid_request"' in on_admin.headers["www-authenticate"]
        assert 'error="invalid_request"' in on_mcp.headers["www-authenticate"]


def test_platform_admin_token_is_403_on_the_agent_surface(srv: Served) -> None:
    """AUTH-10 (docs/requirements.toml)."""
    response = raw(srv, "resources/list", headers={"Authorization": "Bearer cat_test-platform-admin-token"})
    assert (
        response.status_code == 403 and 'error="insufficient_scope"' in response.headers["www-authenticate"]
    )


def test_without_oauth_no_protected_resource_metadata_is_advertised_auth_2(srv: Served) -> None:
    """AUTH-2: metadata must name an authorization server; without OAuth there is none, so none is
    served (with OAuth: tests/e2e/test_admin_scopes.py)."""
    for path in ("/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"):
        assert httpx.get(srv.base_url + path).status_code == 404


@pytest.mark.asyncio(loop_scope="session")
async def test_without_public_tenant_anonymous_callers_get_401(
    postgres_server: Any, template_database: str, tmp_path: Path
) -> None:
    async with (
        module_database(postgres_server, template_database) as url,
        served(mcp_settings(url, tmp_path, public_tenant=None)) as s,
        httpx.AsyncClient() as client,
    ):
        body = {"jsonrpc": "2.0", "id": 1, "method": "resources/list", "params": {"_meta": envelope()}}
        response = await client.post(s.mcp_url, json=body, headers=modern_headers("resources/list"))
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == 'Bearer realm="catalog"'
        authed = modern_headers("resources/list", Authorization=f"Bearer {s.token('admin')}")
        assert (await client.post(s.mcp_url, json=body, headers=authed)).status_code == 200


# -- DNS rebinding (HTTP-2) ------------------------------------------------------------------------


def test_foreign_host_or_origin_is_rejected_before_auth_http_2(srv: Served) -> None:
    port = srv.base_url.rsplit(":", 1)[1]
    assert raw(srv, "resources/list", headers={"Host": "evil.example.com"}).status_code == 421
    assert raw(srv, "resources/list", headers={"Origin": "http://evil.example.com"}).status_code == 403
    bad_token = {"Origin": "https://evil.example", "Authorization": "Bearer wrong"}
    assert raw(srv, "resources/list", headers=bad_token).status_code == 403
    for host, origin in (
        (f"127.0.0.1:{port}", f"http://127.0.0.1:{port}"),
        (f"localhost:{port}", f"http://localhost:{port}"),
    ):
        assert raw(srv, "resources/list", headers={"Host": host, "Origin": origin}).status_code == 200
    legacy = httpx.post(
        srv.mcp_url,
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": LEGACY,
                "capabilities": {},
                "clientInfo": {"name": "x", "version": "0"},
            },
        },
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "Host": "evil.example.com",
        },
    )
    assert legacy.status_code == 421
