"""The life of the 2025-11-25 sessions in one process: the SDK server's lifespan, the sweep of idle
sessions, the notices every process sends about its sessions, and the end of every stream and
waiting read when the process stops."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.abc

from catalog.core import sessions as store
from catalog.core.catalog import Catalog
from catalog.core.sessions import SESSIONS_CHANNEL, Notice
from catalog.mcp.sessions.back_channel import Answers
from catalog.mcp.sessions.base import RequestIdent, SessionHost, logger
from catalog.mcp.sessions.get_stream import GetStreams


class SessionLifecycle:
    """Runs with the app (:meth:`run`); what it learns from other processes it passes to the GET
    streams, the waiting reads and the running requests of this one."""

    def __init__(
        self,
        host: SessionHost,
        *,
        idle_seconds: float,
        streams: GetStreams,
        answers: Answers,
        running: dict[RequestIdent, anyio.CancelScope],
    ) -> None:
        self.host = host
        self.idle_seconds = idle_seconds
        self.streams = streams
        self.answers = answers
        self.running = running
        # The SDK server's lifespan state, which every request of a session is served with.
        self.lifespan_state: Any = None
        self._task_group: anyio.abc.TaskGroup | None = None

    @contextlib.asynccontextmanager
    async def run(self, catalog: Catalog, stopping: anyio.Event) -> AsyncIterator[None]:
        listener = catalog.event_listener
        if listener is not None:
            await listener.add_channel(SESSIONS_CHANNEL, self._on_notice)
            listener.add_state_listener(self._on_listener_state)
        async with self.host.server.lifespan(self.host.server) as state, anyio.create_task_group() as tasks:
            self.lifespan_state = state
            self._task_group = tasks
            tasks.start_soon(self._sweep_forever, catalog)
            tasks.start_soon(self._end_streams_when, stopping)
            try:
                yield
            finally:
                self.close()
                self._task_group = None
                tasks.cancel_scope.cancel()

    async def _end_streams_when(self, stopping: anyio.Event) -> None:
        await stopping.wait()
        self.close()

    def close(self) -> None:
        """End every GET stream and wake every waiting read (the process is stopping)."""
        self.streams.close()
        for scope in list(self.running.values()):
            scope.cancel()

    async def _sweep_forever(self, catalog: Catalog) -> None:
        interval = min(max(self.idle_seconds / 4, 1.0), 60.0)
        while True:
            await anyio.sleep(interval)
            try:
                swept = await store.sweep_sessions(catalog, self.idle_seconds)
            except Exception as exc:
                logger.warning("2025-11-25 sessions: could not sweep idle sessions: %r", exc)
                continue
            if swept:
                logger.info("2025-11-25 sessions: %d idle sessions removed", swept)

    # -- notices from every process ---------------------------------------------------------------

    def _on_notice(self, payload: str) -> None:
        try:
            notice = Notice.parse(payload)
        except ValueError as exc:
            logger.warning("2025-11-25 sessions: %s", exc)
            return
        ident = (notice.tenant_id, notice.key)
        if notice.what == "ended":
            self.streams.end(ident)
            self.answers.wake_session(ident)
        elif notice.what == "subscriptions":
            self.streams.mark_stale(ident)
        elif notice.what == "stream":
            self.streams.end_unless(ident, notice.detail)  # a newer GET stream opened elsewhere
        elif notice.what == "answer" and notice.detail is not None:
            self.answers.wake((notice.tenant_id, notice.key, notice.detail))
        elif notice.what == "cancel" and notice.detail is not None:
            running = self.running.get((notice.tenant_id, notice.key, notice.detail))
            if running is not None:
                running.cancel()

    def _on_listener_state(self, listener: Any) -> None:
        """Notices sent while the LISTEN connection was down are lost: after it is back, waiting
        reads look for their answers and GET streams reload their subscriptions."""
        if not listener.connected:
            return
        self.answers.wake_all()
        self.streams.mark_all_stale()
