"""The WAL positions every worker of one ``catalog serve`` has notified, shared between them.

:class:`catalog.core.replicas.ReadReplicas` keeps a read from a replica older than a notification
its process delivered. With ``serve --workers N`` a client told of a change by worker A may read
through worker B, whose own LISTEN connection has not necessarily received that NOTIFY yet. This
table closes that gap on one host: every worker publishes what it has notified, and every worker
reads what all of them have published before it chooses a replica.

**Layout.** One anonymous file in memory (``memfd_create``; elsewhere a temporary file unlinked at
once), created by the supervisor before it starts the workers (:func:`create`) and handed to each
as an open descriptor (:class:`TableHandle`, passed like the listening socket); each worker maps it
(:meth:`SharedPositions.attach`). Having no name, it never outlives the processes holding it, however
they end. It holds a header and one row per worker (its index in :data:`INDEX_VARIABLE`; a
replacement takes the index of the worker it replaces). A row is
:data:`SLOTS` + 1 slots: slot 0 for a change of any tenant (a listener's gap), the others a fixed
hash of tenant ids. A slot is two aligned 64-bit words: a sequence and a value. The value is the WAL
position a replica must have replayed, with :data:`PENDING` set while the position of a change
notified there is not known yet (the reads it covers run on the primary).

**Concurrency.** Each row has one writer, its worker (one event loop: one thread writes), and any
number of readers. A value is written under a per-slot sequence lock: the sequence is made odd, the
value written, the sequence made even again; a reader retries while the sequence is odd or changed
under it, so a torn 64-bit value is never used. After :data:`READ_TRIES` failed tries the slot
counts as pending (the primary serves), never as a stale position. The sequence lock relies on the
processor keeping stores and loads in program order (x86 and x86-64: total store order; CPython
issues each access from its own C call); elsewhere :func:`attach` declines and the per-process
rule applies.

**What a collision costs.** Tenants hashed to one slot share its position (the highest of them) and
its pending mark: a read of one may wait for another's change (more reads on the primary), never
the reverse. A row left by a worker that died keeps what it published (positions only grow); a
pending mark it left is resolved by its replacement's first position query, until which those
tenants read on the primary.
"""

from __future__ import annotations

import logging
import mmap
import os
import platform
import struct
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger("catalog.replicas")

FD_VARIABLE = "CATALOG_SHARED_POSITIONS_FD"  # set in each worker: its descriptor of the table
INDEX_VARIABLE = "CATALOG_WORKER_INDEX"  # set in each worker: its row
SLOTS = 4096  # tenant slots per row (slot 0, the any-tenant slot, comes on top)
PENDING = 1 << 63  # the value's top bit: a notified change's position is being asked for
READ_TRIES = 64
_MAGIC = b"CATPOS01"
_HEADER = struct.Struct("<8sII")  # magic, rows, slots per row (tenant slots + 1)
_HEADER_WORDS = 2  # the header padded to 16 bytes: every slot stays 8-byte aligned
_WORDS_PER_SLOT = 2  # sequence, value
_ROW_WORDS = (SLOTS + 1) * _WORDS_PER_SLOT
_ORDERED_MACHINES = frozenset({"x86_64", "amd64", "i386", "i486", "i586", "i686", "x86"})
_GOLDEN = 0x9E3779B97F4A7C15  # Fibonacci hashing: neighbouring tenant ids land far apart


class Unavailable(Exception):
    """The shared table cannot be created or used here (the reason is the message)."""


def slot_of(tenant_id: int | None) -> int:
    """The slot of ``tenant_id`` in every row (0: a change of any tenant)."""
    if tenant_id is None:
        return 0
    return 1 + ((tenant_id * _GOLDEN) & 0xFFFFFFFFFFFFFFFF) % SLOTS


def _size(rows: int) -> int:
    return 8 * (_HEADER_WORDS + rows * (SLOTS + 1) * _WORDS_PER_SLOT)


def create(rows: int) -> int:
    """An open descriptor of a new zeroed table of ``rows`` rows; raises :class:`Unavailable` with
    the reason. The caller closes it when its workers no longer need it."""
    if platform.machine().lower() not in _ORDERED_MACHINES:
        raise Unavailable(f"its sequence lock needs x86 memory ordering, and this is {platform.machine()}")
    handle = -1
    try:
        if hasattr(os, "memfd_create"):
            handle = os.memfd_create("catalog-positions", os.MFD_CLOEXEC)
        else:
            handle, name = tempfile.mkstemp(prefix="catalog-positions-")
            os.unlink(name)
        os.ftruncate(handle, _size(rows))
        os.pwrite(handle, _HEADER.pack(_MAGIC, rows, SLOTS + 1), 0)
    except OSError as exc:
        if handle >= 0:
            os.close(handle)
        raise Unavailable(f"no memory for it ({exc})") from None
    return handle


class TableHandle:
    """The table's descriptor, as a spawned worker receives it: pickled for the child like a socket
    (the descriptor is duplicated into the new process as it starts)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple[Callable[[Any], TableHandle], tuple[Any]]:
        from multiprocessing.reduction import DupFd

        return _rebuild_handle, (DupFd(self.fd),)


def _rebuild_handle(duplicate: Any) -> TableHandle:
    return TableHandle(duplicate.detach())


@dataclass(eq=False)
class SharedPositions:
    """A worker's view of the table: its own row to write, every row to read."""

    row: int
    rows: int
    _map: mmap.mmap
    _bytes: memoryview
    _words: memoryview
    _row_start: int = 0
    _inherited: list[int] = field(default_factory=list)  # pending slots a dead predecessor left

    @classmethod
    def attach(cls, fd: int, row: int) -> SharedPositions:
        """Map the table open as ``fd`` and take row ``row``; raises :class:`Unavailable`."""
        if platform.machine().lower() not in _ORDERED_MACHINES:
            raise Unavailable(
                f"its sequence lock needs x86 memory ordering, and this is {platform.machine()}"
            )
        try:
            mapped = mmap.mmap(fd, 0)
        except (OSError, ValueError) as exc:
            raise Unavailable(f"cannot map descriptor {fd} ({exc})") from None
        if len(mapped) < _HEADER.size:
            mapped.close()
            raise Unavailable(f"descriptor {fd} is not a table of positions")
        magic, rows, per_row = _HEADER.unpack_from(mapped, 0)
        if magic != _MAGIC or per_row != SLOTS + 1 or len(mapped) != _size(rows) or not 0 <= row < rows:
            mapped.close()
            raise Unavailable(f"descriptor {fd} is not a table of positions with a row {row}")
        whole = memoryview(mapped)
        shared = cls(row, rows, mapped, whole, whole.cast("Q"))
        shared._row_start = shared._index(row, 0)
        shared._adopt_row()
        return shared

    @classmethod
    def from_environment(cls) -> SharedPositions | None:
        """The table the supervisor handed this worker, or None: none (one process, where the
        per-process rule is exact), or unusable (a log line says why)."""
        fd = os.environ.get(FD_VARIABLE)
        if not fd:
            return None
        try:
            return cls.attach(int(fd), int(os.environ.get(INDEX_VARIABLE, "")))
        except (Unavailable, ValueError) as exc:
            logger.warning(
                "read replicas: no table of positions shared with the other workers (%s); this"
                " worker keeps reads behind the notifications it delivered itself only",
                exc,
            )
            return None

    def close(self) -> None:
        self._words.release()
        self._bytes.release()
        self._map.close()

    def _index(self, row: int, slot: int) -> int:
        return _HEADER_WORDS + (row * (SLOTS + 1) + slot) * _WORDS_PER_SLOT

    def _adopt_row(self) -> None:
        """Take over this row from a worker that died: a write it left half done is finished (its
        sequence made even) and its pending marks are kept, to be resolved by :meth:`inherited`'s
        first position."""
        words = self._words
        for slot in range(SLOTS + 1):
            at = self._row_start + slot * _WORDS_PER_SLOT
            if words[at] & 1:
                words[at] += 1
            if words[at + 1] & PENDING:
                self._inherited.append(slot)

    # -- the writer: this worker, on its own row ------------------------------------------------

    def _write(self, slot: int, value: int) -> None:
        words = self._words
        at = self._row_start + slot * _WORDS_PER_SLOT
        sequence = words[at]
        words[at] = sequence + 1  # odd: a write in progress
        words[at + 1] = value
        words[at] = sequence + 2

    def _own(self, slot: int) -> int:
        return self._words[self._row_start + slot * _WORDS_PER_SLOT + 1]

    def mark_pending(self, tenant_id: int | None) -> None:
        """A change of ``tenant_id`` (None: any) was notified; its position is not known yet."""
        slot = slot_of(tenant_id)
        value = self._own(slot)
        if not value & PENDING:
            self._write(slot, value | PENDING)

    def publish(self, slot: int, position: int, *, still_pending: bool) -> None:
        """Slot ``slot``'s changes are at or before ``position``; ``still_pending`` when another
        change notified there is still waiting for its position."""
        value = self._own(slot)
        known = max(value & ~PENDING, position)
        self._write(slot, known | (PENDING if still_pending else 0))

    def inherited(self) -> list[int]:
        """The pending slots a dead predecessor left in this row (handed out once)."""
        slots, self._inherited = self._inherited, []
        return slots

    # -- the readers: every worker, on every row ------------------------------------------------

    def _read(self, at: int) -> int:
        words = self._words
        for _ in range(READ_TRIES):
            before = words[at]
            if before & 1:
                continue
            value = words[at + 1]
            if words[at] == before:
                return value
        return PENDING  # kept busy or left half written: unknown, so the primary serves

    def required(self, tenant_id: int | None) -> int | None:
        """The highest position any worker notified for ``tenant_id``'s slot and for any tenant;
        None while one of them is pending. On every read: the sequence lock's uncontended case is
        inlined (sequence, value, sequence again), :meth:`_read` retries the rest."""
        words = self._words
        offsets = (
            (_HEADER_WORDS,) if tenant_id is None else (_HEADER_WORDS, self._index(0, slot_of(tenant_id)))
        )
        highest = 0
        for row_start in range(0, self.rows * _ROW_WORDS, _ROW_WORDS):
            for offset in offsets:
                at = row_start + offset
                before = words[at]
                value = words[at + 1]
                if before & 1 or words[at] != before:
                    value = self._read(at)
                if value & PENDING:
                    return None
                if value > highest:
                    highest = value
        return highest
