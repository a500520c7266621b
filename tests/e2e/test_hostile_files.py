"""Hostile files handed to ``catalog import`` and ``catalog restore``.

A directory tree that changes under the import (a file or a directory swapped for a symlink between
the listing and the read) must not lead the import out of the tree; a backup or a JSONL file built
to hurt (lines without end, nesting, huge numbers, forged lines, broken gzip) gets a one-line error
naming the line, exit status 1, and changes nothing.
"""

from __future__ import annotations

import asyncio
import base64
import errno
import gzip
import io
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from catalog.bootstrap import open_catalog
from catalog.core.backup.format import BadBackup
from catalog.core.backup.restore import restore_backup
from catalog.core.jsonlines import max_line_bytes
from catalog.core.principal import Principal
from catalog.core.transfer.directory import DirectorySource
from catalog.core.transfer.items import Item, Problem
from catalog.core.transfer.jsonl import jsonl_items
from catalog.settings import get_settings
from tests.conftest import Run
from tests.processes import catalog_env, run_catalog

pytestmark = pytest.mark.process

Sql = Callable[..., list[asyncpg.Record]]
SECRET = "outside the tree: never imported"


def _texts(found: list[Item | Problem]) -> dict[str, str | None]:
    return {item.body.uri: item.body.text for item in found if isinstance(item, Item)}


# -- a directory tree that changes between listing and reading -----------------------------------


@pytest.fixture
def swappable(tmp_path: Path) -> tuple[Path, Path]:
    """A tree (``root``) and, beside it, a file and a directory that must never be imported."""
    root = tmp_path / "tree"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("inside a")
    (root / "keep.txt").write_text("inside keep")
    (root / "sub" / "inner.txt").write_text("inside inner")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    (outside / "inner.txt").write_text(SECRET)
    return root, outside


def test_a_file_swapped_for_a_symlink_after_the_listing_is_refused(swappable: tuple[Path, Path]) -> None:
    root, outside = swappable
    source = DirectorySource(root, max_bytes=1 << 20)
    (root / "a.txt").unlink()  # after the walk, before the read
    (root / "a.txt").symlink_to(outside / "secret.txt")
    with source:
        found = list(source)
    assert SECRET not in json.dumps(_texts(found))
    refused = [str(p) for p in found if isinstance(p, Problem)]
    assert refused == [
        f"{root / 'a.txt'}: changed after it was listed (a link or another file in its place), refused"
    ]
    assert not any(p.skipped for p in found if isinstance(p, Problem))  # failed: the import exits 1
    assert _texts(found) == {
        "file:///keep.txt": "inside keep",
        "file:///sub": None,
        "file:///sub/inner.txt": "inside inner",
    }


def test_a_directory_swapped_for_a_symlink_after_the_listing_is_refused(
    swappable: tuple[Path, Path],
) -> None:
    root, outside = swappable
    source = DirectorySource(root, max_bytes=1 << 20)
    (root / "sub").rename(root.parent / "moved-away")
    (root / "sub").symlink_to(outside, target_is_directory=True)  # outside/inner.txt: same name
    with source:
        found = list(source)
    assert SECRET not in json.dumps(_texts(found))
    refused = [str(p) for p in found if isinstance(p, Problem)]
    assert refused == [
        f"{root / 'sub' / 'inner.txt'}: changed after it was listed (a link or another file in its place),"
        " refused"
    ]


def test_a_file_replaced_by_another_file_or_a_fifo_after_the_listing_is_refused(
    swappable: tuple[Path, Path],
) -> None:
    """Not a link, yet not what was listed: the identity (device, inode) of the open file decides,
    and a FIFO put in place neither blocks the read nor is read."""
    root, _ = swappable
    source = DirectorySource(root, max_bytes=1 << 20)
    (root / "a.txt").unlink()
    os.mkfifo(root / "a.txt")
    (root / "keep.txt").rename(root / "old")
    (root / "keep.txt").write_text(SECRET)
    with source:
        found = list(source)
    assert SECRET not in json.dumps(_texts(found))
    assert sorted(str(p).split(": ")[0] for p in found if isinstance(p, Problem)) == [
        str(root / "a.txt"),
        str(root / "keep.txt"),
    ]


def test_a_symlink_inside_the_tree_is_read_through_its_target_and_one_out_is_skipped(
    swappable: tuple[Path, Path], tmp_path: Path, database_url: str
) -> None:
    """As the operator runs it (a real process): a link to a file of the tree is imported with the
    target's content, a link out of the tree is skipped with one line naming it, exit status 0."""
    root, outside = swappable
    (root / "link-in.txt").symlink_to(root / "sub" / "inner.txt")
    (root / "sub-link").symlink_to(root / "sub", target_is_directory=True)
    (root / "link-out.txt").symlink_to(outside / "secret.txt")
    (root / "dir-out").symlink_to(outside, target_is_directory=True)
    env = catalog_env(CATALOG_DATABASE_URL=database_url, CATALOG_HOME=str(tmp_path / "home"))
    assert run_catalog("tenant", "create", "acme", env=env).returncode == 0
    result = run_catalog("import", "--tenant", "acme", str(root), "--no-progress", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "7 created, 0 updated, 0 unchanged, 0 failed, 2 skipped\n"
    assert result.stderr.splitlines() == [
        f"{root / 'dir-out'}: symlink to outside the directory, skipped",
        f"{root / 'link-out.txt'}: symlink to outside the directory, skipped",
    ]
    exported = run_catalog("export", "--tenant", "acme", env=env)
    texts = {line["uri"]: line.get("text") for line in map(json.loads, exported.stdout.splitlines())}
    assert texts == {
        "file:///a.txt": "inside a",
        "file:///keep.txt": "inside keep",
        "file:///link-in.txt": "inside inner",
        "file:///sub": None,
        "file:///sub/inner.txt": "inside inner",
        "file:///sub-link": None,
        "file:///sub-link/inner.txt": "inside inner",
    }


def test_a_directory_that_cannot_be_opened_is_one_line_and_nothing_is_imported(
    cli: Run, sql: Sql, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The root is opened once, up front (every read goes through it): when that fails (here a
    refused permission, which root -- running these tests -- never meets), one line, status 1."""
    root = tmp_path / "locked"
    root.mkdir()
    (root / "a.txt").write_text("a")
    real_open = os.open

    def refusing(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if path == os.path.realpath(root):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    cli("tenant", "create", "acme")
    monkeypatch.setattr(os, "open", refusing)
    result = cli("import", "--tenant", "acme", str(root))
    monkeypatch.undo()
    assert (result.code, result.out, result.err) == (1, "", f"catalog: {root}: Permission denied\n")
    assert sql("SELECT uri FROM resources") == []


# -- hostile backups and JSONL files --------------------------------------------------------------

MAX_BLOB = 4096  # CATALOG_MAX_BLOB_BYTES of these tests: a line may hold 6 x 4096 + 1 MiB bytes
LINE_LIMIT = max_line_bytes(MAX_BLOB)


def _env(database_url: str, tmp_path: Path) -> dict[str, str]:
    return catalog_env(
        CATALOG_DATABASE_URL=database_url,
        CATALOG_HOME=str(tmp_path / "home"),
        CATALOG_MAX_BLOB_BYTES=str(MAX_BLOB),
    )


def _one_line_failure(result: subprocess.CompletedProcess[str], message: str | tuple[str, ...]) -> None:
    """Exit status 1, nothing on stdout, exactly one ``catalog:`` line on stderr holding ``message``
    (or one of them)."""
    assert "Traceback" not in result.stderr, result.stderr
    assert (result.returncode, result.stdout) == (1, ""), result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    messages = (message,) if isinstance(message, str) else message
    assert any(one in result.stderr for one in messages), result.stderr


@pytest.fixture
def backup_lines(cli: Run, tmp_path: Path) -> list[bytes]:
    """The uncompressed lines of a real backup of a small tenant (a text, a blob, a token)."""
    cli("tenant", "create", "origin")
    lines = [
        {"uri": "test://a", "name": "a", "text": "x"},
        {
            "uri": "test://bin",
            "name": "b",
            "mimeType": "image/png",
            "blob": base64.b64encode(b"\x89PNG").decode(),
        },
    ]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert cli("import", "--tenant", "origin", str(source)).code == 0
    assert cli("token", "create", "--tenant", "origin", "--scope", "read").code == 0
    path = tmp_path / "origin.backup"
    assert cli("backup", "--tenant", "origin", str(path)).code == 0
    return gzip.decompress(path.read_bytes()).splitlines(keepends=True)


def _index(lines: list[bytes], kind: str) -> int:
    return next(i for i, line in enumerate(lines) if json.loads(line)["kind"] == kind)


def _changed(lines: list[bytes], kind: str, change: Callable[[dict[str, Any]], None]) -> list[bytes]:
    """``lines`` with the first line of ``kind`` changed in place by ``change``."""
    index = _index(lines, kind)
    line = json.loads(lines[index])
    change(line)
    return [*lines[:index], json.dumps(line).encode() + b"\n", *lines[index + 1 :]]


def _inserted(lines: list[bytes], kind: str, raw: bytes) -> list[bytes]:
    index = _index(lines, kind)
    return [*lines[:index], raw, *lines[index:]]


def _forged(kind: str, change: Callable[[dict[str, Any]], None]) -> Callable[[list[bytes]], list[bytes]]:
    return lambda lines: _changed(lines, kind, change)


def _set(**values: Any) -> Callable[[dict[str, Any]], None]:
    def change(line: dict[str, Any]) -> None:
        for path, value in values.items():
            *parents, last = path.split("__")
            target = line
            for parent in parents:
                target = target[parent]
            target[last] = value

    return change


DEEP = b'{"kind": "template", "template": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"
HUGE_INT = b'{"kind": "template", "id": ' + b"9" * 5000 + b"}\n"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda lines: _inserted(lines, "resource", DEEP), "nested deeper than 64 levels"),
        (lambda lines: _inserted(lines, "resource", HUGE_INT), "a number is too large"),
        (_forged("token", _set(id=2**70)), "invalid token: /id: Input should be less than or equal to"),
        (_forged("resource", _set(version=2**40)), "invalid resource: /version: Input should be less than"),
        (
            _forged("blob", _set(mimeType="text/plain\r\nX-Injected: 1")),
            "invalid blob: /mimeType: not a media type",
        ),
        (
            _forged("blob", _set(mimeType="text/plain\r\n;charset=x")),
            "invalid blob: /mimeType: not a media type",
        ),
        (_forged("blob", _set(size=MAX_BLOB + 1)), "over the limit of CATALOG_MAX_BLOB_BYTES"),
        (
            _forged("token", _set(token__scopes=["read write"])),
            "invalid token: /token/scopes/0: String should match",
        ),
        (
            _forged("token", _set(token__name="n" * 5000)),
            "invalid token: /token/name: String should have at most",
        ),
        (_forged("resource", _set(resource__text="y" * (MAX_BLOB + 1))), "the text is larger than the limit"),
        (_forged("version", _set(text="y" * (MAX_BLOB + 1))), "the text is larger than the limit"),
        (
            _forged("version", _set(snapshot__uri="test://elsewhere")),
            "snapshot/uri differs from the version's uri",
        ),
        (
            _forged("version", _set(snapshot__name="")),
            "invalid version: snapshot: /name: String should have at least",
        ),
        (_forged("catalog-backup", _set(createdAt=[1] * 10)), "invalid catalog-backup: /createdAt"),
        (
            lambda lines: _inserted(lines, "resource", b'{"kind": "resource", "text": "caf\xe9"}\n'),
            "not UTF-8",
        ),
    ],
    ids=[
        "deep-nesting",
        "huge-integer",
        "id-out-of-range",
        "version-out-of-range",
        "mime-type-with-line-break",
        "mime-type-parameter-after-a-line-break",
        "blob-over-the-limit",
        "token-scope",
        "token-name",
        "resource-text-over-the-limit",
        "version-text-over-the-limit",
        "version-snapshot-of-another-uri",
        "version-snapshot-invalid",
        "header-time",
        "not-utf-8",
    ],
)
def test_a_hostile_backup_line_is_refused_by_number_and_nothing_is_restored(
    backup_lines: list[bytes],
    tmp_path: Path,
    database_url: str,
    sql: Sql,
    change: Callable[[list[bytes]], list[bytes]],
    message: str,
) -> None:
    """Every line is checked by the admin API's own rules (and the column's range) before anything
    is written: one line naming the file and line number, exit status 1, no tenant left behind."""
    lines = change(backup_lines)
    number = next(i for i, (a, b) in enumerate(zip(lines, backup_lines, strict=False), start=1) if a != b)
    path = tmp_path / "hostile.backup"
    path.write_bytes(gzip.compress(b"".join(lines)))
    result = run_catalog(
        "restore", "--tenant", "copy", str(path), "--no-progress", env=_env(database_url, tmp_path)
    )
    _one_line_failure(result, message)
    assert result.stderr.startswith(f"catalog: {path}:{number}: "), result.stderr
    assert [r["slug"] for r in sql("SELECT slug FROM tenants")] == ["origin"]


def _truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _corrupted(data: bytes) -> bytes:
    middle = len(data) // 2
    return data[:middle] + bytes(b ^ 0x55 for b in data[middle : middle + 64]) + data[middle + 64 :]


# Flipped deflate bytes usually break the stream ("damaged"), but may also inflate to other bytes
# that reach the JSON reader before gzip's checksum at the end does: a bad line, as refused.
@pytest.mark.parametrize(
    ("damage", "message"),
    [(_truncated, "the file is damaged"), (_corrupted, ("the file is damaged", "not a JSON line"))],
)
def test_a_truncated_or_corrupt_gzip_backup_is_refused_in_one_line(
    backup_lines: list[bytes],
    tmp_path: Path,
    database_url: str,
    sql: Sql,
    damage: Callable[[bytes], bytes],
    message: str | tuple[str, ...],
) -> None:
    path = tmp_path / "damaged.backup"
    path.write_bytes(damage(gzip.compress(b"".join(backup_lines))))
    result = run_catalog(
        "restore", "--tenant", "copy", str(path), "--no-progress", env=_env(database_url, tmp_path)
    )
    _one_line_failure(result, message)
    assert [r["slug"] for r in sql("SELECT slug FROM tenants")] == ["origin"]


def test_a_gzip_bomb_line_without_end_is_refused_in_one_line(
    backup_lines: list[bytes], tmp_path: Path, database_url: str, sql: Sql
) -> None:
    """64 MiB of one line without a newline, in a few hundred KiB of gzip: refused at the line limit."""
    compressor = gzip.GzipFile(path := tmp_path / "bomb.backup", "wb")
    with compressor:
        compressor.write(backup_lines[0])
        compressor.write(b'{"kind": "blob", "sha256": "')
        zeros = b"0" * (1 << 20)
        for _ in range(64):
            compressor.write(zeros)
    assert path.stat().st_size < 1 << 20
    result = run_catalog(
        "restore", "--tenant", "copy", str(path), "--no-progress", env=_env(database_url, tmp_path)
    )
    _one_line_failure(result, f"{path}:2: a line longer than {LINE_LIMIT} bytes")
    assert [r["slug"] for r in sql("SELECT slug FROM tenants")] == ["origin"]


class _Counting(io.RawIOBase):
    """A stream of ``size`` bytes (``head``, then ``fill`` without a newline) that counts what is read."""

    def __init__(self, head: bytes, size: int, fill: bytes = b"x") -> None:
        self.head = head
        self.size = size
        self.fill = fill
        self.handed = 0  # bytes handed to the reader so far

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.handed >= self.size:
            return 0
        count = min(len(buffer), self.size - self.handed)
        data = (self.head[self.handed :] + self.fill * count)[:count]
        buffer[:count] = data
        self.handed += count
        return count


def test_the_restore_reader_refuses_a_long_line_without_reading_past_the_limit(
    backup_lines: list[bytes], cli: Run, sql: Sql
) -> None:
    """The memory a line costs is bounded by construction: a line of 20 x the limit is refused after
    at most limit + 1 of its bytes were read (plus one read buffer), and no tenant is left."""
    header = backup_lines[0]
    stream = io.BufferedReader(_Counting(header, len(header) + 20 * LINE_LIMIT), buffer_size=8192)

    async def restore() -> str:
        settings = get_settings().model_copy(update={"max_blob_bytes": MAX_BLOB})
        async with open_catalog(settings, pool_size=1) as catalog:
            with pytest.raises(BadBackup) as refused:
                await restore_backup(catalog, Principal.system("test"), "copy", stream, name="bomb")
            return refused.value.detail

    assert (
        asyncio.run(restore())
        == f"bomb:2: a line longer than {LINE_LIMIT} bytes (the limit follows CATALOG_MAX_BLOB_BYTES)"
    )
    assert stream.raw.handed <= len(header) + LINE_LIMIT + 1 + 8192
    assert [r["slug"] for r in sql("SELECT slug FROM tenants")] == ["origin"]


def test_the_jsonl_reader_holds_no_more_than_the_limit_of_a_long_line() -> None:
    """A line of 20 x the limit becomes a Problem naming its number; no single read returns more than
    limit + 1 bytes, and the line after it is still read."""
    reads: list[int] = []

    class Recording(io.BytesIO):
        def readline(self, size: int | None = -1) -> bytes:
            line = super().readline(size)
            reads.append(len(line))
            return line

    stream = Recording(
        b'{"uri": "test://a", "name": "a"}\n'
        + b"x" * (20 * LINE_LIMIT)
        + b'\n{"uri": "test://b", "name": "b"}\n'
    )
    found = list(jsonl_items(stream, "in.jsonl", MAX_BLOB))
    assert [str(p) for p in found if isinstance(p, Problem)] == [
        f"in.jsonl:2: a line longer than {LINE_LIMIT} bytes (the limit follows CATALOG_MAX_BLOB_BYTES)"
    ]
    assert [item.body.uri for item in found if isinstance(item, Item)] == ["test://a", "test://b"]
    assert max(reads) <= LINE_LIMIT + 1


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"[" * 100_000 + b"]" * 100_000, ":2: nested deeper than 64 levels"),
        (
            b'{"uri": "test://n", "name": "n", "_meta": {"v": ' + b"7" * 5000 + b"}}",
            ":2: a number is too large",
        ),
        (
            b'{"uri": "test://n", "name": "' + b"x" * (LINE_LIMIT + 10) + b'"}',
            f":2: a line longer than {LINE_LIMIT} bytes",
        ),
        (
            b'{"uri": "test://n", "name": "n", "mimeType": "text/plain\\r\\n;charset=x", "text": "x"}',
            ":2: /mimeType: not a media type",
        ),
    ],
    ids=["deep-nesting", "huge-integer", "line-too-long", "mime-type-with-a-line-break"],
)
@pytest.mark.parametrize("batched", [False, True], ids=["one-transaction", "batched"])
def test_a_hostile_jsonl_line_is_refused_by_number_without_a_traceback(
    tmp_path: Path, database_url: str, sql: Sql, raw: bytes, message: str, batched: bool
) -> None:
    env = _env(database_url, tmp_path)
    assert run_catalog("tenant", "create", "acme", env=env).returncode == 0
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"uri": "test://a", "name": "a", "text": "x"}\n' + raw + b"\n")
    extra = ["--batch-size", "10"] if batched else []
    result = run_catalog("import", "--tenant", "acme", str(path), "--no-progress", *extra, env=env)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines()[0].startswith(f"{path}{message}"), result.stderr
    written = [r["uri"] for r in sql("SELECT uri FROM resources")]
    assert written == (["test://a"] if batched else [])  # all or nothing, unless in batches
