"""A re-import skips the lines that last wrote their rows (``resources.import_line_sha256``, 0020):
only the changed lines are parsed, the rows and their history end as a full parse leaves them, a
row another writer changed since is restored from its line, and a known line that comes after a
body of its URI still wins."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from catalog.core.catalog import Catalog
from catalog.core.principal import Principal
from catalog.core.resources import bulk
from catalog.core.resources.writes import upsert_resource
from catalog.core.schemas.resources import ResourceIn
from catalog.core.tenants import Tenant, create_tenant
from catalog.core.transfer import importer
from catalog.core.transfer.items import ImportReport
from catalog.db.engine import create_engine
from catalog.settings import Settings

pytestmark = pytest.mark.asyncio

IMPORTER = Principal.system("import")

LINES = [{"uri": f"test://k/{i}", "name": f"k{i}", "text": f"body {i}", "tags": ["t"]} for i in range(6)]


def jsonl(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


@pytest.fixture
async def catalog(settings: Settings) -> AsyncIterator[Catalog]:
    engine = create_engine(settings.async_database_url(), pool_size=2)
    try:
        yield Catalog(engine=engine, settings=settings)
    finally:
        await engine.dispose()


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The numbers of the lines the import parsed (in this process: no worker processes); known
    lines are looked up whatever the file's size."""
    monkeypatch.setattr(importer, "KNOWN_BYTES", 0)
    seen: list[int] = []
    real = importer.prepare_lines

    def counting(name: str, lines: list[tuple[int, bytes | None]], max_bytes: int) -> Any:
        seen.extend(number for number, _ in lines)
        return real(name, lines, max_bytes)

    monkeypatch.setattr(importer, "prepare_lines", counting)
    return seen


async def run_import(catalog: Catalog, tenant: Tenant, data: bytes) -> ImportReport:
    return await importer.import_jsonl(catalog, IMPORTER, tenant, io.BytesIO(data), "in.jsonl")


def counts(report: ImportReport) -> tuple[int, int, int, int]:
    return report.created, report.updated, report.unchanged, len(report.failed)


async def stored(db: asyncpg.Connection, slug: str) -> dict[str, tuple[Any, ...]]:
    """A tenant's rows and their history, without what differs between tenants (ids, times)."""
    rows = await db.fetch(
        "SELECT r.uri, r.name, r.text, r.tags, r.version, r.size,"
        " ARRAY(SELECT v.text FROM resource_versions AS v"
        "       WHERE v.tenant_id = r.tenant_id AND v.resource_id = r.id ORDER BY v.version) AS history,"
        " (SELECT count(*) FROM audit_log AS a WHERE a.tenant_id = r.tenant_id AND a.target_id = r.id) AS audits,"
        " (SELECT count(*) FROM change_feed AS f WHERE f.tenant_id = r.tenant_id AND f.uri = r.uri) AS changes"
        " FROM resources AS r JOIN tenants AS t ON t.id = r.tenant_id WHERE t.slug = $1 ORDER BY r.uri",
        slug,
    )
    return {row["uri"]: tuple(row)[1:] for row in rows}


async def test_a_re_import_parses_only_the_changed_lines_and_leaves_what_a_full_parse_leaves(
    catalog: Catalog, db: asyncpg.Connection, parsed: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    changed = [dict(line) for line in LINES]
    changed[2]["text"] = "body 2, changed"
    changed.append({"uri": "test://k/new", "name": "new", "text": "new"})
    skipping, full = (
        await create_tenant(catalog, "skip", "Skip"),
        await create_tenant(catalog, "full", "Full"),
    )
    for tenant in (skipping, full):
        assert counts(await run_import(catalog, tenant, jsonl(LINES))) == (6, 0, 0, 0)
    parsed.clear()

    report = await run_import(catalog, skipping, jsonl(changed))
    assert counts(report) == (1, 1, 5, 0)
    assert parsed == [3, 7]  # the changed line and the new one: the other five were known
    with monkeypatch.context() as patch:

        async def none_known(catalog: Catalog, tenant: Tenant) -> dict[bytes, str]:
            return {}

        patch.setattr(importer, "known_lines", none_known)
        parsed.clear()
        assert counts(await run_import(catalog, full, jsonl(changed))) == (1, 1, 5, 0)
        assert parsed == list(range(1, 8))
    assert await stored(db, "skip") == await stored(db, "full")
    assert (await stored(db, "skip"))["test://k/2"][3:5] == (2, 15)  # version 2, its new size


async def test_a_row_another_writer_changed_is_restored_from_its_line(
    catalog: Catalog, db: asyncpg.Connection, parsed: list[int]
) -> None:
    tenant = await create_tenant(catalog, "acme", "Acme")
    await run_import(catalog, tenant, jsonl(LINES))
    fingerprints = await db.fetch("SELECT import_line_sha256 FROM resources ORDER BY uri")
    assert all(row[0] is not None for row in fingerprints)
    theirs = ResourceIn.model_validate({"uri": "test://k/4", "name": "k4", "text": "theirs"})
    await upsert_resource(catalog, Principal.system("other"), tenant, theirs)
    row = await db.fetchrow("SELECT text, import_line_sha256 FROM resources WHERE uri = 'test://k/4'")
    assert tuple(row) == ("theirs", None)  # any other write clears the row's fingerprint
    parsed.clear()

    assert counts(await run_import(catalog, tenant, jsonl(LINES))) == (0, 1, 5, 0)
    assert parsed == [5]
    row = await db.fetchrow(
        "SELECT text, version, import_line_sha256 FROM resources WHERE uri = 'test://k/4'"
    )
    assert (row["text"], row["version"]) == ("body 4", 3)
    assert row["import_line_sha256"] == bulk.line_fingerprint(
        jsonl([LINES[4]]), catalog.settings.max_blob_bytes
    )


async def test_a_known_line_after_a_body_of_its_uri_still_wins(
    catalog: Catalog, db: asyncpg.Connection, parsed: list[int]
) -> None:
    """The known line is the last body of its URI: the import starts over without skipping, so the
    earlier body is not written over it."""
    tenant = await create_tenant(catalog, "acme", "Acme")
    await run_import(catalog, tenant, jsonl(LINES))
    parsed.clear()
    earlier = {**LINES[1], "text": "an earlier body"}
    report = await run_import(catalog, tenant, jsonl([earlier, *LINES]))
    assert counts(report) == (0, 0, 6, 0)
    assert parsed == [1, *range(1, 8)]  # the first pass parsed the earlier body; the second, all
    row = await db.fetchrow("SELECT text, version FROM resources WHERE uri = 'test://k/1'")
    assert tuple(row) == ("body 1", 1)


async def test_a_line_read_under_other_rules_is_parsed_again(
    catalog: Catalog, db: asyncpg.Connection, parsed: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = await create_tenant(catalog, "acme", "Acme")
    await run_import(catalog, tenant, jsonl(LINES))
    parsed.clear()
    monkeypatch.setattr(bulk, "_rules_digest", lambda: b"another release's rules")
    assert counts(await run_import(catalog, tenant, jsonl(LINES))) == (0, 0, 6, 0)
    assert parsed == list(range(1, 7))
