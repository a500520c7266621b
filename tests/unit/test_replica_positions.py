"""The table in which the workers of one ``catalog serve`` share the WAL positions they notified
(``catalog.core.replica_positions``), without a database: what one worker publishes another reads,
a pending change sends reads to the primary, a collision is only ever more conservative, a value is
never read torn, a dead worker's row is taken over, and an unusable table is declined with a line.
(As users run it, with two workers and a real standby: ``tests/e2e/test_read_replicas.py``.)"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from catalog.core import replica_positions
from catalog.core.replica_positions import PENDING, SLOTS, SharedPositions, TableHandle, Unavailable, slot_of
from catalog.core.replicas import ReadReplicas
from catalog.db.engine import create_engine


@pytest.fixture
def table() -> Iterator[int]:
    fd = replica_positions.create(2)
    yield fd
    os.close(fd)


@pytest.fixture
def workers(table: int) -> Iterator[tuple[SharedPositions, SharedPositions]]:
    a, b = SharedPositions.attach(table, 0), SharedPositions.attach(table, 1)
    yield a, b
    a.close()
    b.close()


def colliding(tenant_id: int) -> int:
    """Another tenant id hashed to ``tenant_id``'s slot."""
    return next(t for t in range(tenant_id + 1, tenant_id + 100 * SLOTS) if slot_of(t) == slot_of(tenant_id))


def test_what_one_worker_publishes_another_reads(workers: tuple[SharedPositions, SharedPositions]) -> None:
    a, b = workers
    assert b.required(7) == 0
    a.mark_pending(7)
    assert b.required(7) is None  # notified, position not known yet: the primary serves
    assert b.required(8) == 0 or slot_of(8) == slot_of(7)
    a.publish(slot_of(7), 5000, still_pending=False)
    assert b.required(7) == 5000
    a.publish(slot_of(7), 4000, still_pending=False)  # positions only grow
    assert b.required(7) == 5000
    b.publish(slot_of(7), 6000, still_pending=False)
    assert a.required(7) == 6000  # the highest of every row


def test_a_change_of_any_tenant_holds_every_tenant(workers: tuple[SharedPositions, SharedPositions]) -> None:
    a, b = workers
    a.mark_pending(None)  # a listener's gap
    assert (b.required(1), b.required(2), b.required(None)) == (None, None, None)
    a.publish(slot_of(None), 9000, still_pending=False)
    assert (b.required(1), b.required(2), b.required(None)) == (9000, 9000, 9000)


def test_a_collision_only_makes_reads_more_conservative(
    workers: tuple[SharedPositions, SharedPositions],
) -> None:
    a, b = workers
    other = colliding(7)
    a.mark_pending(other)
    assert b.required(7) is None  # waits for the other tenant's change too: the primary serves
    a.publish(slot_of(other), 800, still_pending=True)  # a second change there still pending
    assert b.required(7) is None
    a.publish(slot_of(other), 900, still_pending=False)
    assert b.required(7) == 900


def test_a_slot_left_half_written_reads_as_pending(table: int) -> None:
    a = SharedPositions.attach(table, 0)
    b = SharedPositions.attach(table, 1)
    try:
        a.publish(slot_of(3), 100, still_pending=False)
        at = a._row_start + slot_of(3) * 2
        a._words[at] += 1  # as a worker killed between its two sequence writes leaves it
        assert b.required(3) is None  # never the value under a write in progress
    finally:
        a.close()
        b.close()


def test_a_replacement_worker_takes_over_the_row_and_resolves_what_it_left_pending(table: int) -> None:
    dead = SharedPositions.attach(table, 0)
    dead.publish(slot_of(3), 100, still_pending=False)
    dead.mark_pending(4)
    dead._words[dead._row_start + slot_of(3) * 2] += 1  # killed mid-write
    dead.close()
    replacement = SharedPositions.attach(table, 0)
    reader = SharedPositions.attach(table, 1)
    try:
        assert replacement._words[replacement._row_start + slot_of(3) * 2] % 2 == 0
        assert reader.required(3) == 100
        assert reader.required(4) is None
        inherited = replacement.inherited()
        assert inherited == [slot_of(4)]
        assert replacement.inherited() == []  # handed out once
        for slot in inherited:
            replacement.publish(slot, 700, still_pending=False)
        assert reader.required(4) == 700
    finally:
        replacement.close()
        reader.close()


@pytest.fixture
async def engine() -> AsyncIterator[object]:
    engine = create_engine("postgresql://nobody@127.0.0.1:1/none", pool_size=1)  # never connected
    try:
        yield engine
    finally:
        await engine.dispose()


async def test_a_change_one_worker_notified_holds_the_other_workers_reads(engine: object, table: int) -> None:
    a = ReadReplicas(engine, [], max_lag_ms=1000, shared=SharedPositions.attach(table, 0))  # type: ignore[arg-type]
    b = ReadReplicas(engine, [], max_lag_ms=1000, shared=SharedPositions.attach(table, 1))  # type: ignore[arg-type]
    try:
        a._pending.add(1)
        assert a.shared is not None
        a.shared.mark_pending(1)  # what changed(1) does before the event is published
        assert b.required(1) == 0  # b's own listener has not heard of it
        assert b.required_here(1) is None  # but the host's table has: the primary serves
        a._stamping, a._pending = a._pending, set()
        a._publish(5000)
        a._stamping = set()
        assert b.required_here(1) == 5000  # now any replica that replayed 5000
        assert b.required_here(2) == 0
    finally:
        await a.dispose()
        await b.dispose()


async def test_a_slot_stays_pending_while_a_later_change_there_waits(engine: object, table: int) -> None:
    a = ReadReplicas(engine, [], max_lag_ms=1000, shared=SharedPositions.attach(table, 0))  # type: ignore[arg-type]
    reader = SharedPositions.attach(table, 1)
    try:
        a._stamping = {1}
        a._pending = {colliding(1)}  # notified while 1's position was being asked for
        a._publish(5000)
        assert reader.required(1) is None
    finally:
        await a.dispose()
        reader.close()


def _write_many(handle: TableHandle, count: int) -> None:
    shared = SharedPositions.attach(handle.fd, 0)
    for n in range(1, count + 1):
        # Every write changes both 32-bit halves, so a torn read would be a value never written.
        shared.publish(1, (n << 32) | (0xFFFFFFFF - n), still_pending=False)
    shared.close()


def test_a_position_is_never_read_torn_while_another_process_writes(table: int) -> None:
    """The writer is a spawned process handed the table as the supervisor hands it to a worker."""
    count = 200_000
    writer = multiprocessing.get_context("spawn").Process(
        target=_write_many, args=(TableHandle(table), count)
    )
    reader = SharedPositions.attach(table, 1)
    try:
        writer.start()
        seen: list[int] = []
        while writer.is_alive() or not seen:
            value = reader._read(reader._index(0, 1))
            if value != PENDING:
                seen.append(value)
        writer.join(timeout=60)
        assert writer.exitcode == 0
        final = reader._read(reader._index(0, 1))
        assert final == (count << 32) | (0xFFFFFFFF - count)
        for value in seen:
            n = value >> 32
            assert value == 0 or value == (n << 32) | (0xFFFFFFFF - n), hex(value)
        assert seen == sorted(seen)  # a reader never goes back to an older position
    finally:
        reader.close()


def test_a_table_that_cannot_be_used_is_declined_with_a_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    other = tmp_path / "not-a-table"
    other.write_bytes(b"x" * 64)
    with open(other, "r+b") as file:
        with pytest.raises(Unavailable, match="not a table of positions"):
            SharedPositions.attach(file.fileno(), 0)
        closed = file.fileno()
    with pytest.raises(Unavailable, match="cannot map"):
        SharedPositions.attach(closed, 0)

    def no_memory(name: str, flags: int = 0) -> int:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(os, "memfd_create", no_memory)
    with pytest.raises(Unavailable, match="no memory for it"):
        replica_positions.create(2)
    monkeypatch.setenv(replica_positions.FD_VARIABLE, str(closed))
    monkeypatch.setenv(replica_positions.INDEX_VARIABLE, "0")
    with caplog.at_level(logging.WARNING, logger="catalog.replicas"):
        assert SharedPositions.from_environment() is None
    assert "no table of positions shared with the other workers" in caplog.text
    monkeypatch.delenv(replica_positions.FD_VARIABLE)
    assert SharedPositions.from_environment() is None  # one process: nothing to share


def test_a_row_beyond_the_table_is_declined(table: int) -> None:
    with pytest.raises(Unavailable, match="with a row 2"):
        SharedPositions.attach(table, 2)


def test_the_supervisor_shares_a_table_only_with_replicas_and_falls_back_with_a_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from catalog.serving import Supervisor
    from catalog.settings import get_settings

    monkeypatch.setenv("CATALOG_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CATALOG_READ_DATABASE_URL", raising=False)
    get_settings.cache_clear()
    supervisor = Supervisor(None, None, 2)  # type: ignore[arg-type]  # only its table is asked for
    try:
        assert supervisor._share_positions() is None  # no replicas: nothing to share
        monkeypatch.setenv("CATALOG_READ_DATABASE_URL", "postgresql://replica/db")
        get_settings.cache_clear()
        handle = supervisor._share_positions()
        assert handle is not None
        shared = SharedPositions.attach(handle.fd, 1)
        assert shared.rows == 2
        shared.close()
        os.close(handle.fd)

        def refuse(rows: int) -> int:
            raise Unavailable("no room")

        monkeypatch.setattr(replica_positions, "create", refuse)
        with caplog.at_level(logging.WARNING, logger="catalog.serving"):
            assert supervisor._share_positions() is None
        assert "no table of positions shared by the workers (no room)" in caplog.text
    finally:
        get_settings.cache_clear()
