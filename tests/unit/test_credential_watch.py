"""The credential watch on its own (``catalog.events.credentials``): what ends a hold and what does
not. The database side (the trigger, NOTIFY, the token lookup) is tests/e2e/test_stream_credentials.py."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

import anyio
import anyio.lowlevel
import pytest

from catalog.core.principal import Principal
from catalog.events.credentials import CredentialWatch

pytestmark = pytest.mark.asyncio(loop_scope="session")


def token(token_id: int, expires_at: datetime | None = None) -> Principal:
    return Principal(kind="token", tenant_id=1, token_id=token_id, expires_at=expires_at)


class Live:
    """Which tokens the database would call live, and who asked."""

    def __init__(self, live: dict[int, datetime | None]) -> None:
        self.live = live
        self.asked: list[list[int]] = []

    async def __call__(self, token_ids: Iterable[int]) -> dict[int, datetime | None]:
        ids = sorted(token_ids)
        self.asked.append(ids)
        return {i: self.live[i] for i in ids if i in self.live}


async def test_a_revocation_notice_ends_only_that_tokens_holds() -> None:
    watch = CredentialWatch(Live({}))
    with watch.hold(token(1)) as one, watch.hold(token(1)) as again, watch.hold(token(2)) as other:
        watch.on_payload(json.dumps({"t": 1, "k": 1, "o": "revoked"}))
        with anyio.fail_after(1):
            assert await one.ended() == "revoked" and await again.ended() == "revoked"
        assert other.reason is None
    assert len(watch) == 0


async def test_after_a_reconnection_every_held_token_is_checked_again() -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    live = Live({2: later})
    watch = CredentialWatch(live)
    with watch.hold(token(1)) as revoked_meanwhile, watch.hold(token(2)) as still_live:
        watch.on_reconnected()
        with anyio.fail_after(1):
            assert await revoked_meanwhile.ended() == "revoked"
        assert live.asked == [[1, 2]]
        assert still_live.reason is None and still_live.expires_at == later


async def test_a_changed_expiry_is_read_again_and_ends_the_hold_when_it_passes() -> None:
    soon = datetime.now(UTC) + timedelta(milliseconds=200)
    watch = CredentialWatch(Live({3: soon}))
    with watch.hold(token(3, datetime.now(UTC) + timedelta(days=1))) as hold:
        watch.on_payload(json.dumps({"t": 1, "k": 3, "o": "changed"}))
        with anyio.fail_after(2):
            assert await hold.ended() == "expired"
        assert hold.expires_at == soon


async def test_notices_for_tokens_nobody_holds_ask_nothing_and_garbage_is_ignored() -> None:
    live = Live({})
    watch = CredentialWatch(live)
    with watch.hold(Principal.anonymous(1, "demo")) as anonymous:
        watch.on_payload(json.dumps({"t": 1, "k": 9, "o": "changed"}))
        watch.on_payload("not json")
        watch.on_payload(json.dumps({"t": 1}))
        await anyio.lowlevel.checkpoint()
        assert live.asked == [] and anonymous.reason is None
