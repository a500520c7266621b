"""The catalogue commands of the CLI: tenant, token, import, export -- run in-process, real PostgreSQL."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from catalog.auth import authenticate
from catalog.core.catalog import Catalog
from catalog.db.engine import create_engine
from catalog.settings import get_settings
from tests.conftest import Run

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01"


def resources_of(sql: Callable[..., list[asyncpg.Record]], slug: str) -> dict[str, dict[str, Any]]:
    rows = sql(
        "SELECT r.*, b.data AS blob_data FROM resources r JOIN tenants t ON t.id = r.tenant_id"
        " LEFT JOIN blobs b ON b.tenant_id = r.tenant_id AND b.sha256 = r.blob_sha256"
        " WHERE t.slug = $1 ORDER BY r.uri",
        slug,
    )
    return {row["uri"]: dict(row) for row in rows}


def write_jsonl(path: Path, lines: list[object]) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


# -- tenant ---------------------------------------------------------------------------------------


def test_tenant_create_and_list(cli: Run) -> None:
    created = cli("tenant", "create", "acme", "--name", "Acme Inc")
    assert (created.code, created.out) == (0, "created tenant acme (Acme Inc)\n")
    assert cli("tenant", "create", "beta").code == 0

    listed = cli("tenant", "list")
    assert listed.code == 0
    rows = [line.split("\t") for line in listed.out.splitlines()]
    assert [(slug, name) for slug, name, _ in rows] == [("acme", "Acme Inc"), ("beta", "beta")]
    assert all(datetime.fromisoformat(at) <= datetime.now(UTC) for _, _, at in rows)


def test_tenant_create_refuses_a_taken_or_invalid_slug_in_one_line(cli: Run) -> None:
    cli("tenant", "create", "acme")
    again = cli("tenant", "create", "acme")
    assert again.code == 1 and again.out == ""
    assert again.err == "catalog: tenant 'acme' exists already\n"
    bad = cli("tenant", "create", "Not_A_Slug")
    assert bad.code == 1 and len(bad.err.splitlines()) == 1
    assert bad.err.startswith("catalog: invalid tenant slug")


# -- token ----------------------------------------------------------------------------------------


def test_token_create_prints_only_a_token_that_authenticates_and_stores_only_its_hash(
    cli: Run, sql: Callable[..., list[asyncpg.Record]]
) -> None:
    cli("tenant", "create", "acme")
    result = cli(
        "token",
        "create",
        "--tenant",
        "acme",
        "--scope",
        "read",
        "--scope",
        "docs",
        "--admin",
        "--expires-in",
        "2",
    )
    assert result.code == 0
    token = result.out.strip()
    assert result.out == token + "\n" and token.startswith("cat_") and len(token) > 40
    assert token not in result.err and "scopes: docs, read" in result.err and "admin: yes" in result.err

    async def who() -> Any:
        settings = get_settings()
        engine = create_engine(settings.async_database_url(), pool_size=1, max_overflow=0)
        try:
            return await authenticate(Catalog(engine=engine, settings=settings), f"Bearer {token}")
        finally:
            await engine.dispose()

    principal = asyncio.run(who())
    assert principal.kind == "token" and principal.tenant_slug == "acme"
    assert principal.scopes == frozenset({"read", "docs"}) and principal.is_admin

    (row,) = sql("SELECT * FROM tokens")
    assert bytes(row["token_hash"]) == hashlib.sha256(token.encode()).digest()
    assert not any(token in str(value) for value in dict(row).values())
    expected_expiry = datetime.now(UTC) + timedelta(days=2)
    assert abs(row["expires_at"] - expected_expiry) < timedelta(minutes=1)


def test_token_create_without_flags_is_a_plain_token_that_never_expires(
    cli: Run, sql: Callable[..., list[asyncpg.Record]]
) -> None:
    cli("tenant", "create", "acme")
    result = cli("token", "create", "--tenant", "acme")
    assert result.code == 0 and result.out.startswith("cat_")
    (row,) = sql("SELECT scopes, is_admin, expires_at FROM tokens")
    assert (row["scopes"], row["is_admin"], row["expires_at"]) == ([], False, None)


# -- import: directories --------------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "docs" / "deep").mkdir(parents=True)
    (root / "with space").mkdir()
    (root / "README.md").write_text("# Hello\n")
    (root / "docs" / "guide.txt").write_text("Grüße, world\n")
    (root / "docs" / "deep" / "data.json").write_text('{"a": 1}')
    (root / "docs" / "logo.png").write_bytes(PNG)
    (root / "docs" / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))  # not UTF-8: a blob
    (root / "with space" / "Makefile").write_text("all:\n\ttrue\n")
    (root / "with space" / "raw").write_bytes(b"\x00\x01\x02")
    (root / "with space" / "ünï 100%.py").write_text("print(1)\n")
    outside = tmp_path / "secret.txt"
    outside.write_text("do not import")
    (root / "escape.txt").symlink_to(outside)
    (root / "docs" / "readme-link.md").symlink_to(root / "README.md")
    (root / "docs" / "deep" / "loop").symlink_to(root / "docs")
    return root


def test_directory_import_makes_text_blob_and_directory_resources(
    cli: Run, sql: Callable[..., list[asyncpg.Record]], tree: Path
) -> None:
    cli("tenant", "create", "acme")
    result = cli("import", "--tenant", "acme", str(tree))
    assert result.code == 0, result.err
    assert result.out == "12 created, 0 updated, 0 unchanged, 0 failed, 2 skipped\n"
    assert f"{tree / 'escape.txt'}: symlink to outside the directory, skipped" in result.err
    assert f"{tree / 'docs' / 'deep' / 'loop'}: symlink to one of its own parents, skipped" in result.err

    found = resources_of(sql, "acme")
    shape = {
        uri: (r["name"], r["mime_type"], r["size"], r["text"], r["blob_data"] and bytes(r["blob_data"]))
        for uri, r in found.items()
    }
    assert shape == {
        "file:///README.md": ("README.md", "text/markdown", 8, "# Hello\n", None),
        "file:///docs": ("docs", "inode/directory", None, None, None),
        "file:///docs/deep": ("deep", "inode/directory", None, None, None),
        "file:///docs/deep/data.json": ("data.json", "application/json", 8, '{"a": 1}', None),
        "file:///docs/guide.txt": ("guide.txt", "text/plain", 15, "Grüße, world\n", None),
        "file:///docs/latin1.txt": ("latin1.txt", "text/plain", 5, None, b"caf\xe9\n"),
        "file:///docs/logo.png": ("logo.png", "image/png", len(PNG), None, PNG),
        "file:///docs/readme-link.md": ("readme-link.md", "text/markdown", 8, "# Hello\n", None),
        "file:///with%20space": ("with space", "inode/directory", None, None, None),
        "file:///with%20space/Makefile": ("Makefile", "text/plain", 11, "all:\n\ttrue\n", None),
        "file:///with%20space/raw": ("raw", "application/octet-stream", 3, None, b"\x00\x01\x02"),
        "file:///with%20space/%C3%BCn%C3%AF%20100%25.py": (
            "ünï 100%.py",
            "text/x-python",
            9,
            "print(1)\n",
            None,
        ),
    }
    assert "secret" not in json.dumps([r["text"] for r in found.values()])
    assert all(r["version"] == 1 for r in found.values())


def test_reimporting_a_directory_changes_nothing_until_a_file_changes(
    cli: Run, sql: Callable[..., list[asyncpg.Record]], tree: Path
) -> None:
    cli("tenant", "create", "acme")
    assert cli("import", "--tenant", "acme", str(tree)).code == 0
    before = resources_of(sql, "acme")
    counts = sql("SELECT (SELECT count(*) FROM audit_log) a, (SELECT count(*) FROM change_feed) f")[0]

    again = cli("import", "--tenant", "acme", str(tree))
    assert again.code == 0
    assert again.out == "0 created, 0 updated, 12 unchanged, 0 failed, 2 skipped\n"
    assert resources_of(sql, "acme") == before  # versions, timestamps, content: all untouched
    assert sql("SELECT (SELECT count(*) FROM audit_log) a, (SELECT count(*) FROM change_feed) f")[0] == counts

    (tree / "docs" / "logo.png").write_bytes(PNG + b"\x01")
    changed = cli("import", "--tenant", "acme", str(tree))
    assert changed.out == "0 created, 1 updated, 11 unchanged, 0 failed, 2 skipped\n"
    after = resources_of(sql, "acme")
    assert after["file:///docs/logo.png"]["version"] == 2
    assert bytes(after["file:///docs/logo.png"]["blob_data"]) == PNG + b"\x01"
    assert {uri: r["version"] for uri, r in after.items() if uri != "file:///docs/logo.png"} == {
        uri: 1 for uri in after if uri != "file:///docs/logo.png"
    }


def test_directory_import_reports_a_file_over_the_blob_limit_and_imports_the_rest(
    cli: Run, sql: Callable[..., list[asyncpg.Record]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CATALOG_MAX_BLOB_BYTES", "100")
    root = tmp_path / "t"
    root.mkdir()
    (root / "big.bin").write_bytes(b"\xff" * 101)
    (root / "small.txt").write_text("ok")
    cli("tenant", "create", "acme")
    result = cli("import", "--tenant", "acme", str(root))
    assert result.code == 1
    assert f"{root / 'big.bin'}: larger than 100 bytes (CATALOG_MAX_BLOB_BYTES)" in result.err
    assert "Traceback" not in result.err
    assert result.out == "1 created, 0 updated, 0 unchanged, 1 failed\n"
    assert list(resources_of(sql, "acme")) == ["file:///small.txt"]


# -- import: JSONL --------------------------------------------------------------------------------


def test_jsonl_import_reports_bad_lines_and_imports_the_rest(
    cli: Run, sql: Callable[..., list[asyncpg.Record]], tmp_path: Path
) -> None:
    path = write_jsonl(
        tmp_path / "in.jsonl",
        [
            {"uri": "test://one", "name": "one", "text": "1"},
            '{"uri": "test://broken", ',
            {
                "uri": "test://two",
                "name": "two",
                "blob": base64.b64encode(PNG).decode(),
                "mimeType": "image/png",
            },
            {"uri": "file:///a/../etc/passwd", "name": "evil", "text": "x"},
            "[1, 2]",
            "",
            {"uri": "test://both", "name": "both", "text": "t", "blob": "AA=="},
            {"uri": "test://unknown-blob", "name": "u", "blobSha256": "0" * 64},
            {"uri": "test://three", "name": "three", "text": "3", "tags": ["b", "a"]},
        ],
    )
    cli("tenant", "create", "acme")
    result = cli("import", "--tenant", "acme", str(path), "--batch-size", "3")
    assert result.code == 1
    assert result.out == "3 created, 0 updated, 0 unchanged, 5 failed\n"
    errors = result.err.splitlines()
    assert errors[0].startswith(f"{path}:2: invalid JSON")
    assert errors[1].startswith(f"{path}:4: /uri: '..' path segments")
    assert errors[2] == f"{path}:5: a line must be a JSON object (an admin-API resource)"
    assert errors[3] == f"{path}:7: give at most one of text, blob, blobSha256 (got text, blob)"
    assert errors[4].startswith(f"{path}:8: no such blob in this tenant")
    assert len(errors) == 5 and "Traceback" not in result.err

    found = resources_of(sql, "acme")
    assert list(found) == ["test://one", "test://three", "test://two"]
    assert bytes(found["test://two"]["blob_data"]) == PNG and found["test://two"]["size"] == len(PNG)
    assert found["test://three"]["tags"] == ["a", "b"]


def test_batched_import_keeps_versions_audit_and_feed_of_single_writes(
    cli: Run, sql: Callable[..., list[asyncpg.Record]], tmp_path: Path
) -> None:
    path = write_jsonl(
        tmp_path / "in.jsonl",
        [
            {"uri": "test://a", "name": "a", "text": "1"},
            {"uri": "test://b", "name": "b", "text": "1"},
            {"uri": "test://a", "name": "a", "text": "2"},  # same batch, later line wins
            {"uri": "test://a", "name": "a", "text": "2"},  # unchanged
            {"uri": "test://b", "name": "b", "text": "3"},  # next batch: an update
        ],
    )
    cli("tenant", "create", "acme")
    result = cli("import", "--tenant", "acme", str(path), "--batch-size", "4")
    assert result.out == "2 created, 2 updated, 1 unchanged, 0 failed\n"
    history = sql("SELECT uri, version, text, changed_by FROM resource_versions ORDER BY uri, version")
    assert [tuple(row) for row in history] == [
        ("test://a", 1, "1", "system:import"),
        ("test://a", 2, "2", "system:import"),
        ("test://b", 1, "1", "system:import"),
        ("test://b", 2, "3", "system:import"),
    ]
    audit = sql("SELECT uri, action FROM audit_log ORDER BY uri, id")
    assert [tuple(row) for row in audit] == [
        ("test://a", "resource.create"),
        ("test://a", "resource.update"),
        ("test://b", "resource.create"),
        ("test://b", "resource.update"),
    ]
    feed = sql("SELECT uri, op FROM change_feed ORDER BY uri, seq")
    assert [tuple(row) for row in feed] == [
        ("test://a", "created"),
        ("test://a", "updated"),
        ("test://b", "created"),
        ("test://b", "updated"),
    ]


def test_batches_written_two_at_a_time_keep_each_uris_order_and_report_in_input_order(
    cli: Run, sql: Callable[..., list[asyncpg.Record]], tmp_path: Path
) -> None:
    """Batches are written two at a time (``IMPORT_WRITERS``); still every URI's bodies apply in input
    order (three versions each, the last text wins) and problems are reported in input order."""
    lines: list[object] = []
    for round_ in range(1, 4):
        lines += [{"uri": f"test://u{i}", "name": "u", "text": f"{round_}"} for i in range(6)]
        lines.append(f'{{"bad": {round_}')
    path = write_jsonl(tmp_path / "in.jsonl", lines)
    cli("tenant", "create", "acme")
    result = cli("import", "--tenant", "acme", str(path), "--batch-size", "2")
    assert result.out == "6 created, 12 updated, 0 unchanged, 3 failed\n"
    assert [line.split(": ")[0] for line in result.err.splitlines()] == [
        f"{path}:7",
        f"{path}:14",
        f"{path}:21",
    ]
    history = sql("SELECT uri, version, text FROM resource_versions ORDER BY uri, version")
    assert [tuple(row) for row in history] == [
        (f"test://u{i}", version, str(version)) for i in range(6) for version in (1, 2, 3)
    ]
    final = sql("SELECT DISTINCT text FROM resources")
    assert [row["text"] for row in final] == ["3"]


# -- export ---------------------------------------------------------------------------------------

RICH = [
    {
        "uri": "test://rich",
        "name": "rich",
        "title": "A rich resource",
        "description": "Every field there is",
        "mimeType": "text/markdown",
        "icons": [
            {"src": "https://example.com/i.png", "mimeType": "image/png", "sizes": ["48x48"], "theme": "dark"}
        ],
        "annotations": {
            "audience": ["user", "assistant"],
            "priority": 0.25,
            "lastModified": "2025-01-12T15:00:58Z",
        },
        "tags": ["zeta", "alpha"],
        "consentMessage": "Say why",
        "ttlMs": 2500,
        "_meta": {"vendor/key": {"nested": [1, "two", None, True]}},
        "text": "# Rich 🌍\nline two\u2028\n",
    },
    {"uri": "test://bin", "name": "bin", "mimeType": "image/png", "blob": base64.b64encode(PNG).decode()},
    {"uri": "test://bin-copy", "name": "bin copy", "blob": base64.b64encode(PNG).decode()},
    {"uri": "file:///dir", "name": "dir", "mimeType": "inode/directory", "annotations": {"priority": 1}},
    {"uri": "test://empty-text", "name": "empty", "text": ""},
    {"uri": "test://no-content", "name": "bare"},
] + [{"uri": f"test://many/{i:04d}", "name": f"m{i}", "text": str(i)} for i in range(1100)]

COMPARED = [
    "uri",
    "name",
    "title",
    "description",
    "mime_type",
    "size",
    "icons",
    "annotations",
    "meta",
    "tags",
    "consent_message",
    "ttl_ms",
    "text",
    "blob_sha256",
]


def test_export_then_import_into_a_fresh_tenant_gives_an_identical_catalogue(
    cli: Run, sql: Callable[..., list[asyncpg.Record]], tmp_path: Path
) -> None:
    cli("tenant", "create", "origin")
    cli("tenant", "create", "copy")
    assert cli("import", "--tenant", "origin", str(write_jsonl(tmp_path / "in.jsonl", RICH))).code == 0

    exported = cli("export", "--tenant", "origin")
    assert exported.code == 0
    assert exported.err == f"catalog: exported {len(RICH)} resources of tenant origin\n"
    lines = exported.out.splitlines()
    assert len(lines) == len(RICH) and lines == sorted(lines, key=lambda line: json.loads(line)["uri"])
    dump = tmp_path / "dump.jsonl"
    dump.write_text(exported.out)

    imported = cli("import", "--tenant", "copy", str(dump))
    assert imported.code == 0 and imported.out == f"{len(RICH)} created, 0 updated, 0 unchanged, 0 failed\n"

    origin, copy = resources_of(sql, "origin"), resources_of(sql, "copy")
    assert list(origin) == list(copy)
    for uri in origin:
        assert {k: origin[uri][k] for k in COMPARED} == {k: copy[uri][k] for k in COMPARED}, uri
        assert origin[uri]["blob_data"] == copy[uri]["blob_data"], uri
    rich = json.loads(lines[[json.loads(line)["uri"] for line in lines].index("test://rich")])
    assert rich == {**RICH[0], "tags": ["alpha", "zeta"]}

    again = cli("export", "--tenant", "copy")
    assert again.out == exported.out
    assert cli("import", "--tenant", "copy", str(dump)).out.startswith("0 created, 0 updated, 1106 unchanged")


def test_an_empty_tenant_exports_nothing(cli: Run) -> None:
    cli("tenant", "create", "acme")
    result = cli("export", "--tenant", "acme")
    assert (result.code, result.out) == (0, "")


# -- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["import", "--tenant", "nope", "{jsonl}"],
        ["import", "--tenant", "nope", "{dir}"],
        ["export", "--tenant", "nope"],
        ["token", "create", "--tenant", "nope"],
    ],
)
def test_unknown_tenant_is_one_clean_line_and_exit_1(cli: Run, tmp_path: Path, argv: list[str]) -> None:
    jsonl = write_jsonl(tmp_path / "x.jsonl", [{"uri": "test://x", "name": "x"}])
    argv = [arg.format(jsonl=jsonl, dir=tmp_path) for arg in argv]
    result = cli(*argv)
    assert (result.code, result.out, result.err) == (1, "", "catalog: no tenant 'nope'\n")


def test_an_import_path_that_is_neither_a_directory_nor_jsonl_is_one_clean_line(
    cli: Run, tmp_path: Path
) -> None:
    cli("tenant", "create", "acme")
    other = tmp_path / "notes.txt"
    other.write_text("x")
    assert cli("import", "--tenant", "acme", str(other)).err == (
        f"catalog: {other} is neither a directory nor a .jsonl file\n"
    )
    missing = cli("import", "--tenant", "acme", str(tmp_path / "missing"))
    assert (missing.code, missing.err) == (1, f"catalog: {tmp_path / 'missing'}: no such file or directory\n")


def test_an_unreachable_database_is_one_clean_line(cli: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CATALOG_DATABASE_URL", "postgresql+asyncpg://nobody@127.0.0.1:1/none")
    get_settings.cache_clear()
    result = cli("tenant", "list")
    assert result.code == 1 and len(result.err.splitlines()) == 1
    assert result.err.startswith("catalog: cannot reach the database at 127.0.0.1:1/none")


def test_jsonl_import_from_stdin(
    cli: Run, sql: Callable[..., list[asyncpg.Record]], monkeypatch: pytest.MonkeyPatch
) -> None:
    cli("tenant", "create", "acme")
    data = b'{"uri": "test://s", "name": "s", "text": "from stdin"}\n'
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    result = cli("import", "--tenant", "acme", "-")
    assert result.out == "1 created, 0 updated, 0 unchanged, 0 failed\n"
    assert resources_of(sql, "acme")["test://s"]["text"] == "from stdin"
