"""The admin REST API (``/admin/v1``): thin routes over the core, one router per domain."""

from __future__ import annotations

import importlib

from fastapi import APIRouter, FastAPI

from catalog.admin.problems import install_problem_handlers

PREFIX = "/admin/v1"
DOMAINS = ("tenants", "resources", "blobs", "templates", "grants", "tokens", "activity")


def install(app: FastAPI) -> None:
    install_problem_handlers(app, www_authenticate='Bearer realm="catalog-admin"')
    api = APIRouter(prefix=PREFIX)
    for domain in DOMAINS:
        try:
            module = importlib.import_module(f"catalog.admin.{domain}")
        except ModuleNotFoundError as exc:
            if exc.name != f"catalog.admin.{domain}":
                raise
            continue
        api.include_router(module.router)
    app.include_router(api)
