"""Which change events a watcher (a listen stream, a 2025-11-25 session) is told about.

Surface-free: the MCP adapter feeds it events from the hub and turns its :class:`Delivery` into
notifications. Decisions:

* Only what the watcher's principal may see fires, by the one visibility rule
  (:meth:`Visibility.allows` for URI and prefix grants; for tag grants, the stored row's tags, read
  through :meth:`Visibility.resources_clause`). A deleted resource visible only through a tag
  cannot be decided any more and does not fire ``updated``.
* ``list_changed`` (if asked for) on a visible resource being created or deleted, a visible
  template changing, any grant or tenant change (the visibility itself is then reloaded), and a
  ``gap`` (events may have been lost).
* ``updated`` for a subscribed URI that changed (created, updated or deleted: "read it again"), and
  for any descendant (:func:`catalog.core.uris.is_descendant`) of a subscribed URI that is a stored
  ``inode/directory``. Subscribed URIs that do not exist or are hidden are accepted and simply never
  fire (so a subscription does not reveal existence); they fire once they exist and are visible.
  After a ``gap``, every visible subscribed URI gets ``updated`` (level-triggered: re-read).
* Matching is on canonical URIs (:func:`catalog.core.uris.normalize_uri`); a subscribed URI that is
  not a valid URI is left out of what is honoured.
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

from catalog.core.principal import Principal
from catalog.core.reading import tenant_of
from catalog.core.schemas import DIRECTORY_MIME_TYPE
from catalog.core.service import Catalog
from catalog.core.uri_templates import InvalidTemplate, literal_prefix
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

    async def reload(self) -> None:
        async with self._conn() as conn:
            self.visibility = await load_visibility(conn, self.principal, self.tenant_id)
            self.directories = await _directories(conn, self.visibility, self.uris)

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
                await self.reload()
                list_changed = True
                if event.kind == "gap":
                    for uri in sorted(self.uris):
                        if await self._resource_visible(uri):
                            updated[uri] = None
                continue
            uri = event.uri
            if uri is None:
                continue
            if event.kind == "template":
                if self.list_changed and await self._template_visible(uri):
                    list_changed = True
                continue
            if event.kind != "resource":
                continue
            if uri in self.uris:
                await self._refresh_directory(uri, deleted=event.op == "deleted", seq=event.seq)
            watched = uri in self.uris or any(is_descendant(d, uri) for d in self.directories)
            creates_or_deletes = event.op in ("created", "deleted")
            if not (watched or (self.list_changed and creates_or_deletes)):
                continue
            if not await self._resource_visible(uri):
                continue
            if watched:
                updated[uri] = None
            if creates_or_deletes:
                list_changed = True
        return Delivery(list_changed=list_changed and self.list_changed, updated=tuple(updated))

    # -- visibility of one URI ------------------------------------------------------------------

    async def _resource_visible(self, uri: str) -> bool:
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
        if vis.everything:
            return True
        if vis.nothing:
            return False
        with contextlib.suppress(InvalidTemplate):
            prefix = literal_prefix(uri_template)
            if uri_template in vis.uris or any(prefix.startswith(p) for p in vis.prefixes):
                return True
        if not vis.tags:
            return False
        async with self._conn() as conn:
            row = await conn.execute(
                select(templates.c.id).where(
                    vis.templates_clause(templates), templates.c.uri_template == uri_template
                )
            )
            return row.first() is not None

    async def _refresh_directory(self, uri: str, *, deleted: bool, seq: int | None) -> None:
        if deleted:
            self.directories.discard(uri)
            return
        # Every watcher of this URI in the process asks about the same change: one query answers
        # them all. Visibility is not part of the answer; it is decided for each watcher after.
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
