"""The one visibility rule: what a principal may see of a tenant's catalogue.

A resource or template is visible to a principal who administers its tenant, or who holds a scope
that some grant of that tenant gives over it: ``{uri}`` (one resource), ``{uriPrefix}`` (every URI
starting with that string: a plain string prefix, so ``file:///a`` covers ``file:///ab`` too) or
``{tag}`` (everything carrying the tag). Templates are matched on their literal prefix. A prefix
ending in ``/`` also covers the one URI that is the prefix without its ``/`` (``file:///a/``
covers the directory resource ``file:///a``, not ``file:///ab``): the loader yields that URI
beside the prefix as an exact-URI selector, so this module and the SQL functions see it as any
``{uri}`` grant and the rule is stated once, in ``catalog_scope_grants``.

``load_visibility`` reads the principal's grants once (``catalog_scope_grants``, the one loader
of grants); the resulting ``Visibility`` turns them into SQL predicates — prefix grants as index
ranges on the "C"-collated URI, never post-filters — used by every surface (MCP
list/read/templates/completion, admin listings, subscriptions), and can decide a single URI for
event fan-out by exactly the same rule.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    FromClause,
    Integer,
    Table,
    Text,
    TextualSelect,
    and_,
    any_,
    bindparam,
    false,
    literal,
    or_,
    text,
    true,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection

from catalog.core.principal import Principal
from catalog.core.uri_templates.parsing import InvalidTemplate, literal_prefix
from catalog.core.uris import uri_prefix_upper_bound

_BEYOND_EVERY_URI = "\U0010ffff" * 4

# One place for the sparse page's plan: ``catalog_visible_page`` (migration 0008), which the fast
# list path calls directly; here only the URIs of its page are kept, for the caller's own query.
_SPARSE_PAGE = (
    text(
        "SELECT page.uri FROM catalog_visible_page("
        ":tenant_id, false, :lows, :highs, :tags, :uris, :after, :limit) AS page"
    )
    .bindparams(
        bindparam("lows", type_=ARRAY(Text)),
        bindparam("highs", type_=ARRAY(Text)),
        bindparam("tags", type_=ARRAY(Text)),
        bindparam("uris", type_=ARRAY(Text)),
        bindparam("tenant_id", type_=BigInteger),
        bindparam("after", type_=Text),
        bindparam("limit", type_=Integer),
    )
    .columns(uri=Text)
)


# The one loader of a principal's grants (``catalog_scope_grants``, migration 0013), which the
# one-statement read (``catalog_plain_read``) calls too. Its URIs include, for each prefix ending in
# '/', that prefix without the '/' (migration 0018).
_SCOPE_GRANTS = (
    text("SELECT g.uris, g.prefixes, g.tags FROM catalog_scope_grants(:tenant_id, :scopes) AS g")
    .bindparams(bindparam("tenant_id", type_=BigInteger), bindparam("scopes", type_=ARRAY(Text)))
    .columns(uris=ARRAY(Text), prefixes=ARRAY(Text), tags=ARRAY(Text))
)


@dataclass(frozen=True)
class Visibility:
    tenant_id: int
    everything: bool
    uris: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()
    tags: frozenset[str] = frozenset()
    # Identifies the principal's standing (tenant, scopes, admin); cursors are bound to it.
    fingerprint: str = ""

    @property
    def nothing(self) -> bool:
        return not self.everything and not (self.uris or self.prefixes or self.tags)

    def _clause(
        self, uri_column: ColumnElement[str], tags_column: ColumnElement[list[str]]
    ) -> ColumnElement[bool]:
        if self.everything:
            return true()
        if self.nothing:
            return false()
        parts: list[ColumnElement[bool]] = []
        if self.uris:
            parts.append(uri_column == any_(_text_array(self.uris)))
        for prefix in self.prefixes:
            upper = uri_prefix_upper_bound(prefix)
            if upper is None:
                parts.append(uri_column >= literal(prefix, Text))
            else:
                parts.append(and_(uri_column >= literal(prefix, Text), uri_column < literal(upper, Text)))
        if self.tags:
            parts.append(tags_column.overlap(_text_array(self.tags)))
        return or_(*parts)

    def resources_clause(self, table: FromClause) -> ColumnElement[bool]:
        """Predicate over ``resources`` or an alias of it (tenant filter included)."""
        return and_(table.c.tenant_id == self.tenant_id, self._clause(table.c.uri, table.c.tags))

    def templates_clause(self, table: Table) -> ColumnElement[bool]:
        """Predicate over ``templates``: a uri grant names the template itself, a prefix its literal prefix."""
        if self.everything or self.nothing:
            return and_(table.c.tenant_id == self.tenant_id, self._clause(table.c.uri_template, table.c.tags))
        parts: list[ColumnElement[bool]] = []
        if self.uris:
            parts.append(table.c.uri_template == any_(_text_array(self.uris)))
        narrowed = Visibility(self.tenant_id, False, prefixes=self.prefixes, tags=self.tags)
        if self.prefixes or self.tags:
            parts.append(narrowed._clause(table.c.literal_prefix, table.c.tags))
        return and_(table.c.tenant_id == self.tenant_id, or_(*parts))

    def sparse_page_uris(self, *, after: str | None, limit: int) -> TextualSelect | None:
        """The URIs of one visible page as one ordered, limited index range scan per grant, or
        None when a single filtered scan is the better plan (everything visible).

        With sparse grants, one scan of the tenant filtered by every grant walks all the invisible
        rows between two visible ones; a scan per grant (a LATERAL join over the grants, passed as
        arrays so the statement is the same whatever the grants) reads only visible rows, and
        merging at most ``limit`` URIs from each is cheap. Tag grants scan ``resource_tags``.
        """
        if self.everything or self.nothing:
            return None
        lows, highs, tags, uris = self.page_selectors()
        return _SPARSE_PAGE.bindparams(
            tenant_id=self.tenant_id,
            lows=lows,
            highs=highs,
            tags=tags,
            uris=uris,
            after=after or "",
            limit=limit,
        )

    def page_selectors(self) -> tuple[list[str], list[str], list[str], list[str]]:
        """The grants as ``catalog_visible_page``'s arrays: each prefix as a URI range (low, high),
        the tags, the URIs."""
        lows = list(self.prefixes)
        highs = [uri_prefix_upper_bound(prefix) or _BEYOND_EVERY_URI for prefix in lows]
        return lows, highs, sorted(self.tags), sorted(self.uris)

    def allows(self, uri: str, tags: frozenset[str] | set[str] | tuple[str, ...] = ()) -> bool:
        """The same rule for one resource with these tags, for deciding an event without a query."""
        if self.everything:
            return True
        if uri in self.uris or any(uri.startswith(prefix) for prefix in self.prefixes):
            return True
        return bool(self.tags.intersection(tags))

    def allows_template(
        self, uri_template: str, tags: frozenset[str] | set[str] | tuple[str, ...] = ()
    ) -> bool:
        """The rule of :meth:`templates_clause` for one template with these tags."""
        if self.everything:
            return True
        if uri_template in self.uris:
            return True
        try:
            prefix = literal_prefix(uri_template)
        except InvalidTemplate:
            prefix = None
        if prefix is not None and any(prefix.startswith(p) for p in self.prefixes):
            return True
        return bool(self.tags.intersection(tags))


def _text_array(values: frozenset[str]) -> ColumnElement[Sequence[str]]:
    """``values`` as one array parameter, not an IN list: a statement's text is then the same for
    any number of grants, so it is compiled once and runs on a bare driver too (``db.statements``)."""
    return bindparam(None, sorted(values), type_=ARRAY(Text))


def principal_fingerprint(principal: Principal, tenant_id: int) -> str:
    """A short digest of what a caller sees of a tenant (its standing: kind, admin, scopes), not of
    who it is: a cursor carries it, so it is refused by any caller who would see another set, and
    accepted from a caller who sees exactly the same (``Principal.identity`` names the credential)."""
    return _fingerprint(tenant_id, principal.kind, principal.administers(tenant_id), principal.scopes)


@functools.lru_cache(maxsize=4096)
def _fingerprint(tenant_id: int, kind: str, admin: bool, scopes: frozenset[str]) -> str:
    # Cached: every fast-path request computes its caller's, and few standings are in use at once.
    standing = "|".join([str(tenant_id), kind, "admin" if admin else "", ",".join(sorted(scopes))])
    return hashlib.sha256(standing.encode()).hexdigest()[:16]


async def load_visibility(conn: AsyncConnection, principal: Principal, tenant_id: int) -> Visibility:
    """What ``principal`` sees of ``tenant_id``: the grants its scopes hold there, loaded by the one
    loader (``catalog_scope_grants``, as ``catalog_plain_read`` loads them) on ``conn`` (whose scope
    must include the tenant), under the one rule (:func:`visibility_of_grants`). Not loaded when
    that rule would not look at them."""
    if not grants_decide(principal, tenant_id):
        return visibility_of_grants(principal, tenant_id)
    row = (
        await conn.execute(_SCOPE_GRANTS, {"tenant_id": tenant_id, "scopes": sorted(principal.scopes)})
    ).one()
    return visibility_of_grants(
        principal, tenant_id, uris=row.uris or (), prefixes=row.prefixes or (), tags=row.tags or ()
    )


def grants_decide(principal: Principal, tenant_id: int) -> bool:
    """Whether the grants of ``principal``'s scopes decide what it sees of ``tenant_id``: not for an
    admin of the tenant (everything), nor for a principal of another tenant or without scopes
    (nothing)."""
    return (
        not principal.administers(tenant_id) and principal.tenant_id == tenant_id and bool(principal.scopes)
    )


def visibility_of_grants(
    principal: Principal,
    tenant_id: int,
    *,
    uris: Iterable[str] = (),
    prefixes: Iterable[str] = (),
    tags: Iterable[str] = (),
) -> Visibility:
    """What ``principal`` sees of ``tenant_id`` given the selectors of the grants its scopes hold in
    that tenant (ignored unless they decide, :func:`grants_decide`): the one rule, on the grants of
    :func:`load_visibility` and of the one-statement read (``catalog_plain_read``)."""
    fingerprint = principal_fingerprint(principal, tenant_id)
    if not grants_decide(principal, tenant_id):
        return Visibility(tenant_id, principal.administers(tenant_id), fingerprint=fingerprint)
    return Visibility(
        tenant_id,
        False,
        uris=frozenset(uris),
        prefixes=_minimal_prefixes(prefixes),
        tags=frozenset(tags),
        fingerprint=fingerprint,
    )


def _minimal_prefixes(prefixes: Iterable[str]) -> tuple[str, ...]:
    """Sorted prefixes with those covered by a shorter one dropped (fewer, disjoint index ranges)."""
    kept: list[str] = []
    for prefix in sorted(set(prefixes)):
        if not kept or not prefix.startswith(kept[-1]):
            kept.append(prefix)
    return tuple(kept)


__all__ = ["Visibility", "grants_decide", "load_visibility", "principal_fingerprint", "visibility_of_grants"]
