"""``catalog backup`` / ``catalog restore``: a whole tenant to one file and back, real PostgreSQL.

The round trip is the proof: a backup of the restored tenant equals the backup of the original,
line for line, except for what a restore cannot keep (documented in README and
``catalog.core.backup``): the backup's own time, the tenant's slug and creation time, row ids, and
the revocation time of tokens that were live (a restored token is always revoked).
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from catalog.bootstrap import open_catalog
from catalog.core.backup import dump as backup_dump
from catalog.core.backup import restore as backup_restore
from catalog.core.backup.format import CHUNK
from catalog.core.principal import Principal
from catalog.core.resources import patch_resource
from catalog.core.schemas.resources import ResourcePatch
from catalog.core.tenants import get_tenant
from catalog.settings import get_settings
from tests.conftest import Run
from tests.processes import catalog_env

pytestmark = pytest.mark.process

Sql = Callable[..., list[asyncpg.Record]]
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 1200  # past one 256 KiB chunk


def jsonl(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def build_origin(cli: Run, tmp_path: Path) -> None:
    """A tenant with a bit of everything: history, a move, an orphaned blob, every grant kind."""
    assert cli("tenant", "create", "origin", "--name", "Origin Inc").code == 0
    first = [
        {
            "uri": "test://rich",
            "name": "rich",
            "title": "Rich",
            "mimeType": "text/markdown",
            "icons": [{"src": "https://example.com/i.png", "sizes": ["48x48"]}],
            "annotations": {"audience": ["user"], "priority": 0.5},
            "tags": ["b", "a"],
            "consentMessage": "why?",
            "_meta": {"vendor/k": [1, None]},
            "text": "v1 🌍",
        },
        {"uri": "file:///img/logo.png", "name": "logo", "mimeType": "image/png", "blob": b64(PNG)},
        {"uri": "file:///img", "name": "img", "mimeType": "inode/directory"},
        {"uri": "test://old-name", "name": "moved", "text": "here"},
        {"uri": "test://bare", "name": "bare"},
    ] + [{"uri": f"test://many/{i:04d}", "name": f"m{i}", "text": str(i)} for i in range(620)]
    assert cli("import", "--tenant", "origin", str(jsonl(tmp_path / "1.jsonl", first))).code == 0
    second = [
        {**first[0], "text": "v2", "tags": ["c"]},
        {"uri": "file:///img/logo.png", "name": "logo", "mimeType": "image/png", "blob": b64(PNG[::-1])},
    ]
    assert cli("import", "--tenant", "origin", str(jsonl(tmp_path / "2.jsonl", second))).code == 0

    async def move() -> None:
        async with open_catalog(get_settings(), pool_size=1) as catalog:
            tenant = await get_tenant(catalog, "origin")
            rows = await _ids(catalog, tenant.id)
            body = ResourcePatch.model_validate({"uri": "test://new-name"})
            await patch_resource(catalog, Principal.system("test"), tenant, rows["test://old-name"], body)

    asyncio.run(move())
    body = tmp_path / "body.json"
    body.write_text('{"id": "{id}"}')
    for argv in (
        [
            "test://orders/{id}",
            "--name",
            "order",
            "--mime-type",
            "application/json",
            "--text-file",
            str(body),
        ],
        ["test://t/{x}", "--name", "t", "--tag", "z"],
    ):
        assert cli("template", "add", "--tenant", "origin", *argv).code == 0
    for selector in (["--uri", "test://rich"], ["--uri-prefix", "file:///img"], ["--tag", "c"]):
        assert cli("grant", "add", "--tenant", "origin", "--scope", "read", *selector).code == 0
    cli("token", "create", "--tenant", "origin", "--scope", "read", "--name", "agent")
    cli("token", "create", "--tenant", "origin", "--admin", "--expires-in", "30")
    revoked = cli("token", "create", "--tenant", "origin", "--scope", "x")
    assert revoked.code == 0


async def _ids(catalog: Any, tenant_id: int) -> dict[str, int]:
    from sqlalchemy import select

    from catalog.db.engine import TenantScope, transaction
    from catalog.db.models import resources

    async with transaction(catalog.engine, TenantScope.tenant(tenant_id)) as conn:
        rows = await conn.execute(select(resources.c.uri, resources.c.id))
        return {row.uri: row.id for row in rows}


def lines(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as stream:
        return [json.loads(line) for line in stream]


def comparable(backup: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A backup without what a restore cannot keep (see the module docstring)."""
    out = []
    for line in backup:
        line = {k: v for k, v in line.items() if k != "id"}
        if line["kind"] == "catalog-backup":
            line = {**line, "createdAt": None, "tenant": {**line["tenant"], "slug": None, "createdAt": None}}
        if line["kind"] == "token":
            line["revokedAt"] = "revoked"  # a restored token is always revoked
        out.append(line)
    return out


def test_a_backup_of_the_restored_tenant_equals_the_original(cli: Run, sql: Sql, tmp_path: Path) -> None:
    build_origin(cli, tmp_path)
    token_id = sql("SELECT max(id) FROM tokens")[0][0]
    assert cli("token", "revoke", "--tenant", "origin", str(token_id)).code == 0

    first = tmp_path / "origin.backup"
    made = cli("backup", "--tenant", "origin", str(first))
    assert (made.code, made.out) == (0, "")
    assert made.err == (
        f"catalog: backed up tenant origin to {first}: 625 resources (628 versions), 2 blobs"
        f" ({2 * len(PNG)} bytes), 2 templates, 3 grants, 3 tokens\n"
    )
    assert first.read_bytes()[:2] == b"\x1f\x8b" and not list(tmp_path.glob(".*partial"))

    restored = cli("restore", "--tenant", "copy", str(first))
    assert (restored.code, restored.out) == (0, "")
    assert restored.err.splitlines() == [
        f"catalog: restored tenant origin as copy: 625 resources (628 versions), 2 blobs ({2 * len(PNG)} bytes),"
        " 2 templates, 3 grants, 3 tokens",
        "catalog: its 3 tokens are listed revoked (a backup holds no secrets): mint new ones with"
        " `catalog token create --tenant copy`",
    ]
    second = tmp_path / "copy.backup"
    assert cli("backup", "--tenant", "copy", str(second)).code == 0

    original, again = lines(first), lines(second)
    assert comparable(again) == comparable(original)
    assert [line["kind"] for line in original[:1] + original[-1:]] == ["catalog-backup", "end"]
    assert original[0]["tenant"] == {
        **again[0]["tenant"],
        "slug": "origin",
        "createdAt": original[0]["tenant"]["createdAt"],
    }
    assert again[0]["tenant"]["name"] == "Origin Inc"
    kinds = [line["kind"] for line in original]
    assert kinds.count("chunk") == 2 * -(-len(PNG) // CHUNK)
    history = [
        (line["resourceUri"], line["version"], line["uri"]) for line in original if line["kind"] == "version"
    ]
    assert ("test://new-name", 1, "test://old-name") in history and (
        "test://new-name",
        2,
        "test://new-name",
    ) in history

    # In the database: every column a restore keeps, kept.
    def table(query: str, slug: str) -> list[tuple[Any, ...]]:
        return [
            tuple(r)
            for r in sql(
                query.format(t=f"(SELECT id FROM tenants WHERE slug = '{slug}')"),
            )
        ]

    queries = [
        "SELECT uri, name, title, description, mime_type, size, icons, annotations, meta, tags, consent_message,"
        " text, blob_sha256, version, created_at, updated_at, content_changed_at FROM resources"
        " WHERE tenant_id = {t} ORDER BY uri",
        "SELECT r.uri, v.version, v.uri, v.snapshot, v.text, v.blob_sha256, v.changed_by, v.changed_at"
        " FROM resource_versions v JOIN resources r ON (r.tenant_id, r.id) = (v.tenant_id, v.resource_id)"
        " WHERE v.tenant_id = {t} ORDER BY r.uri, v.version",
        "SELECT tag, uri FROM resource_tags WHERE tenant_id = {t} ORDER BY tag, uri",
        "SELECT sha256, size, mime_type, data, created_at FROM blobs WHERE tenant_id = {t} ORDER BY sha256",
        "SELECT uri_template, literal_prefix, name, mime_type, tags, text, version, created_at, updated_at"
        " FROM templates WHERE tenant_id = {t} ORDER BY uri_template",
        "SELECT scope, uri, uri_prefix, tag, created_at FROM grants WHERE tenant_id = {t} ORDER BY id",
        "SELECT name, scopes, is_admin, expires_at, created_at FROM tokens WHERE tenant_id = {t} ORDER BY id",
    ]
    for query in queries:
        assert table(query, "copy") == table(query, "origin"), query
    assert len(table(queries[0], "copy")) == 625


def test_restored_tokens_never_authenticate_and_the_file_holds_no_secret(
    cli: Run, sql: Sql, tmp_path: Path
) -> None:
    cli("tenant", "create", "origin")
    secret = cli("token", "create", "--tenant", "origin", "--scope", "read").out.strip()
    path = tmp_path / "b"
    assert cli("backup", "--tenant", "origin", str(path), "--no-progress").code == 0
    raw = gzip.decompress(path.read_bytes())
    (stored,) = sql("SELECT token_hash FROM tokens")
    digest = bytes(stored["token_hash"])
    for form in (
        secret.encode(),
        digest,
        digest.hex().encode(),
        base64.b64encode(digest),
        b"token_hash",
        b"tokenHash",
    ):
        assert form not in raw
    (token_line,) = [line for line in lines(path) if line["kind"] == "token"]
    assert set(token_line) == {"kind", "id", "createdAt", "revokedAt", "token"}
    assert set(token_line["token"]) == {"name", "scopes", "admin", "expiresAt"}

    assert cli("restore", "--tenant", "copy", str(path)).code == 0
    listed = [row.split("\t") for row in cli("token", "list", "--tenant", "copy").out.splitlines()]
    assert [(row[1], row[2]) for row in listed] == [("revoked", "read")]
    hashes = {bytes(r["token_hash"]) for r in sql("SELECT token_hash FROM tokens")}
    assert len(hashes) == 2  # a fresh random hash: the original secret matches only the original row
    audit = sql(
        "SELECT action, principal, detail FROM audit_log a JOIN tenants t ON t.id = a.tenant_id WHERE t.slug = 'copy'"
    )
    assert [(r["action"], r["principal"]) for r in audit] == [("tenant.restore", "system:restore")]
    assert json.loads(audit[0]["detail"])["from"] == "origin"


def damaged(path: Path, change: Callable[[list[bytes]], list[bytes]]) -> Path:
    raw = gzip.decompress(path.read_bytes()).splitlines(keepends=True)
    out = path.with_name(path.name + ".damaged")
    out.write_bytes(gzip.compress(b"".join(change(raw))))
    return out


def _corrupt_chunk(raw: list[bytes]) -> list[bytes]:
    index = next(i for i, line in enumerate(raw) if b'"kind":"chunk"' in line)
    line = json.loads(raw[index])
    data = bytearray(base64.b64decode(line["data"]))
    data[0] ^= 1
    raw[index] = json.dumps({"kind": "chunk", "data": b64(bytes(data))}).encode() + b"\n"
    return raw


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda raw: raw[:-1], "the backup ends before its 'end' line: the file is truncated"),
        (lambda raw: raw[:-3] + raw[-2:], "the backup announces"),
        (_corrupt_chunk, "the bytes do not match its size and sha256"),
        (lambda raw: [raw[0], b"{not json\n", *raw[1:]], ":2: not a JSON line"),
        (lambda raw: [raw[0], raw[-2], *raw[1:]], "out of order"),
        (lambda raw: [b'{"kind": "catalog-backup", "format": 9}\n', *raw[1:]], ":1: backup format 9"),
    ],
)
def test_a_damaged_backup_is_refused_in_one_line_and_leaves_no_tenant(
    cli: Run, sql: Sql, tmp_path: Path, change: Callable[[list[bytes]], list[bytes]], message: str
) -> None:
    cli("tenant", "create", "origin")
    source = [{"uri": f"test://r{i}", "name": "r", "text": str(i)} for i in range(3)]
    source.append({"uri": "test://bin", "name": "b", "blob": b64(PNG)})
    cli("import", "--tenant", "origin", str(jsonl(tmp_path / "in.jsonl", source)))
    path = tmp_path / "b"
    assert cli("backup", "--tenant", "origin", str(path)).code == 0
    result = cli("restore", "--tenant", "copy", str(damaged(path, change)))
    assert result.code == 1 and result.out == "" and len(result.err.splitlines()) == 1, result.err
    assert result.err.startswith("catalog: ") and message in result.err
    assert [r["slug"] for r in sql("SELECT slug FROM tenants")] == ["origin"]


def test_restore_refuses_a_taken_slug_and_a_file_that_is_no_backup(
    cli: Run, sql: Sql, tmp_path: Path
) -> None:
    cli("tenant", "create", "origin")
    path = tmp_path / "b"
    cli("backup", "--tenant", "origin", str(path))
    taken = cli("restore", "--tenant", "origin", str(path))
    assert (taken.code, taken.err) == (1, "catalog: tenant 'origin' exists already\n")
    other = jsonl(tmp_path / "x.jsonl", [{"uri": "test://a", "name": "a"}])
    wrong = cli("restore", "--tenant", "copy", str(other))
    assert wrong.code == 1
    assert wrong.err == f"catalog: {other}:1: not a catalog backup (no catalog-backup header)\n"
    missing = cli("restore", "--tenant", "copy", str(tmp_path / "nope"))
    assert (missing.code, missing.err) == (1, f"catalog: {tmp_path / 'nope'}: No such file or directory\n")
    assert [r["slug"] for r in sql("SELECT slug FROM tenants")] == ["origin"]
    unknown = cli("backup", "--tenant", "nope", str(tmp_path / "c"))
    assert (unknown.code, unknown.err) == (1, "catalog: no tenant 'nope'\n")
    assert not (tmp_path / "c").exists()


def test_backup_to_stdout_piped_into_restore_from_stdin_plain_or_gzip(
    cli: Run, sql: Sql, tmp_path: Path, database_url: str
) -> None:
    """``catalog backup ... - | catalog restore ... -``, as real processes and pipes."""
    cli("tenant", "create", "origin")
    cli(
        "import",
        "--tenant",
        "origin",
        str(jsonl(tmp_path / "in.jsonl", [{"uri": "test://a", "name": "a", "text": "x"}])),
    )
    env = catalog_env(CATALOG_DATABASE_URL=database_url, CATALOG_HOME=str(tmp_path / "home"))
    command = [sys.executable, "-m", "catalog"]
    backup = subprocess.run(
        [*command, "backup", "--tenant", "origin", "-"], env=env, capture_output=True, timeout=120
    )
    assert backup.returncode == 0 and backup.stdout[:2] == b"\x1f\x8b", backup.stderr
    for slug, given in (("gz", backup.stdout), ("plain", gzip.decompress(backup.stdout))):
        restore = subprocess.run(
            [*command, "restore", "--tenant", slug, "-"],
            env=env,
            input=given,
            capture_output=True,
            timeout=120,
        )
        assert (restore.returncode, restore.stdout) == (0, b""), restore.stderr
        assert restore.stderr.decode().startswith(f"catalog: restored tenant origin as {slug}: 1 resources")
    texts = sql("SELECT t.slug, r.text FROM resources r JOIN tenants t ON t.id = r.tenant_id ORDER BY t.slug")
    assert [tuple(r) for r in texts] == [("gz", "x"), ("origin", "x"), ("plain", "x")]


def test_backup_and_restore_hold_a_bounded_amount_of_memory(
    cli: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Constant memory: 48 MB of content through both directions, while what is held is bounded by
    a cursor's fetch (backup) and a restore batch (here 100 rows), not by the tenant."""
    monkeypatch.setattr(backup_restore, "BATCH_ROWS", 100)
    text = "x" * 12_000
    cli("tenant", "create", "origin")
    source = [{"uri": f"test://big/{i:05d}", "name": "b", "text": text + str(i)} for i in range(2000)]
    cli("import", "--tenant", "origin", str(jsonl(tmp_path / "in.jsonl", source)), "--no-progress")
    path = tmp_path / "b"
    settings = get_settings()

    async def round_trip() -> tuple[int, int]:
        async with open_catalog(settings, pool_size=2) as catalog:
            tenant = await get_tenant(catalog, "origin")
            with gzip.open(path, "wb") as out:  # a first run, so imports and caches are not counted
                await backup_dump.write_backup(catalog, tenant, out)
            tracemalloc.start()
            with gzip.open(path, "wb") as out:
                await backup_dump.write_backup(catalog, tenant, out)
            written = tracemalloc.get_traced_memory()[1]
            tracemalloc.reset_peak()
            with gzip.open(path, "rb") as stream:
                await backup_restore.restore_backup(catalog, Principal.system("test"), "copy", stream)
            read = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            return written, read

    written, read = asyncio.run(round_trip())
    content = 2000 * 2 * len(text)  # each text twice: the resource and its one version
    assert written < content / 4, written
    assert read < content / 4, read
