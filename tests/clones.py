"""Each test's own database, cloned from the migrated template ahead of time and dropped behind it.

PostgreSQL forces a synchronous commit for ``CREATE DATABASE`` and ``DROP DATABASE`` (each waits for
its WAL to reach the disk), which costs 0.1-0.5 s apiece on a server with ``fsync`` on, as the
machine's PostgreSQL in CI is. Waited for in every test's setup and teardown, that was minutes of a
CI run spent idle. A :class:`Clones` keeps ``ahead`` clones ready and drops the used ones in a thread
of its own, while the tests run: a test waits only when the thread cannot keep up.

A clone is made only from the template, which no test changes, and handed out once; a used one is
dropped ``WITH (FORCE)`` (whatever a test left connected is cut off), at the latest when the session
ends, so a test sees exactly what a clone made in its own setup would have held.
"""

from __future__ import annotations

import asyncio
import threading
import uuid

import asyncpg


class Clones:
    """Databases cloned from ``template`` on the server at ``maintenance_dsn``, one per :meth:`take`."""

    def __init__(
        self, maintenance_dsn: str, template: str, *, prefix: str = "catalog_t_", ahead: int = 2
    ) -> None:
        self._dsn = maintenance_dsn
        self._template = template
        self._prefix = prefix
        self._ahead = ahead
        self._changed = threading.Condition()
        self._ready: list[str] = []
        self._waiting = 0  # callers of take() not yet served
        self._used: list[str] = []
        self._failure: BaseException | None = None
        self._closing = False
        self._thread = threading.Thread(target=self._work, name="test-database-clones", daemon=True)
        self._thread.start()

    def take(self) -> str:
        """A fresh clone's name (blocks until one is ready; raises what making it raised)."""
        with self._changed:
            self._waiting += 1
            self._changed.notify_all()
            try:
                while not self._ready:
                    if self._failure is not None:
                        raise RuntimeError("cloning the template database failed") from self._failure
                    self._changed.wait()
                return self._ready.pop(0)
            finally:
                self._waiting -= 1

    def give_back(self, name: str) -> None:
        """``name`` is done with: dropped in the background."""
        with self._changed:
            self._used.append(name)
            self._changed.notify_all()

    def close(self) -> None:
        """Drop every clone, used or ready; returns once they are gone."""
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._thread.join()

    # -- the thread -------------------------------------------------------------------------------

    def _next_job(self) -> tuple[str, str] | None:
        with self._changed:
            while True:
                if self._closing:
                    self._used += self._ready
                    self._ready.clear()
                    return ("drop", self._used.pop(0)) if self._used else None
                # A waiting test comes first; then the clones ahead; then the drops.
                if self._failure is None and len(self._ready) < self._ahead + self._waiting:
                    return ("create", f"{self._prefix}{uuid.uuid4().hex[:12]}")
                if self._used:
                    return ("drop", self._used.pop(0))
                self._changed.wait()

    def _work(self) -> None:
        loop = asyncio.new_event_loop()
        conn: asyncpg.Connection | None = None
        try:
            while (job := self._next_job()) is not None:
                kind, name = job
                try:
                    if conn is None or conn.is_closed():
                        conn = loop.run_until_complete(asyncpg.connect(self._dsn))
                    if kind == "create":
                        loop.run_until_complete(
                            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self._template}"')
                        )
                    else:
                        loop.run_until_complete(
                            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                        )
                except BaseException as exc:  # handed to the tests waiting (create) or lost (drop)
                    with self._changed:
                        if kind == "create":
                            self._failure = exc
                        self._changed.notify_all()
                    continue
                if kind == "create":
                    with self._changed:
                        self._ready.append(name)
                        self._changed.notify_all()
        finally:
            if conn is not None:
                loop.run_until_complete(conn.close())
            loop.close()
