"""Hostile files handed to ``catalog import`` and ``catalog restore``.

A directory tree that changes under the import (a file or a directory swapped for a symlink between
the listing and the read) must not lead the import out of the tree; a backup or a JSONL file built
to hurt (lines without end, nesting, huge numbers, forged lines, broken gzip) gets a one-line error
naming the line, exit status 1, and changes nothing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import asyncpg
import pytest

from catalog.core.transfer import DirectorySource, Item, Problem

from .processes import catalog_env, run_catalog

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
