"""The one module that knows the ``mcp==2.3.0`` SDK: everything protocol-specific lives here.

Both protocol eras are served on one URL by the SDK's low-level ``Server`` and its
``StreamableHTTPSessionManager`` (mounted as a Starlette ``Route`` and run in the app lifespan: a
plain ``mount()`` redirects ``/mcp`` and never starts the manager). The manager routes by the
``MCP-Protocol-Version`` header: 2026-07-28 requests are served statelessly (headers ``Mcp-Method``/
``Mcp-Name`` validated against the body, ``-32020``/``-32022``/``-32601`` with their HTTP statuses);
no header or a handshake version goes to a 2025-11-25 session (``initialize``, ``Mcp-Session-Id``,
GET stream, DELETE). Responses are chosen per era (:class:`PerEraSessionManager`): plain JSON for
modern requests (``subscriptions/listen`` is always a stream), SSE in 2025 sessions, whose POSTs
can carry the server-initiated ``elicitation/create`` a consent read needs.

Handlers (``catalog.mcp.handlers``) are thin translations over ``catalog.core``; this module adds:

* **Identity** (:class:`McpAuthASGI`): DNS-rebinding checks first (Host from
  ``CATALOG_ALLOWED_HOSTS``, any port; Origin from ``CATALOG_ALLOWED_ORIGINS``, any port; 421/403),
  then the principal from the bearer token (``catalog.auth.authenticate``) or, with no token, the
  public tenant (``CATALOG_PUBLIC_TENANT``); otherwise 401 with ``WWW-Authenticate: Bearer
  resource_metadata=".../.well-known/oauth-protected-resource/mcp"``. A credential not bound to a
  tenant (the platform admin token) gets 403: the agent surface browses exactly one tenant. The
  principal is bound to the 2025 session (``scope["user"]``), so a session id is useless with
  another credential.
* **Errors per era.** Not found is ``-32602 "Resource not found"`` with ``data.uri`` at 2026-07-28
  (HTTP 400; SEP-2164) and ``-32002`` with ``data.uri`` in 2025-11-25 sessions, which is what the
  2025-11-25 revision recommends and what clients of that era test for. Invisible and non-existent
  are the same error in both eras. A refused URI (syntax, traversal) is ``-32602`` in both.
* **Consent** (``consentMessage``). At 2026-07-28: an ``InputRequiredResult`` with one form
  elicitation (``accept`` boolean + ``purpose`` text) and a ``requestState`` sealed by the SDK's
  ``RequestStateBoundary`` (AES-256-GCM, key derived from ``CATALOG_SECRET_KEY``, 10 minute expiry,
  bound to method, URI and principal), so any worker can finish the round trip. Accept with a
  purpose -> the contents (``ttlMs 0``, private) and an audit row with the purpose. Accept without
  a purpose, or a retry without an answer -> a fresh ``InputRequiredResult`` (MRTR-9). Decline or
  cancel -> error :data:`CONSENT_DECLINED` (``-31001``, application-defined, ``data.uri`` and
  ``data.action``): never an empty ``contents``, which would mean "exists and is empty" (RES-18). A
  request whose ``clientCapabilities`` lack form elicitation -> ``-32021`` with
  ``data.requiredCapabilities = {"elicitation": {"form": {}}}``. In a 2025-11-25 session the same
  form goes out as a server-initiated ``elicitation/create`` on the read's SSE stream; a session
  without elicitation gets ``-32602`` naming the capability (2025 has no ``-32021``).
* **Cache hints** on every list/read result: ``cacheScope`` ``public`` only for anonymous callers
  (the public tenant), else ``private``, the same on every page; ``ttlMs`` :data:`READ_TTL_MS` for
  reads, :data:`LIST_TTL_MS` for resource pages, :data:`TEMPLATES_TTL_MS` for template pages
  (templates change rarely), 0 on the final result of a consent round trip (CACHE-8). Never on
  ``InputRequiredResult``. 2025 sessions get none (the SDK drops them per era).
* **Subscriptions.** ``subscriptions/listen`` (2026): the ack comes first and names exactly what is
  honoured (``resourcesListChanged`` and ``resourceSubscriptions``; tools/prompts are dropped);
  every notification carries ``_meta.subscriptionId``; only URIs visible to the stream's principal
  fire (``catalog.core.watching``); a subscribed ``inode/directory`` fires for its descendants.
  ``resources/subscribe``/``unsubscribe`` (2025 sessions) answer ``{}`` and push
  ``notifications/resources/updated`` (and ``list_changed``) on the session's GET stream. Events come
  from ``catalog.event_hub`` (``catalog.events.hub.EventHub``); ``listChanged``/``subscribe`` are
  advertised, in both eras, only while a hub is there to feed them.
* **Shutdown.** uvicorn waits for open connections *before* the lifespan shutdown, and listen
  streams never end on their own, so streams are closed when uvicorn starts to exit: a lifespan
  task watches the uvicorn server that installed the SIGTERM/SIGINT handler (``--workers N`` too),
  and :func:`uvicorn_server_class` does the same for servers run without signal handlers (threads,
  tests). Each listen gets its graceful final result (SUB-10); 2025 GET streams are closed.

Private SDK attributes used (pinned ``mcp==2.3.0``, covered by tests): ``ServerSession._connection``
(the per-2025-session object behind the per-request session) and
``StreamableHTTPSessionManager._server_instances`` (to close 2025 GET streams at shutdown),
``StreamableHTTPSessionManager._handle_request``/``_lifespan_state`` and
``mcp.server._streamable_http_modern.handle_modern_request`` (the per-era response mode).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import signal
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream
from mcp.server._streamable_http_modern import _sse_event as sse_event
from mcp.server._streamable_http_modern import handle_modern_request
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.caching import CacheHint
from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_METHOD_HEADER, MCP_PROTOCOL_VERSION_HEADER
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp_types import INVALID_PARAMS
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from catalog.auth import anonymous_principal, authenticate
from catalog.core.errors import Unauthenticated
from catalog.core.principal import Principal
from catalog.core.reading import is_public
from catalog.core.service import Catalog
from catalog.core.watching import Delivery, Watch, honoured_uris, open_watch
from catalog.db.engine import database_unavailable, request_connection
from catalog.settings import Settings

logger = logging.getLogger("catalog.mcp")

SERVER_NAME = "catalog"
SERVER_VERSION = "0.1.0"
MCP_PATH = "/mcp"
PRM_PATH = "/.well-known/oauth-protected-resource"

READ_TTL_MS = 10_000
LIST_TTL_MS = 10_000
TEMPLATES_TTL_MS = 60_000
DISCOVER_TTL_MS = 300_000
REQUEST_STATE_TTL_S = 600

LEGACY_RESOURCE_NOT_FOUND = -32002  # 2025-11-25's recommendation; the SDK has no constant for it
CONSENT_DECLINED = -31001  # application-defined (outside -32768..-32000, ERR-2)

PRINCIPAL_STATE_KEY = "catalog_principal"
PRINCIPAL_CACHE_SECONDS = 10.0


# --------------------------------------------------------------------------------------------------
# Request-scoped facts


def is_modern(ctx: ServerRequestContext[Any, Any]) -> bool:
    """The era of this request: the envelope version (2026) or the 2025 session's negotiated one."""
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def principal_of(ctx: ServerRequestContext[Any, Any]) -> Principal:
    """The principal :class:`McpAuthASGI` put in the ASGI scope of the POST carrying this request."""
    request: Request | None = ctx.request
    principal = request.scope.get("state", {}).get(PRINCIPAL_STATE_KEY) if request is not None else None
    if principal is None:
        raise MCPError(types.INTERNAL_ERROR, "No authenticated principal for this request")
    return principal


def principal_key(principal: Principal) -> str:
    """A stable identity string for binding sessions and request state to one credential."""
    return "|".join(
        [
            principal.kind,
            str(principal.tenant_id),
            str(principal.token_id),
            principal.subject or "",
            "admin" if principal.is_admin else "",
            ",".join(sorted(principal.scopes)),
        ]
    )


def cache_scope(principal: Principal) -> str:
    return "public" if is_public(principal) else "private"


def supports_form_elicitation(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Declared in this request's envelope (2026) or at ``initialize`` (2025); ``{}`` means form."""
    caps = ctx.session.client_capabilities
    if caps is None or caps.elicitation is None:
        return False
    return caps.elicitation.form is not None or caps.elicitation.url is None


def legacy_connection(ctx: ServerRequestContext[Any, Any]) -> Connection:
    """PITFALL (2.3.0): ``ServerSession`` is rebuilt per request; the per-session object is the
    ``Connection`` behind it, reachable only through the private ``_connection``."""
    return ctx.session._connection  # pyright: ignore[reportPrivateUsage]


def not_found(ctx: ServerRequestContext[Any, Any], uri: str) -> MCPError:
    code = INVALID_PARAMS if is_modern(ctx) else LEGACY_RESOURCE_NOT_FOUND
    return MCPError(code, "Resource not found", data={"uri": uri})


def request_state_key(signing_key: bytes) -> bytes:
    """A 32-byte key for request-state sealing, derived from (and separate from) the cursor key."""
    return hmac.new(signing_key, b"catalog request state v1", hashlib.sha256).digest()


def host_patterns(hosts: list[str]) -> list[str]:
    """Allowed Host values: each entry as given, and with any port when it names none."""
    out: list[str] = []
    for host in hosts:
        out.append(host)
        bare = host.rsplit("]", 1)[-1] if host.startswith("[") else host
        if ":" not in bare and not host.endswith(":*"):
            out.append(f"{host}:*")
    return out


def origin_patterns(origins: list[str]) -> list[str]:
    """Allowed Origin values: each entry as given, and with any port when it names none."""
    out: list[str] = []
    for origin in origins:
        out.append(origin)
        _, sep, authority = origin.partition("://")
        bare = authority.rsplit("]", 1)[-1] if authority.startswith("[") else authority
        if sep and ":" not in bare and not origin.endswith(":*"):
            out.append(f"{origin}:*")
    return out


# --------------------------------------------------------------------------------------------------
# The Server subclass: truthful capabilities per era


class CatalogServer(Server[Any]):
    """Capabilities follow what is really served.

    PITFALL: the session manager starts 2025 sessions without init options, so the default
    ``NotificationOptions()`` (``listChanged`` false) would apply; overriding
    ``create_initialization_options`` is the only hook. ``get_capabilities`` turns both resource
    bits off while no event hub can feed them (the SDK sets them whenever listen is served).
    """

    events_available: Callable[[], bool] = staticmethod(lambda: False)

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        options = notification_options or NotificationOptions(resources_changed=True)
        return super().create_initialization_options(options, experimental_capabilities, extensions)

    def get_capabilities(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
        *,
        protocol_version: str | None = None,
    ) -> types.ServerCapabilities:
        caps = super().get_capabilities(
            notification_options, experimental_capabilities, extensions, protocol_version=protocol_version
        )
        if caps.resources is not None and not self.events_available():
            caps.resources = types.ResourcesCapability(subscribe=False, list_changed=False)
        return caps


# --------------------------------------------------------------------------------------------------
# subscriptions/listen (2026-07-28)


def listen_sink(ctx: ServerRequestContext[Any, Any]) -> MemoryObjectSendStream[bytes] | None:
    """The byte stream a modern listen's SSE frames go into (the SDK's per-request dispatch context
    writes ``_sse_event`` frames there); None anywhere else, where the SDK's own path is used."""
    outbound = getattr(ctx.session, "_request_outbound", None)
    sink = getattr(outbound, "sink", None)
    return sink if is_modern(ctx) and isinstance(sink, MemoryObjectSendStream) else None


def delivery_notifications(delivery: Delivery, meta: dict[str, Any]) -> list[Any]:
    """The notifications one stream is sent for a delivery, ``meta`` (its subscriptionId) on each."""
    notifications: list[Any] = []
    if delivery.list_changed:
        notifications.append(
            types.ResourceListChangedNotification(params=types.NotificationParams(_meta=meta))
        )
    notifications.extend(
        types.ResourceUpdatedNotification(params=types.ResourceUpdatedNotificationParams(uri=uri, _meta=meta))
        for uri in delivery.updated
    )
    return notifications


class SharedFrames:
    """SSE frames of listen deliveries, serialised once for every stream that is sent the same.

    One update fans out to hundreds of streams per worker, and the SDK's per-stream path (two model
    dumps and a ``json.dumps`` per notification per stream) was most of a worker's time per update.
    Streams differ only by ``_meta.subscriptionId`` (their request id, often the same value), so
    frames are keyed by the delivery and that id; the last few are kept. The bytes are the SDK's
    own framing (``_sse_event``), as its dispatch context writes them.
    """

    def __init__(self, remember: int = 256) -> None:
        self._remember = remember
        self._frames: OrderedDict[tuple[Delivery, str], tuple[bytes, ...]] = OrderedDict()

    def frames(self, delivery: Delivery, meta: dict[str, Any]) -> tuple[bytes, ...]:
        key = (delivery, json.dumps(meta[SUBSCRIPTION_ID_META_KEY]))
        frames = self._frames.get(key)
        if frames is None:
            frames = self._frames[key] = tuple(
                sse_event(
                    types.JSONRPCNotification(jsonrpc="2.0", method=data["method"], params=data.get("params"))
                )
                for data in (
                    notification.model_dump(by_alias=True, mode="json", exclude_none=True)
                    for notification in delivery_notifications(delivery, meta)
                )
            )
            while len(self._frames) > self._remember:
                self._frames.popitem(last=False)
        return frames


class ListenStreams:
    """``subscriptions/listen``, modelled on the SDK's ``ListenHandler`` but with a narrowed ack
    (SUB-3), per-principal visibility, directory matching, and events from the catalog's hub."""

    def __init__(self, endpoint: McpEndpoint, max_streams: int = 1024) -> None:
        self._endpoint = endpoint
        self._max = max_streams
        self._scopes: set[anyio.CancelScope] = set()
        self._frames = SharedFrames()
        self.closed = False

    def __len__(self) -> int:
        return len(self._scopes)

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        sid = ctx.request_id
        if sid is None:
            raise MCPError(types.INVALID_REQUEST, "subscriptions/listen needs a request id")
        if len(self._scopes) >= self._max:
            raise MCPError(types.INTERNAL_ERROR, "Too many open subscriptions; try again later")
        principal = principal_of(ctx)
        requested = params.notifications
        hub = self._endpoint.hub
        live = hub is not None
        uris = honoured_uris(requested.resource_subscriptions or ()) if live else {}
        honoured = types.SubscriptionFilter(
            resources_list_changed=True if (live and requested.resources_list_changed) else None,
            resource_subscriptions=list(uris) if (live and requested.resource_subscriptions) else None,
        )
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: sid}  # same JSON type as the request id

        async def send(notification: Any) -> None:
            await ctx.session.send_notification(notification, related_request_id=sid)

        sink = listen_sink(ctx)

        async def deliver(delivery: Delivery) -> None:
            if sink is None:
                for notification in delivery_notifications(delivery, meta):
                    await send(notification)
                return
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                for frame in self._frames.frames(delivery, meta):
                    await sink.send(frame)

        scope = anyio.CancelScope()
        self._scopes.add(scope)
        try:
            with scope:
                if self.closed:
                    scope.cancel()
                subscription = hub.subscribe(principal.tenant_id) if hub is not None else None  # type: ignore[arg-type]
                async with contextlib.AsyncExitStack() as stack:
                    if subscription is not None:
                        await stack.enter_async_context(subscription)  # before the ack: nothing lost
                    watch = await open_watch(
                        self._endpoint.catalog,
                        principal,
                        list_changed=bool(honoured.resources_list_changed),
                        uris=uris.values(),
                    )
                    await send(
                        types.SubscriptionsAcknowledgedNotification(
                            params=types.SubscriptionsAcknowledgedNotificationParams(
                                notifications=honoured, _meta=meta
                            )
                        )
                    )
                    if subscription is None:
                        await anyio.sleep_forever()
                    async for batch in subscription:
                        await deliver(await watch.decide(batch))
        finally:
            self._scopes.discard(scope)
        return types.SubscriptionsListenResult(_meta=meta)  # graceful end (SUB-10)

    def close(self) -> None:
        """End every stream gracefully: each handler leaves its loop and returns its result."""
        self.closed = True
        for scope in list(self._scopes):
            scope.cancel()


# --------------------------------------------------------------------------------------------------
# resources/subscribe (2025-11-25 sessions)


@dataclass
class LegacySession:
    principal: Principal
    requested: dict[str, str] = field(default_factory=dict)  # as sent -> canonical
    watch: Watch | None = None


class LegacySubscriptions:
    """2025 sessions keyed by their ``Connection`` (one per ``Mcp-Session-Id``; its ``exit_stack``
    unwinds when the session ends: DELETE, idle timeout or shutdown). One pump task per tenant
    reads the hub and pushes to that tenant's sessions' GET streams."""

    def __init__(self, endpoint: McpEndpoint) -> None:
        self._endpoint = endpoint
        self.sessions: dict[Connection, LegacySession] = {}
        self._pumps: dict[int, anyio.CancelScope] = {}

    async def track(self, ctx: ServerRequestContext[Any, Any]) -> LegacySession | None:
        conn = legacy_connection(ctx)
        if conn.session_id is None:
            return None
        state = self.sessions.get(conn)
        if state is None:
            principal = principal_of(ctx)
            state = LegacySession(principal)
            state.watch = await open_watch(self._endpoint.catalog, principal, list_changed=True)
            self.sessions[conn] = state
            conn.exit_stack.callback(self.sessions.pop, conn, None)
            self._ensure_pump(principal.tenant_id)  # type: ignore[arg-type]
        return state

    def _ensure_pump(self, tenant_id: int) -> None:
        tg = self._endpoint.task_group
        hub = self._endpoint.hub
        if tg is None or hub is None or tenant_id in self._pumps:
            return
        scope = anyio.CancelScope()
        self._pumps[tenant_id] = scope
        tg.start_soon(self._pump, hub, tenant_id, scope)

    async def _pump(self, hub: Any, tenant_id: int, scope: anyio.CancelScope) -> None:
        try:
            with scope:
                async with hub.subscribe(tenant_id) as subscription:
                    async for batch in subscription:
                        for conn, state in list(self.sessions.items()):
                            if state.watch is None or state.principal.tenant_id != tenant_id:
                                continue
                            delivery = await state.watch.decide(batch)
                            if delivery.empty:
                                continue
                            with anyio.move_on_after(2):  # one stuck session must not stall the rest
                                if delivery.list_changed:
                                    await conn.send_resource_list_changed()
                                for uri in delivery.updated:
                                    await conn.send_resource_updated(uri)
        except Exception:
            logger.exception("2025-11-25 subscription pump for tenant %s failed", tenant_id)
        finally:
            self._pumps.pop(tenant_id, None)

    async def on_subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        state = await self.track(ctx)
        canonical = honoured_uris([params.uri]).get(params.uri)
        if canonical is None:
            raise MCPError(INVALID_PARAMS, "Invalid resource URI", data={"uri": params.uri})
        if state is not None and state.watch is not None:
            state.requested[params.uri] = canonical
            state.watch.add(canonical)
            await state.watch.reload()
        return types.EmptyResult()  # exactly {} on the wire (strict peers reject extra keys)

    async def on_unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        state = await self.track(ctx)
        if state is not None and state.watch is not None:
            canonical = state.requested.pop(params.uri, None)
            if canonical is not None and canonical not in state.requested.values():
                state.watch.discard(canonical)
        return types.EmptyResult()

    def close(self) -> None:
        for scope in list(self._pumps.values()):
            scope.cancel()


# --------------------------------------------------------------------------------------------------
# Identity: an ASGI wrapper in front of the SDK


class McpAuthASGI:
    def __init__(self, endpoint: McpEndpoint) -> None:
        self.endpoint = endpoint
        self.security = TransportSecurityMiddleware(endpoint.security)
        self._anonymous: tuple[float, Principal | None] | None = None

    def _resource_metadata_url(self, scope: Scope) -> str:
        return f"{base_url(scope)}{PRM_PATH}{MCP_PATH}"

    def _challenge(self, scope: Scope, status: int, error: str | None, detail: str) -> JSONResponse:
        value = f'Bearer resource_metadata="{self._resource_metadata_url(scope)}"'
        if error:
            value += f', error="{error}"'
        body = {"error": error or "unauthorized", "error_description": detail}
        return JSONResponse(body, status_code=status, headers={"WWW-Authenticate": value})

    async def _anonymous_principal(self, catalog: Catalog) -> Principal | None:
        cached = self._anonymous
        now = time.monotonic()
        if cached is not None and now - cached[0] < PRINCIPAL_CACHE_SECONDS:
            return cached[1]
        principal = await anonymous_principal(catalog)
        self._anonymous = (now, principal)
        return principal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.endpoint.session_app(scope, receive, send)
            return
        running = self.endpoint._catalog  # None until the lifespan starts (session_app says 503)
        if running is not None and is_short_modern_request(scope):
            # Answered inline (PerEraSessionManager), so the token lookup and the handler's
            # transactions share one pooled connection instead of checking out one each.
            async with request_connection(running.engine):
                await self._authenticated(scope, receive, send)
            return
        await self._authenticated(scope, receive, send)

    async def _authenticated(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Host/Origin first: a rebinding attempt is 421/403 whether or not it carries a token.
        rejected = await self.security.validate_request(Request(scope), is_post=False)
        if rejected is not None:
            await rejected(scope, receive, send)
            return
        catalog = self.endpoint.catalog
        if b"access_token=" in (scope.get("query_string") or b""):
            detail = "send the token in the Authorization header, never in the query"
            await self._challenge(scope, 401, "invalid_request", detail)(scope, receive, send)
            return
        authorization = Headers(scope=scope).get("authorization")
        try:
            principal = await authenticate(catalog, authorization)
            if principal is None:
                principal = await self._anonymous_principal(catalog)
        except Unauthenticated as exc:
            await self._challenge(scope, 401, "invalid_token", exc.detail)(scope, receive, send)
            return
        except Exception as exc:
            if not database_unavailable(exc):
                raise
            # Before the SDK: no request id was read, so the JSON-RPC error carries id null.
            logger.warning("mcp: database unavailable while authenticating: %r", exc)
            await unavailable_response()(scope, receive, send)
            return
        if principal is None:
            detail = "this endpoint needs a bearer token"
            await self._challenge(scope, 401, None, detail)(scope, receive, send)
            return
        if principal.tenant_id is None:
            detail = "this credential is not bound to a tenant; use a tenant token on /mcp"
            await self._challenge(scope, 403, "insufficient_scope", detail)(scope, receive, send)
            return
        scope.setdefault("state", {})[PRINCIPAL_STATE_KEY] = principal
        # Binds each 2025 session to the credential that opened it: the manager compares this on
        # every request of the session (another credential gets 404).
        scope["user"] = AuthenticatedUser(
            AccessToken(token="-", client_id=principal_key(principal), scopes=sorted(principal.scopes))
        )
        await self.endpoint.session_app(scope, receive, send)


UNAVAILABLE_MESSAGE = "Service unavailable: the database cannot be reached or is too slow; retry later"


def unavailable_error() -> MCPError:
    """A database failure inside a handler: ``-32603`` (the SDK sends it with HTTP 200)."""
    return MCPError(types.INTERNAL_ERROR, UNAVAILABLE_MESSAGE, data={"retryable": True})


def unavailable_response() -> JSONResponse:
    """A database failure before dispatch (authentication): HTTP 503 with a ``-32603`` body."""
    body = {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": types.INTERNAL_ERROR, "message": UNAVAILABLE_MESSAGE, "data": {"retryable": True}},
    }
    return JSONResponse(body, status_code=503, headers={"Retry-After": "1"})


def base_url(scope: Scope) -> str:
    """The server's own origin as the client addressed it (after the Host check)."""
    headers = Headers(scope=scope)
    host = headers.get("host")
    scheme = scope.get("scheme", "http")
    if not host:
        server = scope.get("server") or ("127.0.0.1", 80)
        host = f"{server[0]}:{server[1]}"
    return f"{scheme}://{host}"


def protected_resource_metadata(settings: Settings, scope: Scope) -> dict[str, Any]:
    """RFC 9728 metadata for ``/mcp``. ``authorization_servers`` names the configured OAuth issuer;
    without one, tokens are provisioned by the catalogue itself (CLI/admin API) and the list is
    empty: there is no authorization server a client could discover (AUTH-2 needs one only once
    OAuth is configured)."""
    resource = settings.oauth_audience or f"{base_url(scope)}{MCP_PATH}"
    return {
        "resource": resource.rstrip("/"),
        "authorization_servers": [settings.oauth_issuer] if settings.oauth_issuer else [],
        "bearer_methods_supported": ["header"],
        "resource_name": "catalog",
    }


# --------------------------------------------------------------------------------------------------
# The endpoint


def is_modern_request(scope: Scope) -> bool:
    """The SDK's own era rule (``StreamableHTTPSessionManager._handle_request``): a version header
    that is not a handshake version is a modern request (an unknown one is refused with -32022)."""
    version = Headers(scope=scope).get(MCP_PROTOCOL_VERSION_HEADER)
    return version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS


def is_short_modern_request(scope: Scope) -> bool:
    """A modern POST answered with one JSON response: anything but ``subscriptions/listen`` (the
    ``Mcp-Method`` header must name the body's method, HTTP-8, or the SDK refuses the request)."""
    if scope.get("method") != "POST" or not is_modern_request(scope):
        return False
    return Headers(scope=scope).get(MCP_METHOD_HEADER) != "subscriptions/listen"


class PerEraSessionManager(StreamableHTTPSessionManager):
    """The SDK's session manager with the response mode chosen per era.

    The SDK takes one ``json_response`` for both. In SSE mode every modern request runs its handler
    in a task group of its own with a memory stream and a disconnect watcher, in case it emits
    notifications; catalog's modern handlers never do, so plain JSON serves them directly (the read
    path's largest single SDK cost). 2025 sessions keep SSE for server-initiated requests.
    """

    async def _handle_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        if is_modern_request(scope) and self._task_group:
            await handle_modern_request(
                self.app, self.security_settings, True, self._lifespan_state, scope, receive, send
            )
            return
        await super()._handle_request(scope, receive, send)


class McpEndpoint:
    """The MCP endpoint of one app: the SDK server, its session manager and the identity wrapper.

    Built when the app is created (the route must exist before startup); :meth:`run` is the
    lifespan hook that receives the ``Catalog`` and runs the session manager.
    """

    def __init__(self, settings: Settings) -> None:
        from catalog.mcp import handlers

        self.settings = settings
        self._catalog: Catalog | None = None
        self.task_group: anyio.abc.TaskGroup | None = None
        self.listen = ListenStreams(self)
        self.legacy = LegacySubscriptions(self)
        self.server = CatalogServer(
            SERVER_NAME,
            version=SERVER_VERSION,
            title="Catalog",
            instructions=(
                "A catalogue of resources. List with resources/list, read with resources/read, expand "
                "resources/templates/list entries (completion/complete suggests argument values)."
            ),
            cache_hints={
                "server/discover": CacheHint(ttl_ms=DISCOVER_TTL_MS, scope="public"),
                "resources/list": CacheHint(ttl_ms=0, scope="private"),
                "resources/templates/list": CacheHint(ttl_ms=0, scope="private"),
                "resources/read": CacheHint(ttl_ms=0, scope="private"),
            },
            on_list_resources=handlers.list_resources(self),
            on_list_resource_templates=handlers.list_templates(self),
            on_read_resource=handlers.read_resource(self),
            on_completion=handlers.complete(self),
            on_subscribe_resource=self.legacy.on_subscribe,
            on_unsubscribe_resource=self.legacy.on_unsubscribe,
            on_subscriptions_listen=self.listen,
        )
        self.server.events_available = lambda: self.hub is not None  # type: ignore[method-assign]
        self.server.middleware.append(
            RequestStateBoundary(
                RequestStateSecurity(
                    keys=[request_state_key(settings.signing_key())],
                    ttl=REQUEST_STATE_TTL_S,
                    bind_principal=lambda ctx: principal_key(principal_of(ctx)),
                ),
                default_audience=SERVER_NAME,
            )
        )
        self.server.middleware.append(self._track_legacy_sessions)
        self.server.middleware.insert(0, self._database_errors)
        self.security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=host_patterns(settings.allowed_hosts),
            allowed_origins=origin_patterns(settings.allowed_origins),
        )
        self.session_manager: StreamableHTTPSessionManager | None = None
        self._session_app: StreamableHTTPASGIApp | None = None
        self.asgi_app = McpAuthASGI(self)
        self._closed = False

    @property
    def catalog(self) -> Catalog:
        if self._catalog is None:
            raise RuntimeError("the MCP endpoint is not running (the app lifespan has not started)")
        return self._catalog

    @property
    def hub(self) -> Any:
        """The catalog's event hub (``catalog.events.hub.EventHub``), once the events module runs."""
        return getattr(self._catalog, "event_hub", None) if self._catalog is not None else None

    async def session_app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._session_app is None:
            await JSONResponse({"error": "starting"}, status_code=503)(scope, receive, send)
            return
        await self._session_app(scope, receive, send)

    async def _database_errors(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """Outermost: a database failure in any handler is a clean ``-32603`` naming the cause
        (instead of the SDK's generic "Internal server error" and a traceback in the log)."""
        try:
            return await call_next(ctx)
        except MCPError:
            raise
        except Exception as exc:
            if not database_unavailable(exc):
                raise
            logger.warning("mcp %s: database unavailable: %r", ctx.method, exc)
            raise unavailable_error() from None

    async def _track_legacy_sessions(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """Register every 2025 session on its first request, so ``list_changed`` reaches sessions
        that never subscribed."""
        if not is_modern(ctx) and ctx.request is not None and ctx.method != "initialize":
            try:
                await self.legacy.track(ctx)
            except Exception:
                logger.exception("could not track a 2025-11-25 session")
        return await call_next(ctx)

    @contextlib.asynccontextmanager
    async def run(self, catalog: Catalog) -> AsyncIterator[None]:
        """The lifespan hook: the session manager (both eras), the 2025 pumps, the exit watcher."""
        self._catalog = catalog
        self._closed = False
        self.listen.closed = False
        self.legacy.sessions.clear()
        manager = PerEraSessionManager(
            app=self.server,
            json_response=False,  # 2025 sessions; modern requests are answered with plain JSON
            stateless=False,
            security_settings=self.security,
            session_idle_timeout=30 * 60,
        )
        self.session_manager = manager
        async with manager.run(), anyio.create_task_group() as tg:
            self.task_group = tg
            self._session_app = StreamableHTTPASGIApp(manager)
            tg.start_soon(self._watch_uvicorn_exit)
            try:
                yield
            finally:
                await self.close_streams()
                self._session_app = None
                self.task_group = None
                tg.cancel_scope.cancel()

    async def close_streams(self) -> None:
        """End listen streams (graceful result) and 2025 GET streams; idempotent. Must run before
        uvicorn waits for connections, which it does before the lifespan shutdown."""
        if self._closed:
            return
        self._closed = True
        self.listen.close()
        self.legacy.close()
        manager = self.session_manager
        if manager is not None:
            for transport in list(manager._server_instances.values()):  # pyright: ignore[reportPrivateUsage]
                transport.close_standalone_sse_stream()
        await anyio.lowlevel.checkpoint()

    async def _watch_uvicorn_exit(self) -> None:
        """uvicorn installs ``Server.handle_exit`` as the SIGTERM/SIGINT handler of each worker's main
        thread, so the server is the handler's ``__self__`` (the trick sse-starlette uses)."""
        server = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
        if server is None or not hasattr(server, "should_exit"):
            return  # not under a signal-handling uvicorn: see uvicorn_server_class
        while not server.should_exit:  # noqa: ASYNC110 - a flag of uvicorn's, not an event of ours
            await anyio.sleep(0.1)
        await self.close_streams()


def uvicorn_server_class(endpoint: McpEndpoint) -> type:
    """A ``uvicorn.Server`` whose shutdown first closes the endpoint's streams (for servers run
    without signal handlers: threads, tests)."""
    import uvicorn

    class CatalogUvicornServer(uvicorn.Server):
        async def shutdown(self, sockets: Any = None) -> None:
            await endpoint.close_streams()
            await super().shutdown(sockets)

    return CatalogUvicornServer
