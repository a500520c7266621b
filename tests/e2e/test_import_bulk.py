"""The set-based import of a JSONL file: one transaction, COPY into a staging
table, one ``INSERT ... SELECT ... ON CONFLICT`` into resources, versions and audit rows written by
the same statement, the change feed by the statement-level triggers of migration 0006 -- and the
live side: one NOTIFY per statement, which a ``subscriptions/listen`` stream still turns into the
updates it watches for (SUB-4, SUB-5: a change to a watched URI fires ``updated``)."""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import dataclasses
import hashlib
import io
import json
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx2
import pytest
import pytest_asyncio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ResourcesListChanged, ResourceUpdated

from catalog.core.catalog import Catalog
from catalog.core.principal import Principal
from catalog.core.resources import ResourceRecord, bulk, record_from_row
from catalog.core.tenants import create_tenant
from catalog.core.transfer import importer
from catalog.db.engine import create_engine
from catalog.events.listener import BULK_EXPAND, listener_dsn
from catalog.settings import Settings
from tests.conftest import Run
from tests.mcp_helpers import MODERN, module_database
from tests.processes import Served, catalog_env, run_catalog, serving, started

pytestmark = pytest.mark.process

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01"
WAIT = 15


def write_jsonl(path: Path, lines: list[object]) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def tenant_rows(sql: Callable[..., list[asyncpg.Record]], table: str, order: str) -> list[asyncpg.Record]:
    return sql(
        f"SELECT x.* FROM {table} AS x JOIN tenants AS t ON t.id = x.tenant_id"
        f" WHERE t.slug = 'acme' ORDER BY {order}"
    )


def record_of(row: asyncpg.Record) -> ResourceRecord:
    """A stored row (plain asyncpg: JSONB as text) as the catalogue's record."""
    columns = dict(row)
    for key in ("icons", "annotations", "meta"):
        if columns[key] is not None:
            columns[key] = json.loads(columns[key])
    return record_from_row(columns)


FIRST = [
    {"uri": "test://a", "name": "a", "text": "alpha", "tags": ["b", "a", "b"]},
    {
        "uri": "test://b",
        "name": "b",
        "title": "Bee",
        "mimeType": "image/png",
        "blob": base64.b64encode(PNG).decode(),
        "annotations": {"priority": 0.5, "audience": ["user"]},
        "_meta": {"k": [1, 2]},
    },
    {"uri": "test://dir", "name": "dir", "mimeType": "inode/directory"},
    {"uri": "test://a", "name": "a", "text": "alpha 2", "tags": ["a", "b"]},  # the last body of a URI wins
]


def test_a_bulk_import_writes_a_version_an_audit_row_and_a_feed_row_per_resource(
    cli: Run, sql: Callable[..., list[asyncpg.Record]], tmp_path: Path
) -> None:
    cli("tenant", "create", "acme")
    result = cli(
        "import", "--tenant", "acme", str(write_jsonl(tmp_path / "in.jsonl", FIRST)), "--no-progress"
    )
    assert (result.code, result.out) == (0, "3 created, 0 updated, 0 unchanged, 0 failed\n")

    stored = {row["uri"]: row for row in tenant_rows(sql, "resources", "uri")}
    assert list(stored) == ["test://a", "test://b", "test://dir"]
    assert stored["test://a"]["text"] == "alpha 2" and stored["test://a"]["size"] == 7
    assert stored["test://a"]["tags"] == ["a", "b"] and stored["test://a"]["version"] == 1
    assert stored["test://b"]["blob_sha256"] == hashlib.sha256(PNG).hexdigest()
    assert stored["test://b"]["size"] == len(PNG)
    blob = sql("SELECT data FROM blobs WHERE sha256 = $1", hashlib.sha256(PNG).hexdigest())
    assert bytes(blob[0]["data"]) == PNG

    # One version each, holding what the single-write path would have kept: the same snapshot.
    versions = tenant_rows(sql, "resource_versions", "uri")
    assert [(v["uri"], v["version"], v["changed_by"]) for v in versions] == [
        ("test://a", 1, "system:import"),
        ("test://b", 1, "system:import"),
        ("test://dir", 1, "system:import"),
    ]
    for version in versions:
        record = record_of(stored[version["uri"]])
        assert json.loads(version["snapshot"]) == record.snapshot()
        assert version["text"] == record.text and version["blob_sha256"] == record.blob_sha256

    # One audit row each, with the digest the single-write path computes from the stored row.
    audit = tenant_rows(sql, "audit_log", "uri")
    assert [(a["uri"], a["action"], a["principal"], a["before_digest"]) for a in audit] == [
        ("test://a", "resource.create", "system:import", None),
        ("test://b", "resource.create", "system:import", None),
        ("test://dir", "resource.create", "system:import", None),
    ]
    for entry in audit:
        assert entry["target_id"] == stored[entry["uri"]]["id"]
        assert entry["after_digest"] == record_of(stored[entry["uri"]]).digest()

    # One feed row each, numbered from the tenant's own sequence, with the tags after.
    feed = tenant_rows(sql, "change_feed", "seq")
    assert [(f["seq"], f["uri"], f["op"], f["tags_before"], f["tags_after"]) for f in feed] == [
        (1, "test://a", "created", None, ["a", "b"]),
        (2, "test://b", "created", None, []),
        (3, "test://dir", "created", None, []),
    ]
    tags = tenant_rows(sql, "resource_tags", "tag")
    assert [(t["tag"], t["uri"]) for t in tags] == [("a", "test://a"), ("b", "test://a")]


def test_a_re_import_with_changes_makes_new_versions_and_leaves_the_rest_alone(
    cli: Run, sql: Callable[..., list[asyncpg.Record]], tmp_path: Path
) -> None:
    cli("tenant", "create", "acme")
    assert cli("import", "--tenant", "acme", str(write_jsonl(tmp_path / "1.jsonl", FIRST))).code == 0
    before = {row["uri"]: record_of(row) for row in tenant_rows(sql, "resources", "uri")}
    second = [
        {"uri": "test://a", "name": "a", "text": "alpha 3", "tags": ["c"]},  # content and tags change
        FIRST[1],  # unchanged
        {"uri": "test://dir", "name": "renamed", "mimeType": "inode/directory"},  # metadata changes
        {"uri": "test://new", "name": "new", "text": "n"},
    ]
    result = cli(
        "import", "--tenant", "acme", str(write_jsonl(tmp_path / "2.jsonl", second)), "--no-progress"
    )
    assert (result.code, result.out) == (0, "1 created, 2 updated, 1 unchanged, 0 failed\n")

    after = {row["uri"]: record_of(row) for row in tenant_rows(sql, "resources", "uri")}
    assert {uri: r.version for uri, r in after.items()} == {
        "test://a": 2,
        "test://b": 1,
        "test://dir": 2,
        "test://new": 1,
    }
    assert after["test://a"].text == "alpha 3" and after["test://a"].tags == ("c",)
    assert after["test://a"].content_changed_at > before["test://a"].content_changed_at
    assert after["test://dir"].content_changed_at == before["test://dir"].content_changed_at
    assert after["test://b"].updated_at == before["test://b"].updated_at

    versions = tenant_rows(sql, "resource_versions", "uri, version")
    assert [(v["uri"], v["version"], v["text"]) for v in versions] == [
        ("test://a", 1, "alpha 2"),
        ("test://a", 2, "alpha 3"),
        ("test://b", 1, None),
        ("test://dir", 1, None),
        ("test://dir", 2, None),
        ("test://new", 1, "n"),
    ]
    updates = [a for a in tenant_rows(sql, "audit_log", "id") if a["action"] == "resource.update"]
    assert [(a["uri"], a["before_digest"], a["after_digest"]) for a in updates] == [
        ("test://a", before["test://a"].digest(), after["test://a"].digest()),
        ("test://dir", before["test://dir"].digest(), after["test://dir"].digest()),
    ]
    feed = [
        (f["uri"], f["op"], f["tags_before"], f["tags_after"]) for f in tenant_rows(sql, "change_feed", "seq")
    ]
    assert sorted(feed[3:]) == [
        ("test://a", "updated", ["a", "b"], ["c"]),
        ("test://dir", "updated", [], []),
        ("test://new", "created", None, []),
    ]
    tags = tenant_rows(sql, "resource_tags", "tag")
    assert [(t["tag"], t["uri"]) for t in tags] == [("c", "test://a")]

    again = cli("import", "--tenant", "acme", str(tmp_path / "2.jsonl"), "--no-progress")
    assert again.out == "0 created, 0 updated, 4 unchanged, 0 failed\n"
    assert len(tenant_rows(sql, "change_feed", "seq")) == len(feed)


def test_a_bad_line_fails_the_import_and_nothing_is_written(
    cli: Run, sql: Callable[..., list[asyncpg.Record]], tmp_path: Path
) -> None:
    path = write_jsonl(
        tmp_path / "in.jsonl",
        [
            {"uri": "test://good", "name": "good", "text": "fine"},
            {"uri": "test://blob", "name": "blob", "blob": base64.b64encode(PNG).decode()},
            '{"uri": "test://broken", ',
            {"uri": "file:///a/../etc/passwd", "name": "evil", "text": "x"},
            {"uri": "test://d", "name": "d", "mimeType": "inode/directory", "text": "content"},
            {"uri": "test://unknown-blob", "name": "u", "blobSha256": "0" * 64},
            {"uri": "test://late", "name": "late", "text": "after the bad ones"},
        ],
    )
    cli("tenant", "create", "acme")
    result = cli("import", "--tenant", "acme", str(path), "--no-progress")
    assert result.code == 1
    assert result.out == "0 created, 0 updated, 0 unchanged, 4 failed\n"
    errors = result.err.splitlines()
    assert errors[0].startswith(f"{path}:3: invalid JSON")
    assert errors[1].startswith(f"{path}:4: /uri: '..' path segments")
    assert errors[2].startswith(f"{path}:5: ") and errors[2].endswith("has no content")
    assert errors[3].startswith(f"{path}:6: no such blob in this tenant")
    assert errors[4].startswith("catalog: nothing imported: 4 bad line(s)")
    assert len(errors) == 5 and "Traceback" not in result.err
    for table in ("resources", "resource_versions", "audit_log", "change_feed", "blobs", "resource_tags"):
        assert tenant_rows(sql, table, "tenant_id") == [], table


# -- writing while parsing: the staged rows written every WRITE_EVERY URIs ----------------------


@pytest.fixture
def write_statements(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Parse two lines at a time and write once two URIs are staged; count the writes (how many
    URIs each)."""
    counts: list[int] = []
    real = bulk._write_staged

    async def counted(raw: Any, tenant: Any, principal: Any, count: int, *args: Any, **kwargs: Any) -> None:
        counts.append(count)
        await real(raw, tenant, principal, count, *args, **kwargs)

    monkeypatch.setattr(importer, "CHUNK_SIZE", 2)
    monkeypatch.setattr(importer, "WRITE_EVERY", 2)
    monkeypatch.setattr(bulk, "_write_staged", counted)
    return counts


def test_a_file_is_written_every_write_every_uris_with_the_same_rows_as_one_statement(
    cli: Run, sql: Callable[..., list[asyncpg.Record]], tmp_path: Path, write_statements: list[int]
) -> None:
    lines = [{"uri": f"test://w/{i}", "name": f"w{i}", "text": f"body {i}", "tags": ["t"]} for i in range(5)]
    cli("tenant", "create", "acme")
    result = cli(
        "import", "--tenant", "acme", str(write_jsonl(tmp_path / "in.jsonl", lines)), "--no-progress"
    )
    assert (result.code, result.out) == (0, "5 created, 0 updated, 0 unchanged, 0 failed\n")
    assert write_statements == [2, 2, 1]  # chunks of the file staged and written while it is read

    stored = {row["uri"]: record_of(row) for row in tenant_rows(sql, "resources", "uri")}
    assert [(uri, r.text, r.version) for uri, r in stored.items()] == [
        (f"test://w/{i}", f"body {i}", 1) for i in range(5)
    ]
    versions = tenant_rows(sql, "resource_versions", "uri")
    assert [(v["uri"], v["version"], json.loads(v["snapshot"])) for v in versions] == [
        (uri, 1, record.snapshot()) for uri, record in stored.items()
    ]
    audit = tenant_rows(sql, "audit_log", "uri")
    assert [(a["uri"], a["action"], a["after_digest"]) for a in audit] == [
        (uri, "resource.create", record.digest()) for uri, record in stored.items()
    ]
    feed = tenant_rows(sql, "change_feed", "seq")  # numbered on across the statements, in file order
    assert [(f["seq"], f["uri"], f["op"]) for f in feed] == [
        (i + 1, f"test://w/{i}", "created") for i in range(5)
    ]
    assert len(tenant_rows(sql, "resource_tags", "uri")) == 5

    again = cli("import", "--tenant", "acme", str(tmp_path / "in.jsonl"), "--no-progress")
    assert (again.code, again.out) == (0, "0 created, 0 updated, 5 unchanged, 0 failed\n")
    assert len(tenant_rows(sql, "resource_versions", "uri")) == 5


def test_a_uri_repeated_after_its_first_body_was_written_still_makes_one_version(
    cli: Run, sql: Callable[..., list[asyncpg.Record]], tmp_path: Path, write_statements: list[int]
) -> None:
    """The first pass writes a and b, then meets a again: it rolls back and the file is imported
    again with one write at the end, so a's last body wins and a has one version and one audit row."""
    lines = [
        {"uri": "test://a", "name": "a", "text": "first"},
        {"uri": "test://b", "name": "b", "text": "b"},
        {"uri": "test://c", "name": "c", "text": "c"},
        {"uri": "test://a", "name": "a", "text": "last"},
    ]
    cli("tenant", "create", "acme")
    result = cli(
        "import", "--tenant", "acme", str(write_jsonl(tmp_path / "in.jsonl", lines)), "--no-progress"
    )
    assert (result.code, result.out) == (0, "3 created, 0 updated, 0 unchanged, 0 failed\n")
    assert write_statements == [2, 3]  # a and b written, then everything again in one write

    stored = {row["uri"]: row for row in tenant_rows(sql, "resources", "uri")}
    assert {uri: (row["text"], row["version"]) for uri, row in stored.items()} == {
        "test://a": ("last", 1),
        "test://b": ("b", 1),
        "test://c": ("c", 1),
    }
    assert [(v["uri"], v["version"], v["text"]) for v in tenant_rows(sql, "resource_versions", "uri")] == [
        ("test://a", 1, "last"),
        ("test://b", 1, "b"),
        ("test://c", 1, "c"),
    ]
    assert [a["uri"] for a in tenant_rows(sql, "audit_log", "uri")] == ["test://a", "test://b", "test://c"]
    feed = tenant_rows(sql, "change_feed", "seq")  # numbers the rolled-back pass took stay unused
    assert [f["uri"] for f in feed] == ["test://a", "test://b", "test://c"]
    assert [f["seq"] - feed[0]["seq"] for f in feed] == [0, 1, 2]


def test_a_pass_that_starts_over_has_stopped_reading_before_the_next_pass_begins(
    cli: Run, tmp_path: Path, write_statements: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first pass's read-ahead (a thread reading the file) is closed before the file is read
    again: left to the garbage collector it could still read, after the seek back, lines the second
    pass then never sees (under load: "2 created" of 3)."""
    real_read_ahead, real_upsert_all = importer._read_ahead, importer.upsert_all
    open_read_aheads: list[str] = []
    still_open_when_a_pass_began: list[list[str]] = []

    async def tracked(batches: Any) -> AsyncIterator[Any]:
        name = f"read-ahead {len(open_read_aheads)}"
        open_read_aheads.append(name)
        try:
            # aclosing, as the importer does: a wrapper that left the real read-ahead to the garbage
            # collector would itself bring back the race this test is about.
            async with aclosing(real_read_ahead(batches)) as inner:
                async for batch in inner:
                    yield batch
        finally:
            open_read_aheads.remove(name)

    async def upsert_all(*args: Any, **kwargs: Any) -> Any:
        still_open_when_a_pass_began.append(list(open_read_aheads))
        return await real_upsert_all(*args, **kwargs)

    monkeypatch.setattr(importer, "_read_ahead", tracked)
    monkeypatch.setattr(importer, "upsert_all", upsert_all)
    lines = [{"uri": f"test://{name}", "name": name, "text": name} for name in ("a", "b", "c", "a")]
    cli("tenant", "create", "acme")
    result = cli(
        "import", "--tenant", "acme", str(write_jsonl(tmp_path / "in.jsonl", lines)), "--no-progress"
    )
    assert (result.code, result.out) == (0, "3 created, 0 updated, 0 unchanged, 0 failed\n")
    assert write_statements == [2, 3]
    assert still_open_when_a_pass_began == [[], []]


def test_into_a_tenant_that_has_resources_everything_is_written_at_the_end(
    cli: Run, sql: Callable[..., list[asyncpg.Record]], tmp_path: Path, write_statements: list[int]
) -> None:
    """Rows there before need their digests before (looked up per write, a join over the tenant):
    written once, as before writing while parsing."""
    cli("tenant", "create", "acme")
    assert cli("import", "--tenant", "acme", str(write_jsonl(tmp_path / "1.jsonl", FIRST[:1]))).code == 0
    lines = [{"uri": f"test://n/{i}", "name": f"n{i}", "text": "n"} for i in range(4)]
    lines.append({"uri": "test://a", "name": "a", "text": "changed"})
    result = cli("import", "--tenant", "acme", str(write_jsonl(tmp_path / "2.jsonl", lines)), "--no-progress")
    assert (result.code, result.out) == (0, "4 created, 1 updated, 0 unchanged, 0 failed\n")
    assert write_statements == [1, 5]
    audit = [a for a in tenant_rows(sql, "audit_log", "id") if a["uri"] == "test://a"]
    assert [a["action"] for a in audit] == ["resource.create", "resource.update"]
    assert audit[1]["before_digest"] == audit[0]["after_digest"]


def test_a_resource_another_writer_adds_meanwhile_makes_the_import_start_over_with_its_digest_before(
    cli: Run, sql: Callable[..., list[asyncpg.Record]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tenant was empty when the import began, so its writes look nothing up; a row another
    writer commits meanwhile is found by the upsert, and the import starts over the careful way."""
    real = bulk._write_staged
    writes: list[bool] = []

    async def meanwhile(*args: Any, fresh: bool) -> None:
        if not writes:  # committed by another connection (from a thread: this one's loop is busy)
            with concurrent.futures.ThreadPoolExecutor(1) as other:
                other.submit(
                    sql,
                    "INSERT INTO resources (tenant_id, uri, name, text, size)"
                    " SELECT id, 'test://w/1', 'theirs', 'theirs', 6 FROM tenants WHERE slug = 'acme'",
                ).result()
        writes.append(fresh)
        await real(*args, fresh=fresh)

    monkeypatch.setattr(importer, "CHUNK_SIZE", 2)
    monkeypatch.setattr(importer, "WRITE_EVERY", 2)
    monkeypatch.setattr(bulk, "_write_staged", meanwhile)
    lines = [{"uri": f"test://w/{i}", "name": f"w{i}", "text": "ours"} for i in range(3)]
    cli("tenant", "create", "acme")
    result = cli(
        "import", "--tenant", "acme", str(write_jsonl(tmp_path / "in.jsonl", lines)), "--no-progress"
    )
    assert (result.code, result.out) == (0, "2 created, 1 updated, 0 unchanged, 0 failed\n")
    assert writes == [True, False]  # the fresh write found their row; once more, looking it up
    stored = {row["uri"]: row for row in tenant_rows(sql, "resources", "uri")}
    assert {uri: (row["name"], row["text"]) for uri, row in stored.items()} == {
        f"test://w/{i}": (f"w{i}", "ours") for i in range(3)
    }
    theirs = record_of(stored["test://w/1"])
    audit = {a["uri"]: a for a in tenant_rows(sql, "audit_log", "uri")}
    assert audit["test://w/1"]["action"] == "resource.update"
    before = dataclasses.replace(theirs, name="theirs", text="theirs", size=6, mime_type=None, tags=())
    assert audit["test://w/1"]["before_digest"] == before.digest()


async def test_progress_counts_each_byte_once_when_the_import_starts_over(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importer, "CHUNK_SIZE", 1)
    monkeypatch.setattr(importer, "WRITE_EVERY", 1)
    data = b"".join(
        json.dumps(line).encode() + b"\n"
        for line in (
            {"uri": "test://a", "name": "a", "text": "1"},
            {"uri": "test://b", "name": "b", "text": "2"},
            {"uri": "test://a", "name": "a", "text": "3"},
        )
    )
    engine = create_engine(settings.async_database_url(), pool_size=2)
    catalog = Catalog(engine=engine, settings=settings)
    progress: list[int] = []
    try:
        tenant = await create_tenant(catalog, "acme", "Acme")
        stream = io.BytesIO(b"\n" + data)  # read from where the stream stands, not from its start
        stream.readline()
        report = await importer.import_jsonl(
            catalog, Principal.system("import"), tenant, stream, "in.jsonl", on_progress=progress.append
        )
    finally:
        await engine.dispose()
    assert (report.created, report.updated, report.unchanged, report.failed) == (2, 0, 0, [])
    assert sum(progress) == len(data)


def test_a_bad_line_after_rows_were_written_still_leaves_nothing(
    cli: Run, sql: Callable[..., list[asyncpg.Record]], tmp_path: Path, write_statements: list[int]
) -> None:
    lines: list[object] = [{"uri": f"test://ok/{i}", "name": f"ok{i}", "text": "fine"} for i in range(4)]
    path = write_jsonl(tmp_path / "in.jsonl", [*lines, '{"uri": "test://broken"'])
    cli("tenant", "create", "acme")
    result = cli("import", "--tenant", "acme", str(path), "--no-progress")
    assert (result.code, result.out) == (1, "0 created, 0 updated, 0 unchanged, 1 failed\n")
    assert result.err.startswith(f"{path}:5: invalid JSON")
    assert write_statements == [2, 2]  # written, then rolled back with the rest
    for table in ("resources", "resource_versions", "audit_log", "change_feed", "resource_tags"):
        assert tenant_rows(sql, table, "tenant_id") == [], table


# -- NOTIFY and live streams ----------------------------------------------------------------------

ADMIN_TOKEN = "cat_import-bulk-admin-token"
WATCHED = "test://watched-resource"  # in the demo tenant, visible to anonymous callers


@dataclass
class Live:
    served: Served
    env: dict[str, str]
    dsn: str


@pytest_asyncio.fixture(loop_scope="session")
async def live(postgres_server: Any, template_database: str, tmp_path: Path) -> AsyncIterator[Live]:
    async with module_database(postgres_server, template_database) as url:
        env = catalog_env(
            CATALOG_DATABASE_URL=url,
            CATALOG_HOME=str(tmp_path / "home"),
            CATALOG_ADMIN_TOKEN=ADMIN_TOKEN,
            CATALOG_SECRET_KEY="import-bulk-secret-key-0123456789",
        )
        with serving("--demo", env=env) as served:
            await asyncio.to_thread(started, served)
            yield Live(served, env, listener_dsn(url))


async def import_file(live: Live, path: Path) -> str:
    done = await asyncio.to_thread(
        run_catalog, "import", "--tenant", "demo", str(path), "--no-progress", env=live.env
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.asyncio(loop_scope="session")
async def test_a_bulk_statement_sends_one_notify_naming_its_range_of_the_feed(
    live: Live, tmp_path: Path
) -> None:
    count = 300
    lines = [{"uri": f"test://bulk/{i:04d}", "name": f"r{i}", "text": f"{i}"} for i in range(count)]
    path = write_jsonl(tmp_path / "bulk.jsonl", lines)
    payloads: asyncio.Queue[str] = asyncio.Queue()
    conn = await asyncpg.connect(live.dsn)
    try:
        await conn.add_listener("catalog_changes", lambda *args: payloads.put_nowait(args[3]))
        assert await import_file(live, path) == f"{count} created, 0 updated, 0 unchanged, 0 failed\n"
        # Delivered in commit order: once the marker sent after the import arrives, so has all of it.
        await conn.execute("SELECT pg_notify('catalog_changes', 'end of test')")
        got: list[str] = []
        while not got or got[-1] != "end of test":
            got.append(await asyncio.wait_for(payloads.get(), WAIT))
        feed = await conn.fetch(
            "SELECT f.seq FROM change_feed AS f JOIN tenants AS t ON t.id = f.tenant_id"
            " WHERE t.slug = 'demo' AND f.uri LIKE 'test://bulk/%' ORDER BY f.seq"
        )
        tenant = await conn.fetchval("SELECT id FROM tenants WHERE slug = 'demo'")
    finally:
        await conn.close()
    assert len(feed) == count
    assert [json.loads(p) for p in got[:-1]] == [
        {
            "t": tenant,
            "k": "resource",
            "u": None,
            "o": "bulk",
            "f": feed[0]["seq"],
            "s": feed[-1]["seq"],
            "n": count,
        }
    ]


def sdk_client(served: Served) -> Client:
    http = httpx2.AsyncClient(timeout=30)
    return Client(streamable_http_client(f"{served.base_url}/mcp", http_client=http), mode=MODERN, cache=None)


async def notifications(sub: Any, wanted: set[Any]) -> set[Any]:
    got: set[Any] = set()
    while not wanted <= got:
        got.add(await asyncio.wait_for(sub.__anext__(), WAIT))
    return got


@pytest.mark.asyncio(loop_scope="session")
async def test_a_listen_stream_sees_the_imported_changes_to_what_it_watches(
    live: Live, tmp_path: Path
) -> None:
    """SUB-4, SUB-5: a small import reaches the stream change by change (the listener reads the
    statement's range back from the feed); a large one as one marker, after which every watched
    URI that is visible fires ``updated`` and the list changed."""
    async with (
        sdk_client(live.served) as client,
        client.listen(resources_list_changed=True, resource_subscriptions=[WATCHED]) as sub,
    ):
        small = [
            {"uri": WATCHED, "name": "watched-resource", "mimeType": "text/plain", "text": "imported 1"},
            {"uri": "test://imported/new", "name": "new", "text": "n"},
        ]
        assert await import_file(live, write_jsonl(tmp_path / "small.jsonl", small)) == (
            "1 created, 1 updated, 0 unchanged, 0 failed\n"
        )
        assert await notifications(sub, {ResourceUpdated(uri=WATCHED), ResourcesListChanged()}) == {
            ResourceUpdated(uri=WATCHED),
            ResourcesListChanged(),
        }
        read = await client.read_resource(WATCHED)
        assert read.contents[0].text == "imported 1"  # type: ignore[union-attr]

        large = [
            {"uri": f"test://imported/{i:04d}", "name": f"r{i}", "text": "x"} for i in range(BULK_EXPAND + 1)
        ]
        large.append({**small[0], "text": "imported 2"})
        assert (await import_file(live, write_jsonl(tmp_path / "large.jsonl", large))).startswith(
            f"{BULK_EXPAND + 1} created, 1 updated"
        )
        assert await notifications(sub, {ResourceUpdated(uri=WATCHED), ResourcesListChanged()}) == {
            ResourceUpdated(uri=WATCHED),
            ResourcesListChanged(),
        }
        read = await client.read_resource(WATCHED)
        assert read.contents[0].text == "imported 2"  # type: ignore[union-attr]
