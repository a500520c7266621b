"""Writing an import: items in batches through the single-write rules (``upsert_many``), or a JSONL
file set-based in one transaction (:mod:`catalog.core.resources.bulk`).
"""

from __future__ import annotations

import asyncio
import collections
import io
import multiprocessing
import time
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import aclosing
from typing import IO, TypeVar

from sqlalchemy import text
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError

from catalog.core.catalog import Catalog
from catalog.core.errors import CatalogError
from catalog.core.jsonlines import max_line_bytes
from catalog.core.principal import Principal
from catalog.core.resources import upsert_many
from catalog.core.resources.bulk import (
    BulkResult,
    Known,
    Prepared,
    StartOver,
    known_lines,
    line_fingerprint,
    prepare,
    upsert_all,
)
from catalog.core.tenants import Tenant
from catalog.core.transfer.items import ImportReport, Item, Problem
from catalog.core.transfer.jsonl import jsonl_chunks, jsonl_item
from catalog.db.models import blobs, resources
from catalog.observability.metrics import record_import

_T = TypeVar("_T")

BATCH_SIZE = 500
IMPORT_WRITERS = 2  # batches written at once (each on a connection of its own)
FIRST_ANALYZE = 1000  # rows created before the first ANALYZE; then each time the count doubles
BATCH_BYTES = 64 * 1024 * 1024  # a batch is also cut when its content reaches this size


def _batches(
    items: Iterable[Item | Problem], batch_size: int, batch_bytes: int
) -> Iterator[list[Item | Problem]]:
    batch: list[Item | Problem] = []
    count = size = 0
    for item in items:
        batch.append(item)
        if isinstance(item, Item):
            count += 1
            size += item.size
        if count >= batch_size or size >= batch_bytes:
            yield batch
            batch, count, size = [], 0, 0
    if batch:
        yield batch


async def _read_ahead(batches: Iterator[_T]) -> AsyncGenerator[_T, None]:
    """The batches, each read (files, JSON, validation) in a thread while the one before it is
    written: the database and the parsing work at the same time instead of taking turns."""
    upcoming = asyncio.ensure_future(asyncio.to_thread(next, batches, None))
    try:
        while (batch := await upcoming) is not None:
            upcoming = asyncio.ensure_future(asyncio.to_thread(next, batches, None))
            yield batch
    finally:
        if not upcoming.done():
            await asyncio.wait([upcoming])  # the generator must not be left running in its thread
        elif not upcoming.cancelled():
            upcoming.exception()  # retrieved: a failure after the last batch we used is not ours


# Errors that belong to one body (bad content, a blob too large, data PostgreSQL refuses): the
# batch is retried one body at a time so the others still go in. Anything else (the database is
# gone) ends the import.
_ITEM_ERRORS = (CatalogError, DataError, IntegrityError)


def _error_reason(exc: Exception) -> str:
    if isinstance(exc, CatalogError):
        return exc.one_line()
    orig = getattr(exc, "orig", None) or exc
    return str(orig).strip().splitlines()[0] if str(orig).strip() else type(exc).__name__


async def analyze_tables(catalog: Catalog) -> None:
    """Refresh the planner's statistics of the tables an import fills (PostgreSQL's advice after a
    bulk load). Without it, plans cached while a fresh database was empty -- the foreign-key checks
    on ``resources`` among them -- keep scanning a whole tenant per row, and an import into a new
    database slows quadratically wherever autovacuum is off or not yet round.

    Runs as the login role (the tables' owner, normally), not the row-security role: ``SET LOCAL
    ROLE NONE`` undoes, for this one transaction, the ``catalog_app`` role a superuser login runs as
    (``catalog.bootstrap``), and changes nothing for any other login. A role that may not analyze
    the tables gets a warning from PostgreSQL and nothing changes.
    """
    try:
        async with catalog.engine.begin() as conn:
            await conn.execute(text("SET LOCAL ROLE NONE"))
            await conn.execute(text(f"ANALYZE {resources.name}, {blobs.name}"))
    except DBAPIError:
        pass


async def import_items(
    catalog: Catalog,
    principal: Principal,
    tenant: Tenant,
    items: Iterable[Item | Problem],
    *,
    batch_size: int = BATCH_SIZE,
    batch_bytes: int = BATCH_BYTES,
    analyze: bool = True,
    writers: int = IMPORT_WRITERS,
    on_problem: Callable[[Problem], None] = lambda problem: None,
    on_progress: Callable[[int], object] = lambda weight: None,  # its return is ignored
) -> ImportReport:
    """Upsert ``items`` in batches of ``batch_size`` (one transaction each); report what happened.

    Up to ``writers`` batches are written at once, on connections of their own, so that the
    database writes one batch while this process prepares the next. Batches that share a URI are
    never in flight together (the later one waits), so every URI's bodies still apply in input
    order; results, problems and progress are reported in input order too.
    """
    report = ImportReport()
    started = time.perf_counter()
    analyze_at = FIRST_ANALYZE
    in_flight: collections.deque[tuple[asyncio.Task[ImportReport], set[str], list[Item | Problem]]] = (
        collections.deque()
    )

    def problem(found: Problem) -> None:
        (report.skipped if found.skipped else report.failed).append(found)
        on_problem(found)

    async def settle_oldest() -> None:
        nonlocal analyze_at
        task, _, batch = in_flight.popleft()
        written = await task
        for found in batch:
            if isinstance(found, Problem):
                problem(found)
        for found in written.failed:
            problem(found)
        report.created += written.created
        report.updated += written.updated
        report.unchanged += written.unchanged
        if analyze and report.created >= analyze_at:
            await analyze_tables(catalog)
            analyze_at = report.created * 2
        on_progress(sum(item.weight for item in batch))

    try:
        async for batch in _read_ahead(_batches(items, batch_size, batch_bytes)):
            good = [item for item in batch if isinstance(item, Item)]
            uris = {item.body.uri for item in good}
            while in_flight and (
                len(in_flight) >= writers or any(not uris.isdisjoint(other) for _, other, _ in in_flight)
            ):
                await settle_oldest()
            task = asyncio.create_task(_write_batch(catalog, principal, tenant, good))
            in_flight.append((task, uris, batch))
        while in_flight:
            await settle_oldest()
    finally:
        for task, _, _ in in_flight:
            task.cancel()
        await asyncio.gather(*(task for task, _, _ in in_flight), return_exceptions=True)
    record_import(tenant.slug, report, time.perf_counter() - started)
    return report


CHUNK_SIZE = 5000  # lines parsed, checked and COPYed at a time by the set-based import
PARSE_WORKERS = 2  # processes parsing a large JSONL file while this one writes
PARALLEL_BYTES = 4 * 1024 * 1024  # a file this large is worth the worker processes' start
WRITE_EVERY = 25_000  # URIs staged before the database writes them (while later lines are parsed)
# A file this large looks up the lines it may skip (the tenant's fingerprints: ~2 s a million rows);
# a smaller one parses in about the time that would take.
KNOWN_BYTES = 4 * 1024 * 1024


def prepare_lines(
    name: str, lines: list[tuple[int, bytes | None]], max_bytes: int
) -> list[Prepared | Problem]:
    """Parse, validate and check numbered JSONL lines (None: one over the limit) into staging rows
    (or Problems). A plain function of its arguments: it runs in a worker process as well as in
    this one."""
    out: list[Prepared | Problem] = []
    for number, raw in lines:
        item = jsonl_item(f"{name}:{number}", raw, max_bytes)
        if isinstance(item, Problem):
            out.append(item)
            continue
        assert raw is not None  # a line over the limit is a Problem
        try:
            out.append(prepare(item.location, number, item.body, max_bytes, line_fingerprint(raw, max_bytes)))
        except CatalogError as exc:
            out.append(Problem(item.location, exc.one_line(), item.weight))
    return out


Lines = list[tuple[int, bytes | None]]


def _known_apart(
    lines: Lines, known: Mapping[bytes, str], max_bytes: int
) -> tuple[Sequence[Known | None], Lines]:
    """Each line as Known (its fingerprint is in ``known``) or None, and the lines left to parse."""
    if not known:  # a first load: no line to fingerprint twice
        return [None] * len(lines), lines
    marks: list[Known | None] = []
    rest: Lines = []
    for number, raw in lines:
        uri = known.get(line_fingerprint(raw, max_bytes)) if raw is not None else None
        marks.append(None if uri is None else Known(uri))
        if uri is None:
            rest.append((number, raw))
    return marks, rest


def _in_order(
    marks: Sequence[Known | None], parsed: list[Prepared | Problem]
) -> list[Prepared | Problem | Known]:
    rest = iter(parsed)
    return [next(rest) if mark is None else mark for mark in marks]


async def _prepared(
    stream: IO[bytes], name: str, max_bytes: int, workers: int, known: Mapping[bytes, str]
) -> AsyncGenerator[tuple[list[Prepared | Problem | Known], int], None]:
    """The file's chunks prepared, in order, with the bytes each covers; a line whose fingerprint
    is in ``known`` (a re-import's unchanged lines) is Known, unparsed. With ``workers``, parsing
    (JSON, validation, the URI rule: the import's CPU bound) runs in that many processes while this
    one COPYs and the database writes; without, in a thread one chunk ahead."""
    chunks = (
        (weight, _known_apart(lines, known, max_bytes))
        for weight, lines in jsonl_chunks(stream, CHUNK_SIZE, max_line_bytes(max_bytes))
    )
    if workers < 1:
        work = (
            (_in_order(marks, prepare_lines(name, lines, max_bytes)), weight)
            for weight, (marks, lines) in chunks
        )
        # Closed here, not left to the garbage collector: its thread may still be reading the
        # stream, which a pass that starts over seeks back (import_jsonl).
        async with aclosing(_read_ahead(work)) as ahead:
            async for done in ahead:
                yield done
        return
    loop = asyncio.get_running_loop()
    # fork: a worker starts in milliseconds with everything imported; it only runs prepare_lines.
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        pending: collections.deque[
            tuple[asyncio.Future[list[Prepared | Problem]], Sequence[Known | None], int]
        ] = collections.deque()
        try:
            for weight, (marks, lines) in chunks:
                future: asyncio.Future[list[Prepared | Problem]]
                if lines:
                    future = loop.run_in_executor(pool, prepare_lines, name, lines, max_bytes)
                else:  # every line known: nothing for a worker
                    future = loop.create_future()
                    future.set_result([])
                pending.append((future, marks, weight))
                # A written batch's worth ahead: the workers parse the next while the database writes.
                if len(pending) > WRITE_EVERY // CHUNK_SIZE + workers:
                    done, done_marks, done_weight = pending.popleft()
                    yield _in_order(done_marks, await done), done_weight
            while pending:
                done, done_marks, done_weight = pending.popleft()
                yield _in_order(done_marks, await done), done_weight
        finally:
            for future, _, _ in pending:
                future.cancel()


async def import_jsonl(
    catalog: Catalog,
    principal: Principal,
    tenant: Tenant,
    stream: IO[bytes],
    name: str,
    *,
    workers: int = 0,
    on_problem: Callable[[Problem], None] = lambda problem: None,
    on_progress: Callable[[int], object] = lambda weight: None,  # its return is ignored
) -> ImportReport:
    """Upsert the JSONL ``stream`` set-based, in one transaction (:mod:`catalog.core.resources.bulk`):
    every line, or -- when any is bad -- none, every bad one reported. ``workers``: processes that
    parse while this one writes (0: a thread).

    From a file into a tenant with no resources yet, the staged rows are written every
    ``WRITE_EVERY`` URIs, so that the database works while the lines after them are parsed. Should
    a URI come again after its first body was written (or another writer add to the tenant
    meanwhile), the import starts over from where the stream began and writes once, at the end;
    progress already reported is not reported twice.

    From a file of ``KNOWN_BYTES`` or more into a tenant that has resources (a re-import), the
    lines that last wrote the tenant's rows (:func:`~catalog.core.resources.bulk.known_lines`, read
    before the import's transaction: a row another writer changes after it keeps that writer's
    body, as if the import had committed first) are neither parsed nor written; should a known line
    come after a body of its URI, the import starts over without skipping any.
    """
    report = ImportReport()
    start = stream.tell() if stream.seekable() else None
    reported = 0  # progress reported so far (a second pass reports only what goes beyond it)

    async def chunks(
        known: Mapping[bytes, str],
    ) -> AsyncGenerator[list[Prepared | Known | tuple[str, str]], None]:
        nonlocal reported
        done = 0
        # aclosing: when this pass stops early, the reading behind it (a thread or worker
        # processes) has stopped before the stream is seeked back for the next pass; a generator
        # left to the garbage collector would close later and could read lines meant for it.
        prepared_chunks = _prepared(stream, name, catalog.settings.max_blob_bytes, workers, known)
        async with aclosing(prepared_chunks) as prepared:
            async for chunk, weight in prepared:
                # Counted before the chunk is handed on: a consumer that stops after the last chunk
                # (its generator closed at the yield) must not leave that chunk's bytes uncounted.
                done += weight
                if done > reported:
                    on_progress(done - reported)
                    reported = done
                yield [(item.location, item.reason) if isinstance(item, Problem) else item for item in chunk]

    async def write(write_every: int | None, known: Mapping[bytes, str]) -> BulkResult:
        parsed = chunks(known)
        try:
            return await upsert_all(catalog, principal, tenant, parsed, write_every=write_every)
        finally:
            await parsed.aclose()  # a pass that started over: its workers stop before the next reads

    try:
        if start is None:  # no second pass possible: nothing is skipped, nothing written early
            written = await write(None, {})
        else:
            size = stream.seek(0, io.SEEK_END) - start
            stream.seek(start)
            known = await known_lines(catalog, tenant) if size >= KNOWN_BYTES else {}
            written = await write(WRITE_EVERY, known)
    except StartOver:
        assert start is not None
        stream.seek(start)
        written = await write(None, {})
    for location, reason in written.failed:
        found = Problem(location, reason)
        report.failed.append(found)
        on_problem(found)
    if not written.failed:
        report.created, report.updated, report.unchanged = written.created, written.updated, written.unchanged
        if written.created:
            await analyze_tables(catalog)
    return report


# PostgreSQL's deadlock_detected: two batches storing the same blobs in different orders. The loser
# rolled back, so writing its batch again is safe (an upsert by URI).
_DEADLOCK = "40P01"
_DEADLOCK_RETRIES = 3


async def _write_batch(
    catalog: Catalog, principal: Principal, tenant: Tenant, good: list[Item]
) -> ImportReport:
    written = ImportReport()  # of one batch: failed holds its bad bodies
    if not good:
        return written
    for attempt in range(_DEADLOCK_RETRIES + 1):
        try:
            written.created, written.updated, written.unchanged = await upsert_many(
                catalog, principal, tenant, [item.body for item in good]
            )
            return written
        except _ITEM_ERRORS:
            break
        except DBAPIError as exc:
            if getattr(exc.orig, "sqlstate", None) != _DEADLOCK or attempt == _DEADLOCK_RETRIES:
                raise
    for item in good:  # find the bad ones; the rest still go in
        try:
            created, updated, unchanged = await upsert_many(catalog, principal, tenant, [item.body])
        except _ITEM_ERRORS as exc:
            written.failed.append(Problem(item.location, _error_reason(exc), item.weight))
            continue
        written.created += created
        written.updated += updated
        written.unchanged += unchanged
    return written
