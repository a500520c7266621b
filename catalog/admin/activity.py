"""What happened: the audit log (who changed what, when) and the change feed (what changed, in order)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse

from catalog.admin.deps import MAX_ID, AdminTenantDep, CatalogDep, Cursor, LimitDep, PrincipalDep
from catalog.core import audit, changes
from catalog.core.errors import FieldError, InvalidInput
from catalog.core.schemas import AuditEntryOut, ChangesPage, Page

router = APIRouter(prefix="/tenants/{slug}", tags=["activity"])


@router.get("/audit", response_model=Page[AuditEntryOut], response_model_exclude_none=True)
async def list_audit(
    tenant: AdminTenantDep,
    catalog: CatalogDep,
    principal: PrincipalDep,
    limit: LimitDep,
    cursor: Cursor = None,
) -> Page[AuditEntryOut]:
    """The audit log, newest first: principal, action, target, before/after digests, time."""
    entries, next_cursor = await audit.list_audit(catalog, principal, tenant, cursor=cursor, limit=limit)
    return Page[AuditEntryOut](items=entries, next_cursor=next_cursor)


@router.get("/changes", response_model=ChangesPage, response_model_exclude_none=True)
async def list_changes(
    tenant: AdminTenantDep,
    catalog: CatalogDep,
    limit: LimitDep,
    after: Annotated[
        int, Query(ge=0, le=MAX_ID, description="the last seq seen (0: from the start of the feed)")
    ] = 0,
    tail: Annotated[
        int | None,
        Query(
            ge=1, le=1000, description="instead of after: the last `tail` changes (then poll with lastSeq)"
        ),
    ] = None,
) -> ChangesPage:
    """The change feed, oldest first after ``after``. Poll again with ``after=lastSeq``;
    ``nextCursor`` is present when more changes are waiting right now. ``tail=N`` answers the
    latest N changes instead (a view that starts with what happened lately)."""
    if tail is not None:
        if after:
            raise InvalidInput(
                "give after or tail, not both",
                errors=[FieldError("/tail", "tail reads the latest changes; after reads from a seq on")],
            )
        return await changes.recent_changes(catalog, tenant, count=tail)
    return await changes.list_changes(catalog, tenant, after=after, limit=limit)


STREAM_IDLE_S = 15.0  # a comment line this often keeps proxies from closing a quiet stream
POLL_S = 1.0  # without a live event hub (none in this process), the feed is read this often
LastEventId = Annotated[
    str | None,
    Header(
        alias="Last-Event-ID", max_length=20, pattern=r"^[0-9]{1,19}$", description="resume after this seq"
    ),
]


@router.get(
    "/changes/stream",
    response_class=StreamingResponse,
    responses={200: {"description": "server-sent events", "content": {"text/event-stream": {}}}},
)
async def stream_changes(
    tenant: AdminTenantDep,
    catalog: CatalogDep,
    principal: PrincipalDep,
    last_event_id: LastEventId = None,
    after: Annotated[
        int | None, Query(ge=0, le=MAX_ID, description="start after this seq (default: from now on)")
    ] = None,
) -> StreamingResponse:
    """The change feed as server-sent events: one ``change`` event per change, ``id:`` its seq and
    ``data:`` the change as ``/changes`` lists it. Reconnecting with ``Last-Event-ID`` (browsers do
    it by themselves) resumes after that seq, missing nothing; without it or ``after`` the stream
    starts with the next change. Same tenant scoping as ``/changes``. The stream ends when the
    credential expires or the server stops."""
    if last_event_id is not None:
        start = int(last_event_id)
    elif after is not None:
        start = after
    else:
        start = await changes.latest_seq(catalog, tenant)
    hub = catalog.event_hub
    # Subscribed before the first read of the feed, so nothing falls between the two.
    subscription = hub.subscribe(tenant.id) if hub is not None else None
    credentials = catalog.credential_watch

    async def events() -> AsyncIterator[str]:
        # The stream holds its credential: revoked or expired, it ends (as MCP listen streams do).
        with credentials.hold(principal) if credentials is not None else contextlib.nullcontext() as hold:
            ended = asyncio.ensure_future(hold.ended()) if hold is not None else asyncio.Future()

            async def wait() -> bool | None:
                waiting = (
                    asyncio.ensure_future(subscription.next_batch())
                    if subscription is not None
                    else asyncio.ensure_future(asyncio.sleep(POLL_S, result=True))
                )
                done, _ = await asyncio.wait(
                    {waiting, ended}, timeout=STREAM_IDLE_S, return_when=asyncio.FIRST_COMPLETED
                )
                if ended in done:
                    waiting.cancel()
                    return False
                if waiting not in done:
                    waiting.cancel()
                    return None  # idle: a keep-alive comment
                return waiting.result() is not None

            try:
                yield f"retry: 1000\n: following {tenant.slug} after {start}\n\n"
                async for change in changes.follow_changes(catalog, tenant, after=start, wait=wait):
                    if change is None:
                        yield ": idle\n\n"
                    else:
                        data = json.dumps(change.dump(), separators=(",", ":"))
                        yield f"id: {change.seq}\nevent: change\ndata: {data}\n\n"
            finally:
                ended.cancel()
                if subscription is not None:
                    subscription.close()

    return StreamingResponse(
        events(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
