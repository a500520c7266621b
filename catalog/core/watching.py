"""Which change events a watcher (a listen stream, a 2025-11-25 session) is told about.

Surface-free: the MCP adapter feeds it events from the hub and turns its :class:`Delivery` into
notifications. Decisions:

* Only what the watcher's principal may see fires, by the one visibility rule. For each resource
  or template event the watcher decides whether the URI was visible **before** the change and is
  visible **after** it (:meth:`Visibility.allows` with the row's tags before and after, which the
  event carries: no query, whatever rule makes it visible, also for a row already deleted). Events
  without tags (a payload from before migration 0004) fall back to the stored row.
* ``list_changed`` (if asked for) whenever the visible set changes: a visible resource created or
  deleted, one becoming visible or hidden (a tag added or removed, RES-16), a template visible
  before or after changing, any grant or tenant change (the visibility itself is then reloaded), and
  a ``gap`` (events may have been lost).
* ``updated`` for a subscribed URI that changed while visible before or after ("read it again":
  created, updated, deleted, shown or hidden), and for any descendant
  (:func:`catalog.core.uris.is_descendant`) of a subscribed URI that is a stored ``inode/directory``
  **this watcher may see** (SUB-6). Subscribed URIs that do not exist or are hidden are accepted and
  never fire, directory or not (so a subscription reveals nothing); they fire once they exist and
  are visible. After a ``gap``, every visible subscribed URI gets ``updated`` (level-triggered).
* Matching is on canonical URIs (:func:`catalog.core.uris.normalize_uri`). A listen naming a URI
  that is not a valid URI, or more than :data:`MAX_LISTEN_URIS`, is refused as a whole
  (:func:`subscription_uris`).
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from catalog.core.catalog import Catalog
from catalog.core.principal import Principal
from catalog.core.reading import tenant_of
from catalog.core.schemas.base import DIRECTORY_MIME_TYPE
from catalog.core.uris import InvalidUri, is_descendant, normalize_uri
from catalog.core.visibility import Visibility, load_visibility
from catalog.db.engine import TenantScope, transaction
from catalog.db.models import resources, templates


class Event(Protocol):
    """The part of ``catalog.events.hub.ChangeEvent`` this module reads."""

    @property
    def tenant_id(self) -> int: ...
    @property
    def kind(self) -> str: ...  # 'resource' | 'template' | 'grant' | 'tenant' | 'gap'
    @property
    def uri(self) -> str | None: ...
    @property
    def op(self) -> str: ...  # 'created' | 'updated' | 'deleted'
    @property
    def seq(self) -> int | None: ...
    @property
    def tags_before(self) -> tuple[str, ...] | None: ...  # None: no row before (or not known)
    @property
    def tags_after(self) -> tuple[str, ...] | None: ...  # None: no row after (or not known)


@dataclass(frozen=True)
class Delivery:
    list_changed: bool = False
    updated: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.list_changed and not self.updated


def honoured_uris(requested: Iterable[str]) -> dict[str, str]:
    """Requested subscription URIs that are valid, each mapped to its canonical form (order kept)."""
    out: dict[str, str] = {}
    for uri in requested:
        if not isinstance(uri, str) or uri in out:
            continue
        try:
            out[uri] = normalize_uri(uri)
        except InvalidUri:
            continue
    return out


# The most URIs one listen may subscribe to (``resourceSubscriptions``, as sent). Each is matched
# against every change of the tenant and looked up when the stream opens and when its grants
# change; past this a listen is refused with -32602 rather than left to fail in the database.
MAX_LISTEN_URIS = 10_000
MAX_NAMED_INVALID = 10  # invalid URIs a refusal quotes (it says how many there were in all)


class SubscriptionsRefused(Exception):
    """A listen's ``resourceSubscriptions`` refused as a whole (too many, or not all valid URIs):
    the request is invalid params, nothing is subscribed."""

    def __init__(self, detail: str, data: dict[str, object]) -> None:
        super().__init__(detail)
        self.detail = detail
        self.data = data


def subscription_uris(requested: Sequence[str]) -> dict[str, str]:
    """A listen's subscribed URIs, each mapped to its canonical form (order kept, duplicates once);
    :class:`SubscriptionsRefused` past :data:`MAX_LISTEN_URIS` or when any is not a valid URI. A
    URI the listen cannot honour is refused by name rather than left out of the acknowledgement,
    where a client matching notifications to what it sent would wait for it in vain."""
    if len(requested) > MAX_LISTEN_URIS:
        raise SubscriptionsRefused(
            f"A listen may subscribe to at most {MAX_LISTEN_URIS} URIs; this one names {len(requested)}",
            {"limit": MAX_LISTEN_URIS, "count": len(requested)},
        )
    out: dict[str, str] = {}
    invalid: list[str] = []
    for uri in requested:
        if uri in out:
            continue
        try:
            out[uri] = normalize_uri(uri)
        except InvalidUri:
            invalid.append(uri)
    if invalid:
        named = invalid[:MAX_NAMED_INVALID]
        raise SubscriptionsRefused(
            f"resourceSubscriptions holds {len(invalid)} URI(s) that are not valid URIs: "
            + ", ".join(repr(uri[:200]) for uri in named),
            {"invalidUris": named, "invalidCount": len(invalid)},
        )
    return out


@dataclass
class Watch:
    catalog: Catalog
    principal: Principal
    list_changed: bool
    uris: frozenset[str]  # canonical
    visibility: Visibility
    directories: set[str] = field(default_factory=set)

    @property
    def tenant_id(self) -> int:
        return self.visibility.tenant_id

    async def reload(self) -> set[str]:
        """Load the principal's visibility again (its grants or tenant changed); the subscribed
        URIs it shows or hides (stored resources visible before and not after, or after and not
        before), in one transaction."""
        async with self._conn() as conn:
            shown_before = await _visible(conn, self.visibility, self.uris)
            self.visibility = await load_visibility(conn, self.principal, self.tenant_id)
            self.directories = await _directories(conn, self.visibility, self.uris)
            return shown_before ^ await _visible(conn, self.visibility, self.uris)

    def add(self, uri: str) -> None:
        self.uris = self.uris | {uri}

    def discard(self, uri: str) -> None:
        self.uris = self.uris - {uri}
        self.directories.discard(uri)

    async def decide(self, batch: Sequence[Event]) -> Delivery:
        """What to tell this watcher about a batch of events (at most one ``list_changed``)."""
        list_changed = False
        updated: dict[str, None] = {}
        for event in batch:
            if event.tenant_id != self.tenant_id:
                continue
            if event.kind in ("grant", "tenant", "gap"):
                changed = await self.reload()
                list_changed = True
                if event.kind == "gap":
                    changed = {uri for uri in self.uris if await self._resource_visible(uri)}
                for uri in sorted(changed):
                    updated[uri] = None  # shown or hidden by the grants, as a tag flip would
                continue
            uri = event.uri
            if uri is None:
                continue
            if event.kind == "template":
                if self.list_changed and any(await self._template_visibility(event)):
                    list_changed = True
                continue
            if event.kind != "resource":
                continue
            subscribed = uri in self.uris
            under_directory = any(is_descendant(d, uri) for d in self.directories)
            if not (subscribed or under_directory):
                if not self.list_changed:
                    continue
                if event.op == "updated" and event.tags_before == event.tags_after:
                    continue  # same URI, same tags: the visible set cannot have changed (the cheap case)
            before, after = await self._resource_visibility(event)
            if subscribed:
                await self._refresh_directory(uri, visible=after, seq=event.seq)
            if not (before or after):
                continue  # hidden throughout: nothing about it reaches this watcher
            if subscribed or under_directory:
                updated[uri] = None
            if before != after or event.op != "updated":
                list_changed = True  # the visible set changed (created, deleted, shown, hidden)
        return Delivery(list_changed=list_changed and self.list_changed, updated=tuple(updated))

    # -- visibility of one URI ------------------------------------------------------------------

    async def _resource_visibility(self, event: Event) -> tuple[bool, bool]:
        """Whether the event's resource was visible to this watcher before the change, and after."""
        uri = event.uri
        assert uri is not None
        before_tags, after_tags = event.tags_before, event.tags_after
        if before_tags is None and after_tags is None:
            # Tags not known (an event from before migration 0004): the stored row decides.
            visible = await self._resource_visible(uri)
            return visible and event.op != "created", visible and event.op != "deleted"
        vis = self.visibility
        return (
            before_tags is not None and vis.allows(uri, before_tags),
            after_tags is not None and vis.allows(uri, after_tags),
        )

    async def _template_visibility(self, event: Event) -> tuple[bool, bool]:
        uri_template = event.uri
        assert uri_template is not None
        before_tags, after_tags = event.tags_before, event.tags_after
        if before_tags is None and after_tags is None:
            visible = await self._template_visible(uri_template)
            return visible, visible
        vis = self.visibility
        return (
            before_tags is not None and vis.allows_template(uri_template, before_tags),
            after_tags is not None and vis.allows_template(uri_template, after_tags),
        )

    async def _resource_visible(self, uri: str) -> bool:
        """Whether the stored resource at ``uri`` is visible now (a query if tags could decide)."""
        vis = self.visibility
        if vis.allows(uri):
            return True
        if vis.nothing or not vis.tags:
            return False
        async with self._conn() as conn:
            row = await conn.execute(
                select(resources.c.id).where(vis.resources_clause(resources), resources.c.uri == uri)
            )
            return row.first() is not None

    async def _template_visible(self, uri_template: str) -> bool:
        vis = self.visibility
        if vis.allows_template(uri_template):
            return True
        if vis.nothing or not vis.tags:
            return False
        async with self._conn() as conn:
            row = await conn.execute(
                select(templates.c.id).where(
                    vis.templates_clause(templates), templates.c.uri_template == uri_template
                )
            )
            return row.first() is not None

    async def _refresh_directory(self, uri: str, *, visible: bool, seq: int | None) -> None:
        if not visible:
            # Deleted, or hidden from this watcher: its descendants must not fire through it, or a
            # subscription to a hidden directory would reveal it (and what lies under it).
            self.directories.discard(uri)
            return
        # Every watcher of this URI in the process asks about the same change: one query answers
        # them all. Visibility is not part of the answer; it was decided for this watcher above.
        if await _directory_probe(self.catalog.engine).is_directory(self.tenant_id, uri, seq):
            self.directories.add(uri)
        else:
            self.directories.discard(uri)

    @contextlib.asynccontextmanager
    async def _conn(self) -> AsyncIterator[AsyncConnection]:
        async with transaction(self.catalog.engine, TenantScope.tenant(self.tenant_id)) as conn:
            yield conn


class DirectoryProbe:
    """Whether a stored resource is an ``inode/directory`` just after change ``seq``, asked once per
    (tenant, uri, seq) however many watchers ask; the last answers are remembered (bounded)."""

    def __init__(self, engine: AsyncEngine, *, remember: int = 1024) -> None:
        self._engine = engine
        self._remember = remember
        self._answers: OrderedDict[tuple[int, str, int], asyncio.Future[bool]] = OrderedDict()

    async def is_directory(self, tenant_id: int, uri: str, seq: int | None) -> bool:
        if seq is None:
            return await self._query(tenant_id, uri)
        key = (tenant_id, uri, seq)
        answer = self._answers.get(key)
        if answer is None:
            answer = asyncio.ensure_future(self._query(tenant_id, uri))
            self._answers[key] = answer
            while len(self._answers) > self._remember:
                self._answers.popitem(last=False)
        if answer.done() and not answer.cancelled() and answer.exception() is None:
            return answer.result()  # the common case once the first watcher asked: no await at all
        try:
            return await asyncio.shield(answer)
        except Exception:
            self._answers.pop(key, None)
            raise

    async def _query(self, tenant_id: int, uri: str) -> bool:
        async with transaction(self._engine, TenantScope.tenant(tenant_id)) as conn:
            found = await conn.execute(
                select(resources.c.id).where(
                    resources.c.tenant_id == tenant_id,
                    resources.c.uri == uri,
                    resources.c.mime_type == DIRECTORY_MIME_TYPE,
                )
            )
            return found.first() is not None


_probes: weakref.WeakKeyDictionary[AsyncEngine, DirectoryProbe] = weakref.WeakKeyDictionary()


def _directory_probe(engine: AsyncEngine) -> DirectoryProbe:
    probe = _probes.get(engine)
    if probe is None:
        probe = _probes[engine] = DirectoryProbe(engine)
    return probe


async def _visible(conn: AsyncConnection, visibility: Visibility, uris: frozenset[str]) -> set[str]:
    """Which of ``uris`` are stored resources ``visibility`` shows (one query, none without URIs)."""
    if not uris or visibility.nothing:
        return set()
    rows = await conn.execute(
        select(resources.c.uri).where(
            visibility.resources_clause(resources), resources.c.uri.in_(sorted(uris))
        )
    )
    return set(rows.scalars())


async def _directories(conn: AsyncConnection, visibility: Visibility, uris: frozenset[str]) -> set[str]:
    if not uris or visibility.nothing:
        return set()
    rows = await conn.execute(
        select(resources.c.uri).where(
            visibility.resources_clause(resources),
            resources.c.uri.in_(sorted(uris)),
            resources.c.mime_type == DIRECTORY_MIME_TYPE,
        )
    )
    return set(rows.scalars())


async def open_watch(
    catalog: Catalog, principal: Principal, *, list_changed: bool, uris: Iterable[str] = ()
) -> Watch:
    """A watch for ``principal``'s tenant over canonical ``uris``."""
    tenant_id = tenant_of(principal)
    canonical = frozenset(uris)
    async with transaction(catalog.engine, TenantScope.tenant(tenant_id)) as conn:
        visibility = await load_visibility(conn, principal, tenant_id)
        directories = await _directories(conn, visibility, canonical)
    return Watch(catalog, principal, list_changed, canonical, visibility, directories)
