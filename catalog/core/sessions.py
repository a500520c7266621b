"""2025-11-25 MCP sessions, kept in PostgreSQL so that any worker of any host serves any request.

A session is opened by ``initialize`` and named by an ``Mcp-Session-Id`` of 256 random bits; only
its sha256 (the session *key*) is stored. It belongs to the tenant and the credential that opened
it (``Principal.identity``): presented with another credential it does not exist. Each request
resumes it (one statement that checks and touches it); one unused for the idle time is gone at
once and its rows are swept later.

What one process must tell the others travels on the ``catalog_sessions`` NOTIFY channel, sent in
the transaction that made the change (so it arrives after the commit): a session ended, its
subscriptions changed, a stream took over its GET stream, or the client answered a server-initiated
request (elicitation) whose answer is waiting in ``mcp_session_requests``.

What a session costs is bounded. Of its ``initialize`` parameters only what the server reads back
is kept (:func:`kept_client_params`), at most :data:`CLIENT_PARAMS_MAX_BYTES`. Live sessions are
counted per caller and per tenant (``CATALOG_MAX_SESSIONS_PER_CALLER``/``_PER_TENANT``) in the
transaction that inserts one, under a lock per tenant, so the caps hold across every worker and host.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import delete, func, insert, select, text, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncConnection

from catalog.core.catalog import Catalog
from catalog.core.principal import Principal
from catalog.db.engine import SESSIONS_CHANNEL, TenantScope, transaction
from catalog.db.models import mcp_session_requests, mcp_sessions

SessionNotice = Literal["ended", "subscriptions", "stream", "answer", "cancel"]
SessionLimit = Literal["caller", "tenant"]

# What a session keeps of its initialize parameters, as JSON text (UTF-8, the length of PostgreSQL's
# own jsonb::text form). What is kept (kept_client_params) is a few hundred bytes for any real
# client: the room is for long clientInfo names and titles, not for anything the client adds.
CLIENT_PARAMS_MAX_BYTES = 4096
# The client capabilities a session keeps: the ones a server acts on (elicitation for consent
# reads; sampling and roots, and tasks, for what a handler may ask the client). Each is a fixed
# shape once validated (unknown keys dropped). Not kept: ``experimental`` and ``extensions``, open
# maps of the client's own that nothing here reads (a client may send megabytes of them).
KEPT_CAPABILITIES = ("sampling", "elicitation", "roots", "tasks")
KEPT_CLIENT_INFO = ("name", "version", "title")
_CALLER_FIELD = "caller"  # beside the kept parameters: who opened the session, for the per-caller cap


class UnstorableClientParams(ValueError):
    """What the session would keep of ``initialize`` cannot be stored (too large, or text PostgreSQL
    cannot hold): the client is told so (-32602), nothing is stored."""


class TooManySessions(Exception):
    """The caller, or its tenant, holds as many live sessions as it may (nothing was stored)."""

    def __init__(self, limit: SessionLimit, allowed: int, retry_after: float) -> None:
        super().__init__(limit, allowed, retry_after)
        self.limit = limit
        self.allowed = allowed
        self.retry_after = retry_after  # seconds until the least recently used of them idles out

    def __str__(self) -> str:
        holder = "this caller" if self.limit == "caller" else "the tenant"
        setting = "CATALOG_MAX_SESSIONS_PER_" + self.limit.upper()
        return (
            f"Too many sessions: {holder} has {self.allowed} open 2025-11-25 sessions, its limit"
            f" ({setting}); end one with DELETE or retry after the number of seconds in Retry-After"
        )


def new_session_id() -> str:
    """A fresh ``Mcp-Session-Id``: visible ASCII, cryptographically random (COMPAT-7)."""
    return secrets.token_urlsafe(32)


def session_key(session_id: str) -> bytes:
    # 256 random bits: a fast hash is enough, there is nothing to brute-force.
    return hashlib.sha256(session_id.encode()).digest()


@dataclass(frozen=True)
class SessionRecord:
    tenant_id: int
    key: bytes
    principal: str
    protocol_version: str
    client_params: dict[str, Any]
    subscriptions: dict[str, str] = field(default_factory=dict)  # as the client sent it -> canonical


@dataclass(frozen=True)
class Notice:
    """A message on ``catalog_sessions`` (also what the listening side parses)."""

    tenant_id: int
    key: bytes
    what: SessionNotice
    detail: str | None = None  # the request id of an answer or a cancellation, the token of a stream

    def payload(self) -> str:
        body = {"t": self.tenant_id, "s": self.key.hex(), "o": self.what}
        if self.detail is not None:
            body["d"] = self.detail
        return json.dumps(body, separators=(",", ":"))

    @classmethod
    def parse(cls, payload: str) -> Notice:
        """ValueError if the payload is not a notice."""
        try:
            data = json.loads(payload)
            notice = cls(int(data["t"]), bytes.fromhex(data["s"]), data["o"], data.get("d"))
        except (ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"malformed session notice: {payload[:200]!r}") from exc
        if notice.what not in ("ended", "subscriptions", "stream", "answer", "cancel"):
            raise ValueError(f"unknown session notice: {payload[:200]!r}")
        return notice


async def _notify(conn: AsyncConnection, notice: Notice) -> None:
    await conn.execute(
        text("SELECT pg_notify(:channel, :payload)"),
        {"channel": SESSIONS_CHANNEL, "payload": notice.payload()},
    )


async def notify_session(catalog: Catalog, notice: Notice) -> None:
    """Tell every process something about a session (a cancellation nobody here can act on)."""
    async with transaction(catalog.engine, TenantScope.tenant(notice.tenant_id)) as conn:
        await _notify(conn, notice)


def _record(row: Any) -> SessionRecord:
    params = {name: value for name, value in row.client_params.items() if name != _CALLER_FIELD}
    return SessionRecord(
        tenant_id=row.tenant_id,
        key=row.id_hash,
        principal=row.principal,
        protocol_version=row.protocol_version,
        client_params=params,
        subscriptions=row.subscriptions,
    )


def kept_client_params(protocol_version: str, client_params: dict[str, Any]) -> dict[str, Any]:
    """What a session keeps of validated ``initialize`` parameters (the SDK's JSON form): the
    negotiated protocol version, the capabilities in :data:`KEPT_CAPABILITIES`, and clientInfo's
    name, version and title. Everything else the client sent is dropped."""
    capabilities = client_params.get("capabilities") or {}
    info = client_params.get("clientInfo") or {}
    return {
        "protocolVersion": protocol_version,
        "capabilities": {name: capabilities[name] for name in KEPT_CAPABILITIES if name in capabilities},
        "clientInfo": {name: info[name] for name in KEPT_CLIENT_INFO if isinstance(info.get(name), str)},
    }


def stored_size(document: dict[str, Any]) -> int:
    """The bytes of ``document`` as PostgreSQL prints a jsonb (``", "`` and ``": "`` separators);
    UnstorableClientParams for text PostgreSQL cannot hold (NUL, unpaired surrogates)."""
    text = json.dumps(document, ensure_ascii=False)
    # jsonb has no NUL (PostgreSQL would refuse the insert): an escaped NUL once escaped backslashes
    # are set aside (``\\u0000`` is a backslash and "u0000").
    if "\\u0000" in text.replace("\\\\", ""):
        raise UnstorableClientParams("Invalid params: clientInfo must not contain NUL characters")
    try:
        return len(text.encode())
    except UnicodeEncodeError:
        raise UnstorableClientParams("Invalid params: clientInfo must be valid Unicode text") from None


def caller_of(principal: Principal, address: str | None) -> str:
    """Whose per-caller cap a session counts against: the credential, or for an anonymous caller
    its address (every anonymous caller is the same principal). Hashed: no address is stored."""
    who = f"address:{address}" if principal.kind == "anonymous" and address else principal.identity
    return hashlib.sha256(who.encode()).hexdigest()[:32]


def _live(idle_seconds: float) -> Any:
    """Used within the idle time: a session a client can still resume (older ones await the sweep)."""
    return mcp_sessions.c.last_seen_at > func.now() - func.make_interval(0, 0, 0, 0, 0, 0, idle_seconds)


async def open_session(
    catalog: Catalog,
    principal: Principal,
    protocol_version: str,
    client_params: dict[str, Any],
    *,
    address: str | None = None,
) -> str:
    """Store a new session for ``principal`` (tenant-bound) and return its id (shown once).

    Keeps what :func:`kept_client_params` keeps, at most :data:`CLIENT_PARAMS_MAX_BYTES`
    (UnstorableClientParams beyond). Raises TooManySessions when the caller (``address`` names an
    anonymous one) or the tenant already holds its ``CATALOG_MAX_SESSIONS_PER_*`` live sessions: the
    count and the insert share a transaction holding the tenant's session lock, so concurrent opens
    on any worker or host cannot both take the last slot."""
    assert principal.tenant_id is not None
    settings = catalog.settings
    caller = caller_of(principal, address)
    document = {**kept_client_params(protocol_version, client_params), _CALLER_FIELD: caller}
    size = stored_size(document)
    if size > CLIENT_PARAMS_MAX_BYTES:
        raise UnstorableClientParams(
            f"Invalid params: a session keeps at most {CLIENT_PARAMS_MAX_BYTES} bytes of initialize"
            f" (protocol version, capabilities, clientInfo name, version and title); these take {size}"
        )
    session_id = new_session_id()
    mine = mcp_sessions.c.client_params[_CALLER_FIELD].astext == caller
    async with transaction(catalog.engine, TenantScope.tenant(principal.tenant_id)) as conn:
        # One opener of a tenant's sessions at a time, on every host, until this transaction ends.
        await conn.execute(
            select(
                func.pg_advisory_xact_lock(func.hashtextextended("catalog.mcp_sessions", principal.tenant_id))
            )
        )
        held = (
            await conn.execute(
                select(
                    func.count().filter(mine).label("caller"),
                    func.count().label("tenant"),
                    func.min(mcp_sessions.c.last_seen_at).filter(mine).label("caller_oldest"),
                    func.min(mcp_sessions.c.last_seen_at).label("tenant_oldest"),
                    func.now().label("now"),
                ).where(mcp_sessions.c.tenant_id == principal.tenant_id, _live(settings.session_idle_seconds))
            )
        ).one()
        # Refused after the transaction, not raised in it (an error inside discards the connection).
        limits: tuple[tuple[SessionLimit, int, int, datetime | None], ...] = (
            ("caller", settings.max_sessions_per_caller, held.caller, held.caller_oldest),
            ("tenant", settings.max_sessions_per_tenant, held.tenant, held.tenant_oldest),
        )
        refused = next(
            (
                TooManySessions(
                    limit, allowed, settings.session_idle_seconds - (held.now - oldest).total_seconds()
                )
                for limit, allowed, count, oldest in limits
                if count >= allowed
            ),
            None,
        )
        if refused is None:
            await conn.execute(
                insert(mcp_sessions).values(
                    tenant_id=principal.tenant_id,
                    id_hash=session_key(session_id),
                    principal=principal.identity,
                    protocol_version=protocol_version,
                    client_params=document,
                )
            )
    if refused is not None:
        raise refused
    return session_id


async def resume_session(
    catalog: Catalog, principal: Principal, session_id: str, idle_seconds: float
) -> SessionRecord | None:
    """The session, touched, if it exists for this credential and was used within the idle time."""
    if principal.tenant_id is None:
        return None
    key = session_key(session_id)
    async with transaction(catalog.engine, TenantScope.tenant(principal.tenant_id)) as conn:
        row = (
            await conn.execute(
                update(mcp_sessions)
                .where(
                    mcp_sessions.c.tenant_id == principal.tenant_id,
                    mcp_sessions.c.id_hash == key,
                    mcp_sessions.c.principal == principal.identity,
                    _live(idle_seconds),
                )
                .values(last_seen_at=func.now())
                .returning(mcp_sessions)
            )
        ).one_or_none()
    return _record(row) if row is not None else None


async def touch_session(catalog: Catalog, tenant_id: int, key: bytes) -> bool:
    """Mark the session used now (an open GET stream keeps it alive); False if it is gone."""
    async with transaction(catalog.engine, TenantScope.tenant(tenant_id)) as conn:
        result = await conn.execute(
            update(mcp_sessions)
            .where(mcp_sessions.c.tenant_id == tenant_id, mcp_sessions.c.id_hash == key)
            .values(last_seen_at=func.now())
        )
    return result.rowcount > 0


async def session_exists(catalog: Catalog, tenant_id: int, key: bytes) -> bool:
    return await session_subscriptions(catalog, tenant_id, key) is not None


async def session_subscriptions(catalog: Catalog, tenant_id: int, key: bytes) -> dict[str, str] | None:
    """The session's subscriptions (sent -> canonical), or None if the session is gone."""
    async with transaction(catalog.engine, TenantScope.tenant(tenant_id)) as conn:
        value = (
            await conn.execute(
                select(mcp_sessions.c.subscriptions).where(
                    mcp_sessions.c.tenant_id == tenant_id, mcp_sessions.c.id_hash == key
                )
            )
        ).scalar_one_or_none()
    return value


async def end_session(catalog: Catalog, tenant_id: int, key: bytes) -> bool:
    """End the session everywhere (DELETE): its rows go, every process is told; False if unknown."""
    async with transaction(catalog.engine, TenantScope.tenant(tenant_id)) as conn:
        result = await conn.execute(
            delete(mcp_sessions).where(mcp_sessions.c.tenant_id == tenant_id, mcp_sessions.c.id_hash == key)
        )
        if result.rowcount:
            await _notify(conn, Notice(tenant_id, key, "ended"))
    return result.rowcount > 0


async def set_subscription(
    catalog: Catalog, tenant_id: int, key: bytes, uri: str, canonical: str | None
) -> None:
    """Add (``canonical`` given) or drop the session's subscription to ``uri`` as the client spelt it;
    one atomic update, so concurrent subscribes on different workers all count."""
    column = mcp_sessions.c.subscriptions
    value = column.op("||")(func.jsonb_build_object(uri, canonical)) if canonical else column.op("-")(uri)
    async with transaction(catalog.engine, TenantScope.tenant(tenant_id)) as conn:
        result = await conn.execute(
            update(mcp_sessions)
            .where(mcp_sessions.c.tenant_id == tenant_id, mcp_sessions.c.id_hash == key)
            .values(subscriptions=value.cast(JSONB))
        )
        if result.rowcount:
            await _notify(conn, Notice(tenant_id, key, "subscriptions"))


async def announce_stream(catalog: Catalog, tenant_id: int, key: bytes, token: str) -> None:
    """A GET stream opened for the session: any other process holding one for it closes its own
    (a session has one stream for server-initiated messages, so each message is sent once)."""
    async with transaction(catalog.engine, TenantScope.tenant(tenant_id)) as conn:
        await _notify(conn, Notice(tenant_id, key, "stream", token))


async def expect_answer(catalog: Catalog, tenant_id: int, key: bytes, request_id: str) -> None:
    """Record a server-initiated request of the session, before it is sent."""
    async with transaction(catalog.engine, TenantScope.tenant(tenant_id)) as conn:
        await conn.execute(
            insert(mcp_session_requests).values(tenant_id=tenant_id, session_hash=key, request_id=request_id)
        )


async def deliver_answer(
    catalog: Catalog, tenant_id: int, key: bytes, request_id: str, message: dict[str, Any]
) -> bool:
    """Store the client's answer to a pending request and tell the waiting process; False if no
    such request is waiting (unknown id, already answered, or the session is gone)."""
    async with transaction(catalog.engine, TenantScope.tenant(tenant_id)) as conn:
        result = await conn.execute(
            update(mcp_session_requests)
            .where(
                mcp_session_requests.c.tenant_id == tenant_id,
                mcp_session_requests.c.session_hash == key,
                mcp_session_requests.c.request_id == request_id,
                mcp_session_requests.c.response.is_(None),
            )
            .values(response=message)
        )
        if result.rowcount:
            await _notify(conn, Notice(tenant_id, key, "answer", request_id))
    return result.rowcount > 0


async def take_answer(catalog: Catalog, tenant_id: int, key: bytes, request_id: str) -> dict[str, Any] | None:
    """The client's answer, if it has arrived (the pending request is then forgotten)."""
    async with transaction(catalog.engine, TenantScope.tenant(tenant_id)) as conn:
        answer = (
            await conn.execute(
                delete(mcp_session_requests)
                .where(
                    mcp_session_requests.c.tenant_id == tenant_id,
                    mcp_session_requests.c.session_hash == key,
                    mcp_session_requests.c.request_id == request_id,
                    mcp_session_requests.c.response.is_not(None),
                )
                .returning(mcp_session_requests.c.response)
            )
        ).scalar_one_or_none()
    return answer


async def forget_request(catalog: Catalog, tenant_id: int, key: bytes, request_id: str) -> None:
    """Drop a pending request nobody waits for any more (the read gave up or was cancelled)."""
    async with transaction(catalog.engine, TenantScope.tenant(tenant_id)) as conn:
        await conn.execute(
            delete(mcp_session_requests).where(
                mcp_session_requests.c.tenant_id == tenant_id,
                mcp_session_requests.c.session_hash == key,
                mcp_session_requests.c.request_id == request_id,
            )
        )


async def sweep_sessions(catalog: Catalog, idle_seconds: float) -> int:
    """Remove every session unused for longer than the idle time (any process may run this)."""
    async with transaction(catalog.engine, TenantScope.platform()) as conn:
        rows = (
            await conn.execute(
                delete(mcp_sessions)
                .where(
                    mcp_sessions.c.last_seen_at
                    <= func.now() - func.make_interval(0, 0, 0, 0, 0, 0, idle_seconds)
                )
                .returning(mcp_sessions.c.tenant_id, mcp_sessions.c.id_hash)
            )
        ).all()
        for row in rows:
            await _notify(conn, Notice(row.tenant_id, row.id_hash, "ended"))
    return len(rows)


async def count_open_sessions(catalog: Catalog, idle_seconds: float) -> int:
    """Sessions of every tenant used within the idle time (the ones a client can still resume)."""
    async with transaction(catalog.engine, TenantScope.platform()) as conn:
        count = await conn.scalar(select(func.count()).select_from(mcp_sessions).where(_live(idle_seconds)))
    return int(count or 0)
