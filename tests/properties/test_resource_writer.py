"""One way to write a resource row: a single write and an import run the same
statement (``catalog.core.resources.writer``), so the same upserts leave the same rows.

A property: random batches of upserts, applied one body at a time through the single-write path
(``upsert_resource``, as the admin API's PUT) into one tenant, a batch at a time through the
JSONL import (``import_jsonl``) into another and through a directory import's batch write
(``upsert_many``) into a third, leave identical resources, versions, audit rows and change-feed
rows -- ids, tenants and timestamps aside. A body identical to the current row changes nothing on
any path (the no-op test), so repeated batches make no versions.
"""

from __future__ import annotations

import io
import itertools
import json
from typing import Any

import asyncpg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalog.core.catalog import Catalog
from catalog.core.principal import Principal
from catalog.core.resources import upsert_many, upsert_resource
from catalog.core.schemas.resources import ResourceIn
from catalog.core.tenants import Tenant, create_tenant
from catalog.core.transfer.importer import import_jsonl

PRINCIPAL = Principal.system("import")  # one label for both paths: versions and audit rows name it
URIS = ("test://a", "test://b", "test://c/d")
SLUGS = itertools.count()


@st.composite
def bodies(draw: st.DrawFn, uri: str) -> dict[str, Any]:
    body: dict[str, Any] = {"uri": uri, "name": draw(st.sampled_from(["n", "m"]))}
    mime = draw(st.sampled_from([None, "text/plain", "inode/directory"]))
    if mime is not None:
        body["mimeType"] = mime
    if mime != "inode/directory":  # a directory has no content
        text = draw(st.sampled_from([None, "x", "héllo"]))
        if text is not None:
            body["text"] = text
    for key, values in (
        ("title", ["T"]),
        ("tags", [["a"], ["a", "b"], []]),
        ("annotations", [{"priority": 0.5}, {"audience": ["user"]}]),
        ("_meta", [{"k": [1, 2]}]),
    ):
        if draw(st.booleans()):
            body[key] = draw(st.sampled_from(values))
    return body


# A batch: at most one body per URI (an import counts a URI given twice once, its last body
# winning, where single writes would make a version of each).
BATCH = st.lists(st.sampled_from(URIS), unique=True, min_size=1).flatmap(
    lambda uris: st.tuples(*(bodies(uri) for uri in uris))
)


async def state(db: asyncpg.Connection, tenant: Tenant) -> dict[str, Any]:
    """What the writes left in ``tenant``, without ids, tenants and timestamps: resources by URI;
    versions, audit rows by resource and order; feed rows of each URI in feed order."""
    resources = await db.fetch(
        "SELECT uri, name, title, description, mime_type, size, icons, annotations, meta, tags,"
        " consent_message, text, blob_sha256, version FROM resources WHERE tenant_id = $1 ORDER BY uri",
        tenant.id,
    )
    versions = await db.fetch(
        "SELECT r.uri AS resource, v.version, v.uri, v.snapshot, v.text, v.blob_sha256, v.changed_by"
        " FROM resource_versions AS v JOIN resources AS r ON r.id = v.resource_id"
        " WHERE v.tenant_id = $1 ORDER BY r.uri, v.version",
        tenant.id,
    )
    audit = await db.fetch(
        "SELECT uri, action, principal, target_kind, before_digest, after_digest, detail"
        " FROM audit_log WHERE tenant_id = $1 AND target_kind = 'resource' ORDER BY uri, id",
        tenant.id,
    )
    feed = await db.fetch(
        "SELECT uri, kind, op, tags_before, tags_after FROM change_feed WHERE tenant_id = $1"
        " ORDER BY uri, seq",
        tenant.id,
    )
    return {
        "resources": [dict(row) for row in resources],
        "versions": [dict(row) for row in versions],
        "audit": [dict(row) for row in audit],
        "feed": [dict(row) for row in feed],
    }


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(batches=st.lists(BATCH, min_size=1, max_size=4))
async def test_upserts_one_by_one_imported_in_bulk_or_in_batches_leave_identical_rows(
    catalog: Catalog, db: asyncpg.Connection, batches: list[tuple[dict[str, Any], ...]]
) -> None:
    n = next(SLUGS)
    single = await create_tenant(catalog, f"single{n}")
    bulk = await create_tenant(catalog, f"bulk{n}")
    batched = await create_tenant(catalog, f"batched{n}")
    for batch in batches:
        for body in batch:
            await upsert_resource(catalog, PRINCIPAL, single, ResourceIn.model_validate(body))
        stream = io.BytesIO(b"".join(json.dumps(body).encode() + b"\n" for body in batch))
        report = await import_jsonl(catalog, PRINCIPAL, bulk, stream, "batch.jsonl")
        assert report.failed == []
        await upsert_many(catalog, PRINCIPAL, batched, [ResourceIn.model_validate(body) for body in batch])

    one_by_one, imported = await state(db, single), await state(db, bulk)
    assert imported == one_by_one
    assert await state(db, batched) == one_by_one
    # Every change left a version and an audit row; a body identical to the current row, neither.
    assert len(one_by_one["versions"]) == len(one_by_one["audit"]) == len(one_by_one["feed"])
    assert sum(row["version"] for row in one_by_one["resources"]) == len(one_by_one["versions"])
