"""What happened: the audit log (who changed what, when) and the change feed (what changed, in order)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from catalog.admin.deps import MAX_ID, AdminTenantDep, CatalogDep, Cursor, LimitDep, PrincipalDep
from catalog.admin.problems import problem_response
from catalog.core import audit, changes
from catalog.core.catalog import Catalog
from catalog.core.errors import FieldError, InvalidInput
from catalog.core.schemas.audit import AuditEntryOut, ChangesPage
from catalog.core.schemas.base import Page
from catalog.events.credentials import EndReason

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
STREAM_RETRY_AFTER_S = 5  # what a refused stream is told, as a refused MCP stream is
LastEventId = Annotated[
    str | None,
    Header(
        alias="Last-Event-ID", max_length=20, pattern=r"^[0-9]{1,19}$", description="resume after this seq"
    ),
]


class HeldStream(StreamingResponse):
    """A streamed response that lets go of what it holds (its stream slot) when it ends, however
    it ends: served, cancelled, or the client gone before the first byte."""

    def __init__(self, content: AsyncIterator[str], held: contextlib.ExitStack, **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._held = held

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        with self._held:
            await super().__call__(scope, receive, send)


def change_fanout(request: Request, catalog: Catalog) -> changes.ChangeFanout:
    """The process's shared change-feed readers (one per app, made on first use)."""
    fanout: changes.ChangeFanout | None = getattr(request.app.state, "change_fanout", None)
    if fanout is None or fanout.catalog is not catalog:
        fanout = request.app.state.change_fanout = changes.ChangeFanout(catalog)
    return fanout


@router.get(
    "/changes/stream",
    response_class=StreamingResponse,
    responses={
        200: {"description": "server-sent events", "content": {"text/event-stream": {}}},
        429: {"description": "too many open streams (per credential, tenant or server); see Retry-After"},
    },
)
async def stream_changes(
    request: Request,
    tenant: AdminTenantDep,
    catalog: CatalogDep,
    principal: PrincipalDep,
    last_event_id: LastEventId = None,
    after: Annotated[
        int | None, Query(ge=0, le=MAX_ID, description="start after this seq (default: from now on)")
    ] = None,
) -> Response:
    """The change feed as server-sent events: one ``change`` event per change, ``id:`` its seq and
    ``data:`` the change as ``/changes`` lists it. Reconnecting with ``Last-Event-ID`` (browsers do
    it by themselves) resumes after that seq, missing nothing; without it or ``after`` the stream
    starts with the next change. Same tenant scoping as ``/changes``. The stream ends when the
    credential expires or the server stops. Open streams count against the same limits as MCP
    listen streams (per credential, per tenant, per server): beyond them, 429 with Retry-After."""
    held = contextlib.ExitStack()
    # The MCP endpoint's stream quotas: one count of a caller's open streams, whichever surface.
    refused = held.enter_context(request.app.state.mcp.streams.slot(principal))
    if refused is not None:
        held.close()
        return problem_response(
            429,
            "Too many streams",
            f"Too many open streams: {refused}",
            headers={"Retry-After": str(STREAM_RETRY_AFTER_S)},
        )
    try:
        if last_event_id is not None:
            start = int(last_event_id)
        elif after is not None:
            start = after
        else:
            start = await changes.latest_seq(catalog, tenant)
    except BaseException:
        held.close()
        raise
    fanout = change_fanout(request, catalog)
    credentials = catalog.credential_watch

    async def events() -> AsyncIterator[str]:
        # The stream holds its credential: revoked or expired, it ends (as MCP listen streams do).
        with credentials.hold(principal) if credentials is not None else contextlib.nullcontext() as hold:
            ended: asyncio.Future[EndReason] = (
                asyncio.ensure_future(hold.ended()) if hold is not None else asyncio.Future()
            )
            try:
                yield f"retry: 1000\n: following {tenant.slug} after {start}\n\n"
                async for change in fanout.follow(tenant, after=start, ended=ended, idle=STREAM_IDLE_S):
                    if change is None:
                        yield ": idle\n\n"
                    else:
                        data = json.dumps(change.dump(), separators=(",", ":"))
                        yield f"id: {change.seq}\nevent: change\ndata: {data}\n\n"
            finally:
                ended.cancel()

    return HeldStream(
        events(),
        held,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
