"""The admin REST API (``/admin/v1``): thin routes over the core, one router per domain."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from catalog.admin import (
    activity,
    blobs,
    grants,
    platform,
    resources,
    templates,
    tenants,
    tokens,
    tree,
    whoami,
)
from catalog.admin.problems import PROBLEM_MEDIA_TYPE, install_problem_handlers

PREFIX = "/admin/v1"
BEARER_SCHEME = "bearerAuth"
ROUTERS = (whoami, tenants, tree, resources, blobs, templates, grants, tokens, activity, platform)


def install(app: FastAPI) -> None:
    install_problem_handlers(app)
    # Each router straight into the app under the prefix, not through one ``/admin/v1`` router:
    # FastAPI builds an included route's handler lazily, at its first match, unless an include
    # without a prefix checks every path first, which builds them all (50 ms of CPU per app).
    for module in ROUTERS:
        app.include_router(module.router, prefix=PREFIX)
    _document_problems(app)


# Every admin operation can answer these, whatever the route: malformed or too deep JSON (400),
# credentials (401/403), an unknown tenant (404), a body over the limits (413), invalid input (422)
# and an unreachable database (503).
COMMON_ERRORS = {
    "400": "malformed request",
    "401": "no usable bearer token",
    "403": "the token may not do this",
    "404": "no such tenant or item",
    "413": "body too large",
    "421": "the Host header is not one this server answers to (CATALOG_ALLOWED_HOSTS)",
    "422": "invalid input",
    "429": "too many requests from this caller; retry after Retry-After seconds",
    "503": "the database is unavailable; retry",
}

PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "Problem",
    "description": "RFC 9457 problem details",
    "type": "object",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["pointer", "detail"],
                "properties": {"pointer": {"type": "string"}, "detail": {"type": "string"}},
            },
        },
    },
}


def _document_problems(app: FastAPI) -> None:
    """Document every admin error as what it is on the wire: ``application/problem+json``.

    FastAPI documents its own ``HTTPValidationError`` as ``application/json``; the handlers in
    :mod:`catalog.admin.problems` answer RFC 9457 problems instead, so the document says so.
    """
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = generate()
        components = document.setdefault("components", {})
        components.setdefault("schemas", {})["Problem"] = PROBLEM_SCHEMA
        # Declared so Swagger UI's "Authorize" sends the token on every admin operation.
        components["securitySchemes"] = {
            BEARER_SCHEME: {
                "type": "http",
                "scheme": "bearer",
                "description": "the platform admin token, a tenant admin token (cat_...) or an OAuth JWT",
            }
        }
        problem = {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}
        for path, operations in document.get("paths", {}).items():
            if not path.startswith(PREFIX):
                continue
            for method, operation in operations.items():
                operation["security"] = [{BEARER_SCHEME: []}]
                responses = operation.setdefault("responses", {})
                for code, description in COMMON_ERRORS.items():
                    responses.setdefault(code, {"description": description})
                if method in ("post", "put", "patch"):
                    responses.setdefault("409", {"description": "conflicts with what is stored"})
                if path.startswith(f"{PREFIX}/tenants/{{slug}}/resources") and method in (
                    "put",
                    "patch",
                    "delete",
                ):
                    responses.setdefault("412", {"description": "If-Match names a stale version"})
                for code, response in responses.items():
                    if code[0] in "45":
                        response["content"] = problem
                        if response.get("description") in (None, "", "Validation Error"):
                            response["description"] = COMMON_ERRORS.get(code, "error")
        schemas = document["components"]["schemas"]
        for unused in ("HTTPValidationError", "ValidationError"):
            schemas.pop(unused, None)
        app.openapi_schema = document
        return document

    app.openapi = openapi  # type: ignore[method-assign]
