"""The admin REST API (``/admin/v1``): thin routes over the core, one router per domain."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI

from catalog.admin import activity, blobs, grants, resources, templates, tenants, tokens
from catalog.admin.problems import install_problem_handlers

PREFIX = "/admin/v1"
ROUTERS = (tenants, resources, blobs, templates, grants, tokens, activity)


def install(app: FastAPI) -> None:
    install_problem_handlers(app)
    api = APIRouter(prefix=PREFIX)
    for module in ROUTERS:
        api.include_router(module.router)
    app.include_router(api)
