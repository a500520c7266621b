"""``completion/complete`` for resource-template arguments: values taken from stored URIs.

The values offered for argument ``a`` of template ``T`` are the values ``a`` takes in the stored
resources the caller may see whose URI matches ``T``, agrees with every already-resolved argument
(``context.arguments``) and starts with the partial value. The candidate rows come from SQL: the
visibility predicate plus the index range of :func:`catalog.core.uri_templates.completion_candidates`
(the template expanded as far as the known values allow); the template match is then applied to
those rows' URIs. So a caller never gets a value from a URI it could not list (COMP-6).

Results: at most :data:`MAX_VALUES` (100) distinct values, prefix matches in byte order; ``total``
is the exact number of distinct values when the scan finished within :data:`MAX_SCANNED_ROWS`
candidate rows (else it is omitted and ``has_more`` is true).

When the argument is the template's first expression, a simple ``{name}`` followed by a reserved
character (``file:///repo/{dir}/...``), the rows are not scanned one by one: every URI with the same
value shares the text up to that separator, so one recursive query (a loose index scan) jumps from
the first URI of each value to the first URI of the next, at most :data:`MAX_GROUPS` jumps. A value
whose first URI does not match the template has the rest of its range scanned row by row (bounded
as above), so the values are the same as a full scan's. Over a million URIs a first-segment
completion then costs what a page costs, not 20 batches of rows.

The template is named by its exact ``uriTemplate`` and must itself be visible; otherwise
:class:`UnknownTemplate` (as for one that does not exist).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg
from sqlalchemy import (
    ColumnElement,
    Integer,
    Select,
    Text,
    and_,
    bindparam,
    case,
    exists,
    func,
    literal,
    literal_column,
    select,
    text,
    true,
)

from catalog.core.catalog import Catalog
from catalog.core.direct.standing import fast_standing, remember_visibility, standing_arguments, standing_of
from catalog.core.errors import InvalidInput, NotFound
from catalog.core.principal import Principal
from catalog.core.reading import tenant_of
from catalog.core.uri_templates.completion import completion_candidates
from catalog.core.uri_templates.parsing import InvalidTemplate, parse_template
from catalog.core.visibility import Visibility, load_visibility
from catalog.db.driver import scoped_driver
from catalog.db.engine import TenantScope, transaction
from catalog.db.models import resources, templates
from catalog.db.statements import DriverStatement, driver_statement

MAX_VALUES = 100
MAX_SCANNED_ROWS = 20_000
# Jumps of one loose index scan (distinct first-segment values): one more than a completion shows,
# which is all it takes to know there are more (``total`` is then omitted).
MAX_GROUPS = MAX_VALUES + 1
_BATCH = 1000
# Characters simple ``{name}`` expansion always percent-encodes, so a value never contains them.
_RESERVED = set(":/?#[]@!$&'()*+,;=")


class UnknownTemplate(NotFound):
    def __init__(self, uri_template: str) -> None:
        super().__init__("Unknown resource template")
        self.uri = uri_template


class InvalidArgument(InvalidInput):
    pass


def _storable(text: str) -> bool:
    """Whether PostgreSQL text can hold ``text`` (else comparing it in SQL is an error, not a miss)."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True)
class Completion:
    values: list[str]
    total: int | None
    has_more: bool


async def complete_argument(
    catalog: Catalog,
    principal: Principal,
    uri_template: str,
    argument: str,
    partial: str,
    context_arguments: Mapping[str, str] | None = None,
    *,
    visibility: Visibility | None = None,
) -> Completion:
    """Values for ``argument`` of a visible template, from the visible resources' URIs;
    ``visibility``: the principal's, when the caller has already loaded it."""
    tenant_id = tenant_of(principal)
    if not _storable(uri_template):
        raise UnknownTemplate(uri_template)  # no stored template can hold a NUL or a lone surrogate
    if visibility is None or visibility.tenant_id != tenant_id:
        async with transaction(catalog.engine, TenantScope.tenant(tenant_id)) as conn:
            visibility = await load_visibility(conn, principal, tenant_id)
    if visibility.nothing:
        raise UnknownTemplate(uri_template)
    # Refused: said only once the template is known to be visible.
    plan, refused = _candidates(uri_template, argument, partial, context_arguments)
    # Nothing is raised inside the transaction: an error there discards its connection.
    async with scoped_driver(catalog.engine, TenantScope.tenant(tenant_id)) as driver:
        if plan is None:
            check = driver_statement(_template_statement(visibility))
            known = await driver.fetchval(check.sql, *check.arguments({"uri_template": uri_template}))
            scan = None
        else:
            scan = await _scanned(_Scan(driver, visibility, plan, uri_template), argument)
            known = scan.template_known
    if not known:
        raise UnknownTemplate(uri_template)
    if scan is None:  # no plan
        raise InvalidArgument(refused)
    return scan.completion()


@dataclass(frozen=True)
class FastCompletion:
    principal: Principal
    completion: Completion


async def fast_completion(
    catalog: Catalog,
    uri_template: str,
    argument: str,
    partial: str,
    context_arguments: Mapping[str, str] | None = None,
    *,
    token: str | None = None,
    principal: Principal | None = None,
) -> FastCompletion | None:
    """:func:`complete_argument` for an opaque ``token`` or an authenticated tenant ``principal``;
    None when the full path must answer (an unknown, revoked or expired token; an unknown template
    or a refused argument, whose errors are the full path's).

    A credential whose visibility is remembered (``standing.remember_visibility``) is authenticated
    by the scan's first statement, in the transaction bound to that visibility's tenant: BEGIN, one
    statement, COMMIT. The scan is used only if the visibility computed from the grants that
    statement returned is the remembered one; otherwise (a credential's first completion or list
    page, its grants changed) the authentication and grants come first, in a statement of their
    own (``standing.fast_standing``), then :func:`complete_argument`."""
    credential = standing_arguments(token, principal)
    if credential is None or not _storable(uri_template):
        return None
    plan, _ = _candidates(uri_template, argument, partial, context_arguments)
    if plan is None:
        return None  # unknown or refused: the full path's error either way
    guess = catalog.page_visibilities.get(credential)
    if guess is not None and not guess.nothing:
        authentication = _Authentication(credential, principal, guess)
        async with scoped_driver(catalog.engine, TenantScope.tenant(guess.tenant_id)) as driver:
            scan = await _scanned(_Scan(driver, guess, plan, uri_template, authentication), argument)
        if authentication.standing is None:
            return None
        principal, visibility = authentication.standing
        if visibility == guess:
            return FastCompletion(principal, scan.completion()) if scan.template_known else None
    else:
        found = await fast_standing(catalog, None, token, principal)
        if found is None:
            return None
        principal, visibility, _ = found
    remember_visibility(catalog, credential, visibility)
    try:
        completion = await complete_argument(
            catalog, principal, uri_template, argument, partial, context_arguments, visibility=visibility
        )
    except (UnknownTemplate, InvalidArgument):
        return None
    return FastCompletion(principal, completion)


def _candidates(
    uri_template: str, argument: str, partial: str, context_arguments: Mapping[str, str] | None
) -> tuple[Any, str]:
    """The candidate range of ``argument``'s values (``completion_candidates``), or None and why
    the template or the argument is refused."""
    try:
        return completion_candidates(parse_template(uri_template), argument, partial, context_arguments), ""
    except InvalidTemplate as exc:
        return None, exc.reason


class _Authentication:
    """A credential authenticated by a scan's first statement (``catalog_plain_read``'s row beside
    the scan's URIs), the scan going on only while the credential's visibility is the one it was
    built for: no row (an unknown, revoked or expired token) or other grants stop it."""

    def __init__(
        self, credential: tuple[object, ...], principal: Principal | None, guess: Visibility
    ) -> None:
        self.values = dict(zip(_CREDENTIAL_PARAMETERS, credential, strict=True))
        self.principal = principal
        self.guess = guess
        self.standing: tuple[Principal, Visibility] | None = None

    def admits(self, row: Any) -> bool:
        """Whether the scan may use what it read with the first statement's ``row``."""
        self.standing = standing_of(row, self.principal)
        return self.standing is not None and self.standing[1] == self.guess


class _Scan:
    """Candidate rows read in URI order, batch by batch, within the ``MAX_SCANNED_ROWS`` budget;
    its first statement also checks that the template is visible (``template_known``)."""

    def __init__(
        self,
        driver: asyncpg.Connection,
        visibility: Visibility,
        plan: Any,
        uri_template: str,
        authentication: _Authentication | None = None,
    ) -> None:
        self.driver = driver
        self.visibility = visibility
        self.plan = plan
        self.uri_template = uri_template
        self.authentication = authentication  # the credential the first statement authenticates
        self.template_known: bool | None = None  # None until the first statement has run
        self.values: set[str] = set()
        self.scanned = 0
        self.finished = True

    async def uris(self, scan: Select[Any], values: dict[str, Any]) -> list[str]:
        """The URIs ``scan`` selects. The scan's first statement also checks the template (and
        authenticates the credential, with an ``authentication``), so that costs no round trip of
        its own; when the template is not visible, nothing is read, and nothing more is."""
        if self.template_known is not None:
            query = driver_statement(scan)
            return [row[0] for row in await self.driver.fetch(query.sql, *query.arguments(values))]
        values = {**values, "uri_template": self.uri_template}
        checked = _if_template_visible(self.visibility, scan)
        if self.authentication is None:
            query = driver_statement(checked)
            found = await self.driver.fetchval(query.sql, *query.arguments(values))
        else:
            query = _authenticated(checked)
            row = await self.driver.fetchrow(
                query.sql, *query.arguments({**values, **self.authentication.values})
            )
            # admits() is asked even of no row: it records the standing (None) the scan goes on with.
            found = row["uris"] if self.authentication.admits(row) and row is not None else None
        self.template_known = found is not None
        return found or []

    def completion(self) -> Completion:
        ordered = sorted(self.values)
        return Completion(
            values=ordered[:MAX_VALUES],
            total=len(ordered) if self.finished else None,
            has_more=len(ordered) > MAX_VALUES or not self.finished,
        )

    def range_bounds(self) -> dict[str, str]:
        """The candidate range's bind values (see :func:`_candidate_range`)."""
        bounds = {"prefix": self.plan.uri_prefix}
        if self.plan.upper_bound is not None:
            bounds["upper"] = self.plan.upper_bound
        return bounds

    async def rows(self, *, after: str | None, below: str | None, until_match: bool = False) -> None:
        """Extract values from the rows after ``after`` (and before ``below``); with ``until_match``,
        stop at the first row that yields a value."""
        while True:
            if self.scanned >= MAX_SCANNED_ROWS:
                self.finished = False
                return
            batch = min(_BATCH, MAX_SCANNED_ROWS - self.scanned)
            query = _batch_statement(
                self.visibility, self.plan.upper_bound is not None, after is not None, below is not None
            )
            values = {**self.range_bounds(), "after": after, "below": below, "batch": batch}
            uris = await self.uris(query, values)
            self.scanned += len(uris)
            for uri in uris:
                value = self.plan.extract(uri)
                if value is not None:
                    self.values.add(value)
                    if until_match:
                        return
            if len(uris) < batch:
                return
            after = uris[-1]


def _candidate_range(table: Any, visibility: Visibility, bounded: bool) -> list[ColumnElement[bool]]:
    """Visible rows of ``table`` in the candidate range: from ``:prefix`` (below ``:upper``)."""
    clauses = [visibility.resources_clause(table), table.c.uri >= bindparam("prefix", type_=Text)]
    if bounded:
        clauses.append(table.c.uri < bindparam("upper", type_=Text))
    return clauses


# Statements are built once per visibility and shape, their values bound at each execution:
# building the recursive query took longer than the database took to run it.
@functools.lru_cache(maxsize=256)
def _template_statement(visibility: Visibility) -> Select[Any]:
    return select(templates.c.uri_template).where(
        visibility.templates_clause(templates),
        templates.c.uri_template == bindparam("uri_template", type_=Text),
    )


@functools.lru_cache(maxsize=256)
def _if_template_visible(visibility: Visibility, scan: Select[Any]) -> Select[Any]:
    """``scan``'s URIs as one array, in its order, or NULL when no visible template is exactly
    ``:uri_template`` (then the scan is not run)."""
    return select(case((exists(_template_statement(visibility)), func.array(scan.scalar_subquery()))))


# catalog_plain_read's principal parameters, in ``standing.standing_arguments``' order.
_CREDENTIAL_PARAMETERS = ("p_hash", "p_tenant", "p_scopes", "p_admin")
_STANDING = text("catalog_plain_read(:p_hash, :p_tenant, :p_scopes, :p_admin, NULL) AS standing")


@functools.lru_cache(maxsize=256)
def _authenticated(checked: Select[Any]) -> DriverStatement:
    """``catalog_plain_read``'s row (migration 0008) for the credential, with ``checked``'s URIs as
    ``uris``; no row for an unknown, revoked or expired token (and then no scan). The function
    restores the transaction's scope before it returns, so the scan reads under that scope."""
    return driver_statement(
        select(literal_column("standing.*"), checked.scalar_subquery().label("uris")).select_from(_STANDING)
    )


@functools.lru_cache(maxsize=256)
def _batch_statement(visibility: Visibility, bounded: bool, after: bool, below: bool) -> Select[Any]:
    clauses = _candidate_range(resources, visibility, bounded)
    if after:
        clauses.append(resources.c.uri > bindparam("after", type_=Text))
    if below:
        clauses.append(resources.c.uri < bindparam("below", type_=Text))
    return (
        select(resources.c.uri)
        .where(and_(*clauses))
        .order_by(resources.c.uri)
        .limit(bindparam("batch", type_=Integer))
    )


def _first_segment_separator(plan, argument: str) -> str | None:
    """The reserved character after ``{argument}`` when that is the template's first expression."""
    raw = plan.template.template
    head = raw.find("{")
    expression = "{" + argument + "}"
    if head < 0 or not raw.startswith(expression, head) or not plan.uri_prefix.startswith(raw[:head]):
        return None
    after = raw[head + len(expression) : head + len(expression) + 1]
    return after if after in _RESERVED else None


async def _scanned(scan: _Scan, argument: str) -> _Scan:
    """``scan`` run: by loose index scan when ``argument`` is the template's first segment."""
    separator = _first_segment_separator(scan.plan, argument)
    if separator is None:
        await scan.rows(after=None, below=None)
    else:
        await _skip_scan(scan, scan.visibility, scan.plan, separator)
    return scan


async def _skip_scan(scan: _Scan, visibility: Visibility, plan: Any, separator: str) -> None:
    """One URI per distinct value, by a recursive query that jumps past each value's range."""
    start = len(plan.template.template[: plan.template.template.find("{")])
    jump_char = chr(ord(separator) + 1)
    query = _jumps_statement(visibility, start, separator, plan.upper_bound is not None)
    firsts = await scan.uris(query, {**scan.range_bounds(), "groups": MAX_GROUPS})
    scan.scanned += len(firsts)
    for uri in firsts:
        value = plan.extract(uri)
        if value is not None:
            scan.values.add(value)
            continue
        end = uri.find(separator, start)
        if end >= 0:  # the rest of this value's range, row by row, until one matches
            await scan.rows(after=uri, below=uri[:end] + jump_char, until_match=True)
    if len(firsts) >= MAX_GROUPS:
        scan.finished = False


@functools.lru_cache(maxsize=256)
def _jumps_statement(visibility: Visibility, start: int, separator: str, bounded: bool) -> Select[Any]:
    """The loose index scan: from the first candidate, each step the first visible URI past the
    previous one's value (``<prefix><value><separator>``), at most ``MAX_GROUPS`` steps."""
    jump_char = chr(ord(separator) + 1)

    def next_bound(uri: Any) -> Any:
        # The first URI that can hold another value: past "<prefix><value><separator>".
        position = func.strpos(func.substr(uri, start + 1), separator)
        return case(
            (position > 0, func.left(uri, start + position - 1) + literal(jump_char)),
            else_=uri + literal("\x01"),
        )

    first = (
        select(resources.c.uri)
        .where(and_(*_candidate_range(resources, visibility, bounded)))
        .order_by(resources.c.uri)
        .limit(1)
        .subquery("first")
    )
    # Each jump's bound is a column of the previous row, so the next jump compares ``uri`` with a
    # plain value (an index condition). Computed inside the comparison instead, the non-leakproof
    # string functions would keep the condition behind the row-level-security filter, and every
    # jump would scan the tenant's range from its start. The first row is read from a subquery:
    # as a scalar subquery each reference to it (five in its bound) was an index descent of its own.
    jumps = select(first.c.uri, next_bound(first.c.uri).label("bound"), literal(1).label("n")).cte(
        "jumps", recursive=True
    )
    following = resources.alias("following")
    upper = [following.c.uri < bindparam("upper", type_=Text)] if bounded else []
    step = (
        select(following.c.uri)
        .where(visibility.resources_clause(following), following.c.uri >= jumps.c.bound, *upper)
        .order_by(following.c.uri)
        .limit(1)
        .lateral("step")
    )
    jumps = jumps.union_all(
        select(step.c.uri, next_bound(step.c.uri), jumps.c.n + 1)
        .select_from(jumps.join(step, true()))
        .where(jumps.c.n < bindparam("groups", type_=Integer))
    )
    return select(jumps.c.uri).order_by(jumps.c.n)  # no candidate at all: no row
