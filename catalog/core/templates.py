"""Resource templates: RFC 6570 URI templates with metadata and an optional rendered text body."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Row, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from catalog.core.audit import AuditEntry, digest, record_audit
from catalog.core.catalog import Catalog
from catalog.core.cursors import decode_cursor, encode_cursor
from catalog.core.errors import Conflict, FieldError, InvalidInput, NotFound
from catalog.core.principal import Principal
from catalog.core.schemas.base import column_values
from catalog.core.schemas.templates import (
    TemplateIn,
    TemplateOut,
    TemplatePatch,
    TemplatePreviewIn,
    TemplatePreviewOut,
)
from catalog.core.tenants import Tenant
from catalog.core.uri_templates.bodies import render_body, validate_body
from catalog.core.uri_templates.matching import check_readable
from catalog.core.uri_templates.parsing import InvalidTemplate, ParsedTemplate, parse_template
from catalog.core.visibility import Visibility, load_visibility
from catalog.db.engine import TenantScope, transaction
from catalog.db.models import templates
from catalog.db.rows import from_row

METADATA_FIELDS = (
    "name",
    "title",
    "description",
    "mime_type",
    "icons",
    "annotations",
    "tags",
    "meta",
    "text",
)


@dataclass(frozen=True)
class TemplateRecord:
    id: int
    tenant_id: int
    uri_template: str
    literal_prefix: str
    name: str
    title: str | None
    description: str | None
    mime_type: str | None
    icons: list[dict[str, Any]] | None
    annotations: dict[str, Any] | None
    tags: tuple[str, ...]
    meta: dict[str, Any] | None
    text: str | None
    version: int
    created_at: datetime
    updated_at: datetime

    @property
    def parsed(self) -> ParsedTemplate:
        return parse_template(self.uri_template)

    def to_out(self) -> TemplateOut:
        return TemplateOut.model_validate(self, from_attributes=True)

    def digest(self) -> str | None:
        """The audit digest: every field a curator sets (not id, version or times)."""
        return digest(self.to_out().model_dump(mode="json", by_alias=True, exclude=_NOT_CURATED))


_NOT_CURATED = {"id", "version", "created_at", "updated_at"}


def template_from_row(row: Row[Any]) -> TemplateRecord:
    return from_row(TemplateRecord, row)


def _parse(raw: str) -> ParsedTemplate:
    """A template a curator writes: parsed, and every one of its expansions readable (RES-15)."""
    try:
        parsed = parse_template(raw)
        check_readable(parsed)
        return parsed
    except InvalidTemplate as exc:
        raise InvalidInput("invalid URI template", errors=[FieldError("/uriTemplate", exc.reason)]) from None


def _check_body(text: str | None, parsed: ParsedTemplate) -> None:
    if text is None:
        return
    try:
        validate_body(text, parsed.variable_names)
    except InvalidTemplate as exc:
        raise InvalidInput("invalid template body", errors=[FieldError("/text", exc.reason)]) from None


def _conflict(uri_template: str) -> Conflict:
    return Conflict(
        f"a template {uri_template!r} exists already", errors=[FieldError("/uriTemplate", "already in use")]
    )


async def create_template(
    catalog: Catalog, principal: Principal, tenant: Tenant, body: TemplateIn
) -> TemplateRecord:
    parsed = _parse(body.uri_template)
    _check_body(body.text, parsed)
    try:
        async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
            row = (
                await conn.execute(
                    insert(templates)
                    .values(
                        tenant_id=tenant.id,
                        uri_template=parsed.template,
                        literal_prefix=parsed.literal_prefix,
                        **column_values(body, METADATA_FIELDS),
                    )
                    .returning(*templates.c)
                )
            ).one()
            record = template_from_row(row)
            await record_audit(
                conn,
                tenant.id,
                principal,
                AuditEntry(
                    action="template.create",
                    target_kind="template",
                    target_id=record.id,
                    uri=record.uri_template,
                    after=record.digest(),
                ),
            )
    except IntegrityError:
        raise _conflict(parsed.template) from None
    return record


async def patch_template(
    catalog: Catalog, principal: Principal, tenant: Tenant, template_id: int, body: TemplatePatch
) -> TemplateRecord:
    fields = [name for name in METADATA_FIELDS if name in body.model_fields_set]
    values = column_values(body, fields)
    try:
        async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
            current = await _get(conn, tenant.id, template_id, lock=True)
            parsed = _parse(body.uri_template) if body.uri_template is not None else current.parsed
            if body.uri_template is not None:
                values.update(uri_template=parsed.template, literal_prefix=parsed.literal_prefix)
            _check_body(values.get("text", current.text), parsed)
            if not values:
                return current
            row = (
                await conn.execute(
                    update(templates)
                    .where(templates.c.tenant_id == tenant.id, templates.c.id == template_id)
                    .values(**values, version=templates.c.version + 1, updated_at=func.now())
                    .returning(*templates.c)
                )
            ).one()
            record = template_from_row(row)
            await record_audit(
                conn,
                tenant.id,
                principal,
                AuditEntry(
                    action="template.update",
                    target_kind="template",
                    target_id=record.id,
                    uri=record.uri_template,
                    before=current.digest(),
                    after=record.digest(),
                ),
            )
    except IntegrityError:
        raise _conflict(str(values.get("uri_template"))) from None
    return record


async def _get(
    conn: AsyncConnection, tenant_id: int, template_id: int, *, lock: bool = False
) -> TemplateRecord:
    query = select(templates).where(templates.c.tenant_id == tenant_id, templates.c.id == template_id)
    if lock:
        query = query.with_for_update()
    row = (await conn.execute(query)).one_or_none()
    if row is None:
        raise NotFound(f"no template {template_id}")
    return template_from_row(row)


async def get_template(catalog: Catalog, tenant: Tenant, template_id: int) -> TemplateRecord:
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        return await _get(conn, tenant.id, template_id)


async def delete_template(catalog: Catalog, principal: Principal, tenant: Tenant, template_id: int) -> None:
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        current = await _get(conn, tenant.id, template_id, lock=True)
        await conn.execute(
            delete(templates).where(templates.c.tenant_id == tenant.id, templates.c.id == template_id)
        )
        await record_audit(
            conn,
            tenant.id,
            principal,
            AuditEntry(
                action="template.delete",
                target_kind="template",
                target_id=current.id,
                uri=current.uri_template,
                before=current.digest(),
            ),
        )


def preview(body: TemplatePreviewIn) -> TemplatePreviewOut:
    """What a template would answer for sample arguments: the expanded URI and the rendered body,
    with the same parsing, validation and escaping as a stored template (nothing is written)."""
    parsed = _parse(body.uri_template)
    _check_body(body.text, parsed)
    arguments = {name: body.arguments.get(name, "") for name in parsed.variable_names}
    try:
        uri = parsed.expand(arguments)
    except InvalidTemplate as exc:
        raise InvalidInput(
            "cannot expand the template", errors=[FieldError("/arguments", exc.reason)]
        ) from None
    rendered = render_body(body.text, arguments, body.mime_type) if body.text is not None else None
    return TemplatePreviewOut(uri=uri, variables=list(parsed.variable_names), text=rendered)


async def template_page(
    catalog: Catalog,
    conn: AsyncConnection,
    visibility: Visibility,
    *,
    listing: str,
    cursor: str | None,
    limit: int,
) -> tuple[list[TemplateRecord], str | None]:
    """One keyset page of visible templates, ordered by their URI template (byte order)."""
    if visibility.nothing:
        return [], None
    query = select(templates).where(visibility.templates_clause(templates))
    if cursor:
        position = decode_cursor(
            catalog.signing_key, cursor, listing=listing, fingerprint=visibility.fingerprint
        )
        query = query.where(templates.c.uri_template > str(position.after))
    rows = (await conn.execute(query.order_by(templates.c.uri_template).limit(limit + 1))).all()
    records = [template_from_row(row) for row in rows[:limit]]
    next_cursor = None
    if len(rows) > limit:
        next_cursor = encode_cursor(
            catalog.signing_key,
            after=records[-1].uri_template,
            listing=listing,
            fingerprint=visibility.fingerprint,
        )
    return records, next_cursor


async def list_templates(
    catalog: Catalog,
    principal: Principal,
    tenant: Tenant,
    *,
    cursor: str | None = None,
    limit: int = 100,
) -> tuple[list[TemplateRecord], str | None]:
    """One page of the templates ``principal`` may see in ``tenant`` (all of them for its admins)."""
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        visibility = await load_visibility(conn, principal, tenant.id)
        return await template_page(
            catalog, conn, visibility, listing="admin.templates", cursor=cursor, limit=limit
        )


async def visible_templates(conn: AsyncConnection, visibility: Visibility) -> list[TemplateRecord]:
    """Every template the visibility allows (for resolving a read or a completion by template)."""
    if visibility.nothing:
        return []
    rows = (
        await conn.execute(
            select(templates).where(visibility.templates_clause(templates)).order_by(templates.c.uri_template)
        )
    ).all()
    return [template_from_row(row) for row in rows]
