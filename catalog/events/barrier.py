"""The listener barrier: before a read may go to a replica, this process's listener has received
every notification committed before the read arrived (docs/scaling.md, "Read replicas").

A client notified of a change by one host may read through another host whose LISTEN connection
has not received that NOTIFY yet; that host's replica set has then not been told of the change
(:meth:`catalog.core.replicas.ReadReplicas.changed`) and could answer from a replica that has not
replayed it. So a read first asks for a *round*: ``pg_notify`` on a channel private to this process
(its pid and a random suffix: with PgBouncer or many hosts on one primary no other process LISTENs
on it), carrying the round's token, sent on the listener's own connection. PostgreSQL delivers a
listener's notifications in commit order, and the listener handles them in order (asyncpg calls
every callback of a connection in arrival order, and the change observers run synchronously in
it), so once the echo is handled every change committed before the round's NOTIFY has reached the
replica set, and its per-host rule decides where the read runs.

The NOTIFY goes out on the LISTEN connection rather than a pooled one: no pool slot or PgBouncer
hop is taken from the reads, it is one round trip (PostgreSQL sends a session its own notifications
with the statement's answer), and the barrier needs nothing but the listener itself to be up.

Rounds are coalesced: one is in flight at a time; every read that arrives before a round's NOTIFY
is sent waits for that round, and reads arriving later for the next one. A read waits at most
:data:`BARRIER_WAIT_S`; then, or at once while the listener is not connected or a round is already
overdue, :meth:`ListenerBarrier.wait` answers False and the read runs on the primary.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import secrets
from dataclasses import dataclass, field

from catalog.events.listener import ChangeListener
from catalog.observability import metrics

logger = logging.getLogger("catalog.events")

# How long a read waits for its round's echo before it goes to the primary. Fixed rather than
# derived from CATALOG_READ_MAX_LAG_MS: that bounds how stale a replica may be (5 s by default, 0
# for no limit), not how long a read may wait. An echo takes well under a millisecond on a quiet
# primary and a few on a loaded one; a quarter of a second leaves room for a busy event loop or
# the listener's own look-ups on its connection, and is the most a stalled listener costs a read
# (the next reads go to the primary at once while its round is overdue).
BARRIER_WAIT_S = 0.25
# A round whose echo has not come this long after its NOTIFY is given up (the connection may be
# alive yet silent until its keepalive notices), so that a later round can prove the listener again.
ROUND_GIVEN_UP_S = 10.0


@dataclass(eq=False)
class _Round:
    token: str
    echoed: asyncio.Future[bool] = field(default_factory=lambda: asyncio.get_running_loop().create_future())

    def resolve(self, value: bool) -> None:
        if not self.echoed.done():
            self.echoed.set_result(value)


class ListenerBarrier:
    """Rounds of NOTIFY and echo on ``listener``'s connection; :meth:`start`, then :meth:`wait`."""

    def __init__(self, listener: ChangeListener, *, wait_s: float = BARRIER_WAIT_S) -> None:
        self.listener = listener
        self.wait_s = wait_s
        self.channel = f"catalog_barrier_{os.getpid()}_{secrets.token_hex(6)}"
        self.rounds = 0  # NOTIFYs sent so far
        self._tokens = itertools.count(1)
        self._next: _Round | None = None  # gathering reads; its NOTIFY not sent yet
        self._current: _Round | None = None  # sent, its echo awaited
        self._overdue = False
        self._task: asyncio.Task[None] | None = None

    @property
    def overdue(self) -> bool:
        """A round is in flight past :attr:`wait_s`: reads go to the primary without waiting."""
        return self._overdue

    async def start(self) -> None:
        """LISTEN on the private channel (now, if connected, and after every reconnection)."""
        self.listener.add_state_listener(self._on_state)
        await self.listener.add_channel(self.channel, self._on_echo)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for round_ in (self._current, self._next):
            if round_ is not None:
                round_.resolve(False)

    async def wait(self) -> bool:
        """True once the listener has handled every notification committed before this call;
        False if that is not known within :attr:`wait_s` (the caller reads on the primary)."""
        if not self.listener.connected or self._overdue:
            return False
        round_ = self._next
        if round_ is None:
            round_ = self._next = _Round(str(next(self._tokens)))
            if self._task is None or self._task.done():
                self._task = asyncio.get_running_loop().create_task(self._run())
        try:
            async with asyncio.timeout(self.wait_s):
                # Shielded: one read's cancellation (its client gone) must not end the round for all.
                return await asyncio.shield(round_.echoed)
        except TimeoutError:
            return False

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while self._next is not None:
            round_, self._next = self._next, None
            self._current = round_
            self.rounds += 1
            metrics.READ_BARRIER_ROUNDS.inc()
            overdue = loop.call_later(self.wait_s, self._mark_overdue, round_)
            try:
                await self.listener.notify(self.channel, round_.token)
                async with asyncio.timeout(ROUND_GIVEN_UP_S):
                    await asyncio.shield(round_.echoed)
            except asyncio.CancelledError:
                round_.resolve(False)
                raise
            except Exception as exc:  # not sent, or never echoed: those reads go to the primary
                logger.warning("read replicas: listener barrier round failed: %r", exc)
                round_.resolve(False)
            finally:
                overdue.cancel()
                self._overdue = False
                self._current = None

    def _mark_overdue(self, round_: _Round) -> None:
        if not round_.echoed.done():
            self._overdue = True

    def _on_echo(self, payload: str) -> None:
        current = self._current
        if current is not None and payload == current.token:
            current.resolve(True)

    def _on_state(self, listener: ChangeListener) -> None:
        # A lost connection loses the echo with it; the reads waiting go to the primary now.
        current = self._current
        if current is not None and not listener.connected:
            current.resolve(False)
