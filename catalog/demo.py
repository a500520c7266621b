"""``catalog serve --demo``: tenant ``demo`` with the MCP conformance fixtures and a small project tree.

Seeding goes through the core like any curator's write, and is idempotent: a restart leaves the
catalogue as it was (upserts by URI; templates and grants are created only when missing).
"""

from __future__ import annotations

import base64
import contextlib
import struct
import zlib

from catalog.bootstrap import open_catalog
from catalog.core.catalog import Catalog
from catalog.core.errors import Conflict
from catalog.core.grants import create_grant
from catalog.core.principal import Principal
from catalog.core.resources import upsert_resource
from catalog.core.schemas.grants import GrantIn
from catalog.core.schemas.resources import ResourceIn
from catalog.core.schemas.templates import TemplateIn
from catalog.core.templates import create_template, list_templates
from catalog.core.tenants import Tenant, create_tenant, find_tenant
from catalog.settings import Settings

DEMO_TENANT = "demo"


def _png_1x1() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 6, 0, 0, 0)
    pixels = zlib.compress(b"\x00\x4f\x7c\xd9\xff")
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


PROJECT = "file:///project"

RESOURCES: list[dict[str, object]] = [
    {
        "uri": "test://static-text",
        "name": "static-text",
        "title": "Static text resource",
        "description": "A static text resource for the MCP conformance suite",
        "mimeType": "text/plain",
        "text": "This is the content of the static text resource.",
    },
    {
        "uri": "test://static-binary",
        "name": "static-binary",
        "title": "Static binary resource",
        "description": "A static binary resource (a 1x1 PNG) for the MCP conformance suite",
        "mimeType": "image/png",
        "blob": base64.b64encode(_png_1x1()).decode(),
    },
    {
        "uri": "test://watched-resource",
        "name": "watched-resource",
        "title": "Watched resource",
        "description": "A resource to subscribe to; it changes when a curator updates it",
        "mimeType": "text/plain",
        "text": "Watched resource content",
    },
    {
        "uri": PROJECT,
        "name": "project",
        "title": "Example project",
        "description": "A small project tree; reading it returns its files",
        "mimeType": "inode/directory",
    },
    {
        "uri": f"{PROJECT}/README.md",
        "name": "README.md",
        "title": "Project README",
        "mimeType": "text/markdown",
        "annotations": {"audience": ["user", "assistant"], "priority": 0.9},
        "tags": ["docs"],
        "text": "# Example project\n\nA tiny service used to show catalog's resources.\n",
    },
    {"uri": f"{PROJECT}/src", "name": "src", "title": "Source code", "mimeType": "inode/directory"},
    {
        "uri": f"{PROJECT}/src/main.py",
        "name": "main.py",
        "title": "Application entry point",
        "mimeType": "text/x-python",
        "annotations": {"audience": ["assistant"], "priority": 0.8},
        "tags": ["code"],
        "text": 'from app import greet\n\n\nif __name__ == "__main__":\n    print(greet("world"))\n',
    },
    {
        "uri": f"{PROJECT}/src/app.py",
        "name": "app.py",
        "title": "Greeting logic",
        "mimeType": "text/x-python",
        "tags": ["code"],
        "text": 'def greet(name: str) -> str:\n    return f"Hello, {name}!"\n',
    },
    {"uri": f"{PROJECT}/docs", "name": "docs", "title": "Documentation", "mimeType": "inode/directory"},
    {
        "uri": f"{PROJECT}/docs/guide.md",
        "name": "guide.md",
        "title": "User guide",
        "mimeType": "text/markdown",
        "tags": ["docs"],
        "text": "# Guide\n\nRun `python src/main.py`.\n",
    },
    {
        "uri": f"{PROJECT}/docs/internal-notes.md",
        "name": "internal-notes.md",
        "title": "Internal notes",
        "description": "Asks for consent before it is read",
        "mimeType": "text/markdown",
        "tags": ["docs", "internal"],
        "consentMessage": "These notes are internal. Say why you need them.",
        "text": "# Internal notes\n\nThe greeting should become configurable.\n",
    },
]

TEMPLATES: list[dict[str, object]] = [
    {
        "uriTemplate": "test://template/{id}/data",
        "name": "template-data",
        "title": "Templated data",
        "description": "A resource template for the MCP conformance suite",
        "mimeType": "application/json",
        "text": '{"id":"{id}","templateTest":true,"data":"Data for ID: {id}"}',
    },
    {
        "uriTemplate": PROJECT + "/src/{name}",
        "name": "project-source",
        "title": "Project source file",
        "description": "Any file under src/ (complete {name} for the stored ones)",
        "mimeType": "text/x-python",
    },
]

GRANTS = [{"scope": "public", "uriPrefix": "test://"}, {"scope": "public", "uriPrefix": PROJECT}]


async def seed_demo_catalog(catalog: Catalog) -> Tenant:
    principal = Principal.system("demo")
    tenant = await find_tenant(catalog, DEMO_TENANT)
    if tenant is None:
        try:
            tenant = await create_tenant(catalog, DEMO_TENANT, "Demo")
        except Conflict:
            tenant = await find_tenant(catalog, DEMO_TENANT)
    assert tenant is not None
    for resource in RESOURCES:
        await upsert_resource(catalog, principal, tenant, ResourceIn.model_validate(resource))
    existing = await _template_uris(catalog, principal, tenant)
    for template in TEMPLATES:
        if template["uriTemplate"] not in existing:
            await create_template(catalog, principal, tenant, TemplateIn.model_validate(template))
    for grant in GRANTS:
        with contextlib.suppress(Conflict):
            await create_grant(catalog, principal, tenant, GrantIn.model_validate(grant))
    return tenant


async def _template_uris(catalog: Catalog, principal: Principal, tenant: Tenant) -> set[str]:
    found: set[str] = set()
    cursor: str | None = None
    while True:
        page, cursor = await list_templates(catalog, principal, tenant, cursor=cursor)
        found.update(record.uri_template for record in page)
        if cursor is None:
            return found


async def seed_demo(settings: Settings) -> None:
    """Seed through the same bootstrap as the app, so the writes run under row-level security."""
    async with open_catalog(settings, pool_size=1) as catalog:
        await seed_demo_catalog(catalog)
