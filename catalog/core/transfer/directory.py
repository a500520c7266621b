"""Directory sources: a tree of files as resources (the rules are the package's: see
:mod:`catalog.core.transfer`), read beneath the root's descriptor without following links.
"""

from __future__ import annotations

import base64
import errno
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pathspec
from pydantic import ValidationError

from catalog.core.schemas.base import DIRECTORY_MIME_TYPE
from catalog.core.schemas.resources import ResourceIn
from catalog.core.transfer.items import Item, Problem, validation_reason
from catalog.core.transfer.mime import guess_mime_type
from catalog.core.uris import InvalidUri, normalize_uri

# Characters a path segment keeps as they are (RFC 3986 pchar minus the unreserved ones quote() keeps).
_SEGMENT_SAFE = "!$&'()*+,;=:@"


DEFAULT_BASE = "file:///"

# Never imported unless an ignore file re-includes them (``!__pycache__/``): version-control
# metadata (``.git`` is a file in linked worktrees and submodules, hence no trailing slash) and
# Python's bytecode caches.
DEFAULT_IGNORES = (
    ".git",
    ".hg/",
    ".svn/",
    ".bzr/",
    "_darcs/",
    "CVS/",
    ".pijul/",
    ".jj/",
    "__pycache__/",
)


def ignore_rules(lines: Iterable[str] = ()) -> pathspec.GitIgnoreSpec:
    """The default ignores, then ``lines`` in ``.gitignore`` syntax (later lines win, ``!`` re-includes),
    matched against paths relative to the imported directory."""
    return pathspec.GitIgnoreSpec.from_lines([*DEFAULT_IGNORES, *lines])


def import_base(prefix: str) -> str:
    """The URI a directory tree is placed under (``--prefix``), canonical and ending in ``/``."""
    base = normalize_uri(prefix)
    return base if base.endswith("/") else base + "/"


def file_uri(parts: Iterable[str], base: str = DEFAULT_BASE) -> str:
    """The canonical URI of a relative path given as its segments, under ``base`` (see ``import_base``)."""
    return normalize_uri(base + "/".join(quote(part, safe=_SEGMENT_SAFE) for part in parts))


@dataclass(frozen=True)
class _Entry:
    path: Path  # as found under the root (links not resolved): what messages name
    parts: tuple[str, ...]  # relative to the root: what the URI is made of
    real: tuple[str, ...]  # relative to the root with every link resolved at listing: what is opened
    identity: tuple[int, int]  # (st_dev, st_ino) of what the listing found there
    is_dir: bool


# Every file and directory is opened beneath the root's descriptor one name at a time, never
# following a link (O_NOFOLLOW at each step): a name swapped for a link after the listing -- the
# file itself or any directory above it -- fails to open instead of leading out of the tree.
# O_NONBLOCK: a FIFO swapped in for a file must not block the open.
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_SWAPPED = "changed after it was listed (a link or another file in its place), refused"


def _open_beneath(root_fd: int, parts: tuple[str, ...], *, directory: bool = False) -> int:
    """A descriptor of ``parts`` beneath the directory ``root_fd``, no link followed on the way."""
    fd = root_fd
    try:
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            flags = _OPEN_FLAGS | (os.O_DIRECTORY if directory or not last else 0)
            opened = os.open(part, flags, dir_fd=fd)
            if fd != root_fd:
                os.close(fd)
            fd = opened
    except BaseException:
        if fd != root_fd:
            os.close(fd)
        raise
    return fd if parts else os.dup(root_fd)


class DirectorySource:
    """The entries of a directory tree, found up front (so progress has a total), read lazily.

    Holds the root's directory descriptor until :meth:`close` (or the ``with`` block ends): every
    listing and every read goes through it, so what is read is what was listed, inside the tree.
    """

    def __init__(
        self,
        root: Path,
        *,
        max_bytes: int,
        base: str = DEFAULT_BASE,
        ignore: pathspec.GitIgnoreSpec | None = None,
    ) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.base = base
        self.ignore = ignore if ignore is not None else ignore_rules()
        self.ignored = 0  # entries an ignore rule left out (a directory counts once, not its files)
        self._real_root = os.path.realpath(root)
        self.entries: list[_Entry] = []
        self.problems: list[Problem] = []
        # The root as the operator named it (links in PATH itself are the operator's choice).
        self._root_fd = os.open(self._real_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            self._walk(self._root_fd, (), (), ((),))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._root_fd >= 0:
            os.close(self._root_fd)
            self._root_fd = -1

    def __enter__(self) -> DirectorySource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def total(self) -> int:
        return len(self.entries) + len(self.problems)

    def _relative(self, real: str) -> tuple[str, ...] | None:
        """``real`` (a resolved path) as names beneath the root, or None when outside the tree."""
        if real == self._real_root:
            return ()
        if not real.startswith(self._real_root.rstrip(os.sep) + os.sep):
            return None
        return tuple(os.path.relpath(real, self._real_root).split(os.sep))

    def _walk(
        self,
        dir_fd: int,
        parts: tuple[str, ...],
        real: tuple[str, ...],
        ancestors: tuple[tuple[str, ...], ...],
    ) -> None:
        directory = self.root.joinpath(*parts)
        try:
            with os.scandir(dir_fd) as scan:
                found = sorted(scan, key=lambda e: e.name)
        except OSError as exc:
            self.problems.append(Problem(str(directory), f"cannot list: {exc.strerror or exc}"))
            return
        for entry in found:
            path = directory / entry.name
            here = (*parts, entry.name)
            if self._ignored(entry, here):
                self.ignored += 1
                continue
            opened: int | None = None
            try:
                if entry.is_symlink():
                    # Resolved here, once: the read opens the target's own names, never the link.
                    target = self._relative(os.path.realpath(path))
                    if target is None:
                        self.problems.append(
                            Problem(str(path), "symlink to outside the directory, skipped", skipped=True)
                        )
                        continue
                    if target in ancestors:
                        self.problems.append(
                            Problem(str(path), "symlink to one of its own parents, skipped", skipped=True)
                        )
                        continue
                    opened = _open_beneath(self._root_fd, target)
                    found_stat = os.fstat(opened)
                else:
                    target = (*real, entry.name)
                    found_stat = entry.stat(follow_symlinks=False)
            except OSError as exc:  # a broken link, a file that vanished
                self.problems.append(Problem(str(path), f"cannot stat: {exc.strerror or exc}", skipped=True))
                continue
            identity = (found_stat.st_dev, found_stat.st_ino)
            try:
                if stat.S_ISDIR(found_stat.st_mode):
                    self.entries.append(_Entry(path, here, target, identity, True))
                    if opened is None:
                        opened = self._open_listed(dir_fd, entry.name, identity, path)
                        if opened is None:
                            continue
                    self._walk(opened, here, target, (*ancestors, target))
                elif stat.S_ISREG(found_stat.st_mode):
                    self.entries.append(_Entry(path, here, target, identity, False))
                else:
                    self.problems.append(Problem(str(path), "not a regular file, skipped", skipped=True))
            finally:
                if opened is not None:
                    os.close(opened)

    def _open_listed(self, dir_fd: int, name: str, identity: tuple[int, int], path: Path) -> int | None:
        """The sub-directory ``name`` just listed, opened without following a link, or None (a
        problem recorded) when something else now stands there."""
        try:
            opened = _open_beneath(dir_fd, (name,), directory=True)
        except OSError as exc:
            self.problems.append(Problem(str(path), _open_reason(exc)))
            return None
        held = os.fstat(opened)
        if (held.st_dev, held.st_ino) != identity:
            os.close(opened)
            self.problems.append(Problem(str(path), _SWAPPED))
            return None
        return opened

    def _ignored(self, entry: os.DirEntry[str], parts: tuple[str, ...]) -> bool:
        """Whether an ignore rule names the entry; an ignored directory is not walked at all (as in
        git, a file inside it cannot be re-included)."""
        try:
            is_dir = entry.is_dir()  # follows a link: a link to a directory is matched as one
        except OSError:
            is_dir = False
        return self.ignore.match_file("/".join(parts) + ("/" if is_dir else ""))

    def __iter__(self) -> Iterator[Item | Problem]:
        yield from self.problems
        for entry in self.entries:
            yield self._item(entry)

    def _item(self, entry: _Entry) -> Item | Problem:
        location = str(entry.path)
        name = entry.parts[-1]
        try:
            name.encode("utf-8")
            uri = file_uri(entry.parts, self.base)
        except UnicodeEncodeError:
            return Problem(location, "the path is not valid UTF-8")
        except InvalidUri as exc:
            return Problem(location, f"no valid URI for this path: {exc.reason}")
        fields: dict[str, Any] = {"uri": uri, "name": name}
        size = 0
        if entry.is_dir:
            fields["mimeType"] = DIRECTORY_MIME_TYPE
        else:
            try:
                fd = _open_beneath(self._root_fd, entry.real)
            except OSError as exc:
                return Problem(location, _open_reason(exc))
            with open(fd, "rb") as handle:
                held = os.fstat(fd)
                # What was listed, still a regular file: not a FIFO or a device put in its place.
                if not stat.S_ISREG(held.st_mode) or (held.st_dev, held.st_ino) != entry.identity:
                    return Problem(location, _SWAPPED)
                try:
                    # Never ask for max_bytes at once: read() would allocate that much per file.
                    size = held.st_size
                    data = handle.read(min(size, self.max_bytes) + 1) if size <= self.max_bytes else b""
                except OSError as exc:
                    return Problem(location, f"cannot read: {exc.strerror or exc}")
            if size > self.max_bytes or len(data) > self.max_bytes:
                return Problem(location, f"larger than {self.max_bytes} bytes (CATALOG_MAX_BLOB_BYTES)")
            size = len(data)
            text = _as_text(data)
            fields["mimeType"] = guess_mime_type(name, is_text=text is not None)
            if text is not None:
                fields["text"] = text
            else:
                fields["blob"] = base64.b64encode(data).decode("ascii")
        try:
            return Item(location, ResourceIn.model_validate(fields), size=size)
        except ValidationError as exc:
            return Problem(location, validation_reason(exc))


def _open_reason(exc: OSError) -> str:
    # O_NOFOLLOW met a link (ELOOP), or a directory on the way is no longer one (ENOTDIR).
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return _SWAPPED
    return f"cannot read: {exc.strerror or exc}"


def _as_text(data: bytes) -> str | None:
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None
