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

The template is named by its exact ``uriTemplate`` and must itself be visible; otherwise
:class:`UnknownTemplate` (as for one that does not exist).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import and_, select

from catalog.core.errors import InvalidInput, NotFound
from catalog.core.principal import Principal
from catalog.core.reading import tenant_of
from catalog.core.service import Catalog
from catalog.core.uri_templates import InvalidTemplate, completion_candidates, parse_template
from catalog.core.visibility import load_visibility
from catalog.db.engine import TenantScope, transaction
from catalog.db.models import resources, templates

MAX_VALUES = 100
MAX_SCANNED_ROWS = 20_000
_BATCH = 1000


class UnknownTemplate(NotFound):
    def __init__(self, uri_template: str) -> None:
        super().__init__("Unknown resource template")
        self.uri = uri_template


class InvalidArgument(InvalidInput):
    pass


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
) -> Completion:
    tenant_id = tenant_of(principal)
    async with transaction(catalog.engine, TenantScope.tenant(tenant_id)) as conn:
        visibility = await load_visibility(conn, principal, tenant_id)
        if visibility.nothing:
            raise UnknownTemplate(uri_template)
        found = (
            await conn.execute(
                select(templates.c.uri_template).where(
                    visibility.templates_clause(templates), templates.c.uri_template == uri_template
                )
            )
        ).first()
        if found is None:
            raise UnknownTemplate(uri_template)
        try:
            plan = completion_candidates(parse_template(uri_template), argument, partial, context_arguments)
        except InvalidTemplate as exc:
            raise InvalidArgument(exc.reason) from None

        base = [visibility.resources_clause(resources), resources.c.uri >= plan.uri_prefix]
        if plan.upper_bound is not None:
            base.append(resources.c.uri < plan.upper_bound)
        values: set[str] = set()
        scanned = 0
        after: str | None = None
        finished = False
        while scanned < MAX_SCANNED_ROWS:
            clauses = [*base] if after is None else [*base, resources.c.uri > after]
            batch = min(_BATCH, MAX_SCANNED_ROWS - scanned)
            uris = list(
                (
                    await conn.execute(
                        select(resources.c.uri).where(and_(*clauses)).order_by(resources.c.uri).limit(batch)
                    )
                ).scalars()
            )
            scanned += len(uris)
            for uri in uris:
                value = plan.extract(uri)
                if value is not None:
                    values.add(value)
            if len(uris) < batch:
                finished = True
                break
            after = uris[-1]
    ordered = sorted(values)
    return Completion(
        values=ordered[:MAX_VALUES],
        total=len(ordered) if finished else None,
        has_more=len(ordered) > MAX_VALUES or not finished,
    )
