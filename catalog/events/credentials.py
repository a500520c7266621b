"""Credentials that end the streams they opened: revoked, deleted (their tenant too) or expired.

A stream (a ``subscriptions/listen``, a 2025-11-25 GET stream) holds its credential for as long as
it is open (:meth:`CredentialWatch.hold`). The tokens table announces every revocation, deletion and
change of expiry on the ``catalog_credentials`` channel (migration 0003), which every process
listens to, so a token revoked through any process, host or SQL session ends its streams
everywhere within a notification's delay; a credential's expiry (a token's ``expiresAt``, a JWT's
``exp`` plus leeway) ends them on time without any notification. After the LISTEN connection was
down, every held token is checked again (its revocation may have gone unheard).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
from collections.abc import Awaitable, Callable, Generator, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

import anyio

from catalog.core.principal import Principal

logger = logging.getLogger("catalog.events")

CREDENTIALS_CHANNEL = "catalog_credentials"

EndReason = Literal["revoked", "expired"]
# Which of the given tokens are still live, each with its expiry (``catalog.core.tokens.live_tokens``).
LiveTokens = Callable[[Iterable[int]], Awaitable[dict[int, datetime | None]]]


@dataclass(eq=False)
class CredentialHold:
    """One stream's hold on its credential; :meth:`ended` returns why it ended."""

    token_id: int | None
    expires_at: datetime | None
    reason: EndReason | None = None
    # Called when the hold ends or its expiry moves: a stream that waits on other things as well
    # (``catalog.mcp.fast_listen``) is woken by it instead of waiting in :meth:`ended`.
    on_change: Callable[[], None] | None = None
    _wake: anyio.Event = field(default_factory=anyio.Event)

    def end(self, reason: EndReason) -> None:
        if self.reason is None:
            self.reason = reason
            self._wake.set()
            if self.on_change is not None:
                self.on_change()

    def renew(self, expires_at: datetime | None) -> None:
        """The credential is still live, with this expiry (it may have moved either way)."""
        self.expires_at = expires_at
        self._wake.set()
        if self.on_change is not None:
            self.on_change()

    def seconds_left(self) -> float:
        """Seconds until the credential expires (infinite without an expiry; <= 0 once it has)."""
        if self.expires_at is None:
            return math.inf
        return (self.expires_at - datetime.now(UTC)).total_seconds()

    async def ended(self) -> EndReason:
        """Wait until the credential is revoked or expires."""
        while self.reason is None:
            remaining = self.seconds_left()
            if remaining <= 0:
                self.end("expired")
                break
            wake = self._wake
            with anyio.move_on_after(remaining):
                await wake.wait()
            if wake.is_set():
                self._wake = anyio.Event()
        assert self.reason is not None
        return self.reason


class CredentialWatch:
    """The credentials held by this process's streams, ended when the database says so."""

    def __init__(self, live_tokens: LiveTokens) -> None:
        self._live_tokens = live_tokens
        self._holds: dict[int, set[CredentialHold]] = {}
        self._checking: set[int] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @contextlib.contextmanager
    def hold(self, principal: Principal) -> Generator[CredentialHold, None, None]:
        """Hold ``principal``'s credential for the duration of a stream."""
        hold = CredentialHold(principal.token_id, principal.expires_at)
        if principal.token_id is not None:
            self._holds.setdefault(principal.token_id, set()).add(hold)
        try:
            yield hold
        finally:
            if principal.token_id is not None:
                holds = self._holds.get(principal.token_id)
                if holds is not None:
                    holds.discard(hold)
                    if not holds:
                        del self._holds[principal.token_id]

    def __len__(self) -> int:
        return sum(len(holds) for holds in self._holds.values())

    def on_payload(self, payload: str) -> None:
        """A notification on ``catalog_credentials``: ``{"t": tenant, "k": token id, "o": what}``."""
        try:
            data = json.loads(payload)
            token_id, what = int(data["k"]), data["o"]
        except (ValueError, TypeError, KeyError):
            logger.warning("credential watch: malformed payload %r", payload[:200])
            return
        if token_id not in self._holds:
            return
        if what == "revoked":
            for hold in list(self._holds.get(token_id, ())):
                hold.end("revoked")
        else:  # its expiry changed: ask the database what it is now
            self._schedule_check([token_id])

    def on_reconnected(self) -> None:
        """Revocations announced while the LISTEN connection was down were not heard: check all."""
        self._schedule_check(list(self._holds))

    def _schedule_check(self, token_ids: list[int]) -> None:
        ids = [token_id for token_id in token_ids if token_id not in self._checking]
        if not ids:
            return
        self._checking.update(ids)
        task = asyncio.get_running_loop().create_task(self._check(ids))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda _: self._checking.difference_update(ids))

    async def _check(self, token_ids: list[int]) -> None:
        try:
            live = await self._live_tokens(token_ids)
        except Exception as exc:
            logger.warning("credential watch: cannot check tokens %s: %r", token_ids, exc)
            return
        for token_id in token_ids:
            for hold in list(self._holds.get(token_id, ())):
                if token_id in live:
                    hold.renew(live[token_id])
                else:
                    hold.end("revoked")
