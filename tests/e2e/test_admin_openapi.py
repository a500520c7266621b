"""The admin API's contract shows in /openapi.json (typed bodies and responses) and /docs."""

from __future__ import annotations

import re

import httpx

CONTRACT = {
    "/admin/v1/tenants": {"get", "post"},
    "/admin/v1/tenants/{slug}": {"delete"},
    "/admin/v1/tenants/{slug}/resources": {"get", "post", "put"},
    "/admin/v1/tenants/{slug}/resources/{id}": {"get", "patch", "delete"},
    "/admin/v1/tenants/{slug}/resources/{id}/versions": {"get"},
    "/admin/v1/tenants/{slug}/blobs": {"post"},
    "/admin/v1/tenants/{slug}/blobs/{sha256}": {"get"},
    "/admin/v1/tenants/{slug}/templates": {"get", "post"},
    "/admin/v1/tenants/{slug}/templates/{id}": {"get", "patch", "delete"},
    "/admin/v1/tenants/{slug}/grants": {"get", "post"},
    "/admin/v1/tenants/{slug}/grants/{id}": {"delete"},
    "/admin/v1/tenants/{slug}/tokens": {"get", "post"},
    "/admin/v1/tenants/{slug}/tokens/{id}": {"delete"},
    "/admin/v1/tenants/{slug}/audit": {"get"},
    "/admin/v1/tenants/{slug}/changes": {"get"},
    "/admin/v1/audit": {"get"},  # the platform audit log
    # The console's needs
    "/admin/v1/whoami": {"get"},
    "/admin/v1/tenants/{slug}/tree": {"get"},
    "/admin/v1/tenants/{slug}/resources/{id}/versions/{version}": {"get"},
    "/admin/v1/tenants/{slug}/resources/{id}/versions/{version}/restore": {"post"},
    "/admin/v1/tenants/{slug}/templates/preview": {"post"},
    "/admin/v1/tenants/{slug}/grants/preview": {"get"},
    "/admin/v1/tenants/{slug}/changes/stream": {"get"},
    "/admin/v1/tenants/{slug}/resources/batch": {"post"},
}


async def test_every_contract_route_is_in_the_openapi_document(anon: httpx.AsyncClient) -> None:
    spec = (await anon.get("/openapi.json")).json()
    admin_paths = {p: set(ops) for p, ops in spec["paths"].items() if p.startswith("/admin/v1")}
    assert admin_paths == CONTRACT


async def test_bodies_and_responses_are_typed_in_camel_case(anon: httpx.AsyncClient) -> None:
    spec = (await anon.get("/openapi.json")).json()
    schemas = spec["components"]["schemas"]
    resource_in = schemas["ResourceIn"]["properties"]
    assert {"uri", "name", "mimeType", "blob", "blobSha256", "consentMessage", "annotations"} <= set(
        resource_in
    )
    assert "size" not in resource_in
    assert {"id", "version", "createdAt", "updatedAt", "size"} <= set(schemas["ResourceOut"]["properties"])
    assert {"audience", "priority", "lastModified"} == set(schemas["Annotations"]["properties"])
    post = spec["paths"]["/admin/v1/tenants/{slug}/resources"]["post"]
    assert post["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/ResourceIn")
    assert post["responses"]["201"]["content"]["application/json"]["schema"]["$ref"].endswith("/ResourceOut")
    tokens = spec["paths"]["/admin/v1/tenants/{slug}/tokens"]["post"]["responses"]["201"]
    assert tokens["content"]["application/json"]["schema"]["$ref"].endswith("/TokenCreated")
    upload = spec["paths"]["/admin/v1/tenants/{slug}/blobs"]["post"]
    assert upload["requestBody"]["content"]["*/*"]["schema"]["format"] == "binary"
    assert {"200", "201", "413"} <= set(upload["responses"])
    changes = spec["paths"]["/admin/v1/tenants/{slug}/changes"]["get"]
    assert {p["name"] for p in changes["parameters"]} == {"slug", "after", "limit", "tail"}


async def test_docs_page_is_served(anon: httpx.AsyncClient) -> None:
    response = await anon.get("/docs")
    assert response.status_code == 200 and "swagger" in response.text.lower()


async def test_docs_and_redoc_load_every_asset_from_this_server(anon: httpx.AsyncClient) -> None:
    """No CDN: every script, stylesheet and icon the pages name is served here."""
    for page in ("/docs", "/redoc"):
        html = (await anon.get(page)).text
        urls = re.findall(r'(?:src|href)="([^"]+)"', html) + re.findall(r"url: '([^']+)'", html)
        assert urls, page
        for url in urls:
            assert url.startswith("/"), (page, url)
            response = await anon.get(url)
            assert response.status_code == 200, (page, url)
            assert len(response.content) > 100, url


async def test_openapi_declares_the_bearer_scheme_on_admin_operations(anon: httpx.AsyncClient) -> None:
    spec = (await anon.get("/openapi.json")).json()
    assert spec["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "description": spec["components"]["securitySchemes"]["bearerAuth"]["description"],
    }
    for path, operations in spec["paths"].items():
        if path.startswith("/admin/v1"):
            for operation in operations.values():
                assert operation["security"] == [{"bearerAuth": []}], path
