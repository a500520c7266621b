"""MCP request handlers: thin translations between ``mcp_types`` and ``catalog.core``.

Each factory takes a :class:`CatalogSource` (the endpoint, which knows the catalog once the app
runs) and returns an SDK handler ``async (ctx, params) -> result``. What differs by era (error
codes, the consent flow, cache hints) is decided with ``catalog.mcp.context``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, MISSING_REQUIRED_CLIENT_CAPABILITY

from catalog.core import reading
from catalog.core.catalog import Catalog
from catalog.core.cursors import InvalidCursor
from catalog.core.direct.completion import InvalidArgument, UnknownTemplate, complete_argument
from catalog.core.reading import Content, InvalidReadParams, ReadOutcome, ResourceNotFound
from catalog.core.resources import ListingEntry, ResourceRecord, effective_annotations, entry_values
from catalog.core.templates import TemplateRecord
from catalog.mcp import results
from catalog.mcp.context import (
    CONSENT_DECLINED,
    Ctx,
    cache_scope,
    invalid_cursor,
    is_2026,
    not_found,
    principal_of,
    supports_form_elicitation,
)
from catalog.mcp.results import cache_hints, completion_fields, content_fields


class CatalogSource(Protocol):
    @property
    def catalog(self) -> Catalog: ...


CONSENT_KEY = "consent"
CONSENT_STATE = "consent"
CONSENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "accept": {"type": "boolean", "title": "I consent", "description": "Allow reading this resource"},
        "purpose": {
            "type": "string",
            "title": "Purpose",
            "description": "Why you need it (kept in the audit log)",
        },
    },
    "required": ["accept", "purpose"],
}
CONSENT_CAPABILITIES = {"elicitation": {"form": {}}}


# -- converters -----------------------------------------------------------------------------------


def _present(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if v is not None}


def resource_fields(record: ListingEntry) -> dict[str, Any]:
    """A resource as a ``resources/list`` entry on the wire (what :func:`to_resource` validates)."""
    return listing_fields(*entry_values(record))


def listing_fields(
    uri: str,
    name: str,
    title: str | None,
    description: str | None,
    mime_type: str | None,
    size: int | None,
    icons: list[dict[str, Any]] | None,
    annotations: dict[str, Any] | None,
    meta: dict[str, Any] | None,
    content_changed_at: datetime,
) -> dict[str, Any]:
    """A ``resources/list`` entry on the wire from a listing entry's values in its fields' order
    (``ListingValues``): its fields that are set. The plain list path passes a page's rows straight
    here, a hundred times a page, so one test per field rather than a loop over pairs."""
    fields: dict[str, Any] = {"uri": uri, "name": name}
    if title is not None:
        fields["title"] = title
    if description is not None:
        fields["description"] = description
    if mime_type is not None:
        fields["mimeType"] = mime_type
    if size is not None:
        fields["size"] = size
    if icons is not None:
        fields["icons"] = icons
    fields["annotations"] = effective_annotations(annotations, content_changed_at)
    if meta is not None:
        fields["_meta"] = meta
    return fields


def to_resource(record: ResourceRecord) -> types.Resource:
    return types.Resource.model_validate(resource_fields(record))


def to_template(record: TemplateRecord) -> types.ResourceTemplate:
    return types.ResourceTemplate.model_validate(
        _present(
            {
                "uriTemplate": record.uri_template,
                "name": record.name,
                "title": record.title,
                "description": record.description,
                "mimeType": record.mime_type,
                "icons": record.icons,
                "annotations": record.annotations or None,
                "_meta": record.meta,
            }
        )
    )


def to_contents(items: list[Content]) -> list[types.TextResourceContents | types.BlobResourceContents]:
    """Content items, each the fields both paths send (``results.content_fields``)."""
    out: list[types.TextResourceContents | types.BlobResourceContents] = []
    for item in items:
        fields = content_fields(item)
        if "blob" in fields:
            out.append(types.BlobResourceContents.model_validate(fields))
        else:
            out.append(types.TextResourceContents.model_validate(fields))
    return out


# -- handlers -------------------------------------------------------------------------------------


def list_resources(endpoint: CatalogSource):
    async def handler(ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        principal = principal_of(ctx)
        try:
            records, next_cursor = await reading.resources_page(
                endpoint.catalog, principal, params.cursor if params else None
            )
        except InvalidCursor:
            raise invalid_cursor() from None
        return types.ListResourcesResult(
            resources=[to_resource(r) for r in records],
            next_cursor=next_cursor,
            **cache_hints(results.LIST, principal, endpoint.catalog.settings),
        )

    return handler


def list_templates(endpoint: CatalogSource):
    async def handler(
        ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        principal = principal_of(ctx)
        try:
            records, next_cursor = await reading.templates_page(
                endpoint.catalog, principal, params.cursor if params else None
            )
        except InvalidCursor:
            raise invalid_cursor() from None
        return types.ListResourceTemplatesResult(
            resource_templates=[to_template(t) for t in records],
            next_cursor=next_cursor,
            **cache_hints(results.TEMPLATES, principal, endpoint.catalog.settings),
        )

    return handler


def _purpose(answer: types.ElicitResult) -> str | None:
    content = answer.content or {}
    purpose = content.get("purpose")
    if (
        answer.action == "accept"
        and content.get("accept") is True
        and isinstance(purpose, str)
        and purpose.strip()
    ):
        return purpose.strip()
    return None


def _declined(uri: str, action: str) -> MCPError:
    return MCPError(
        CONSENT_DECLINED, "Consent declined; nothing was read", data={"uri": uri, "action": action}
    )


def read_resource(endpoint: CatalogSource):
    async def read(ctx: Ctx, uri: str, purpose: str | None = None) -> ReadOutcome:
        try:
            return await reading.read_resource(
                endpoint.catalog, principal_of(ctx), uri, consent_purpose=purpose
            )
        except ResourceNotFound:
            raise not_found(ctx, uri) from None
        except InvalidReadParams as exc:  # a refused URI or consent purpose
            raise MCPError(INVALID_PARAMS, exc.detail, data={"uri": uri}) from None

    def finished(ctx: Ctx, outcome: ReadOutcome, *, ttl_ms: int) -> types.ReadResourceResult:
        return types.ReadResourceResult(
            contents=to_contents(outcome.contents),
            ttl_ms=ttl_ms,
            cache_scope=cache_scope(principal_of(ctx)) if ttl_ms else "private",
        )

    def ask(outcome: ReadOutcome) -> types.InputRequiredResult:
        return types.InputRequiredResult(
            input_requests={
                CONSENT_KEY: types.ElicitRequest(
                    params=types.ElicitRequestFormParams(
                        message=outcome.consent_message or "", requested_schema=CONSENT_SCHEMA
                    )
                )
            },
            request_state=CONSENT_STATE,  # plaintext here; RequestStateBoundary seals it on the way out
        )

    async def consent_2026(
        ctx: Ctx, params: types.ReadResourceRequestParams, outcome: ReadOutcome
    ) -> types.ReadResourceResult | types.InputRequiredResult:
        # RequestStateBoundary has already verified and unsealed requestState (else -32602).
        answer = (params.input_responses or {}).get(CONSENT_KEY)
        if params.request_state == CONSENT_STATE and isinstance(answer, types.ElicitResult):
            if answer.action in ("decline", "cancel"):
                raise _declined(params.uri, answer.action)
            purpose = _purpose(answer)
            if purpose is not None:
                return finished(ctx, await read(ctx, params.uri, purpose), ttl_ms=0)
        if not supports_form_elicitation(ctx):
            raise MCPError(
                MISSING_REQUIRED_CLIENT_CAPABILITY,
                "Reading this resource needs consent: the client must declare the elicitation (form) capability",
                data={"requiredCapabilities": CONSENT_CAPABILITIES},
            )
        return ask(outcome)

    async def consent_2025(
        ctx: Ctx, params: types.ReadResourceRequestParams, outcome: ReadOutcome
    ) -> types.ReadResourceResult:
        if not supports_form_elicitation(ctx):
            raise MCPError(
                INVALID_PARAMS,
                "Reading this resource needs consent: the client must declare the elicitation capability",
                data={"uri": params.uri, "requiredCapabilities": CONSENT_CAPABILITIES},
            )
        # Server-initiated elicitation/create on this POST's SSE stream (needs json_response=False).
        answer = await ctx.session.elicit_form(
            outcome.consent_message or "", CONSENT_SCHEMA, related_request_id=ctx.request_id
        )
        purpose = _purpose(answer)
        if purpose is None:
            raise _declined(
                params.uri, answer.action if answer.action != "accept" else "accept-without-purpose"
            )
        return finished(ctx, await read(ctx, params.uri, purpose), ttl_ms=0)

    async def handler(
        ctx: Ctx, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult | types.InputRequiredResult:
        outcome = await read(ctx, params.uri)
        if not outcome.needs_consent:
            return finished(
                ctx, outcome, ttl_ms=results.read_ttl_ms(outcome.ttl_ms, endpoint.catalog.settings)
            )
        if is_2026(ctx):
            return await consent_2026(ctx, params, outcome)
        return await consent_2025(ctx, params, outcome)

    return handler


def complete(endpoint: CatalogSource):
    async def handler(ctx: Ctx, params: types.CompleteRequestParams) -> types.CompleteResult:
        if not isinstance(params.ref, types.ResourceTemplateReference):
            raise MCPError(
                INVALID_PARAMS, "Only resource template arguments can be completed (no prompts here)"
            )
        context = (params.context.arguments if params.context else None) or {}
        try:
            result = await complete_argument(
                endpoint.catalog,
                principal_of(ctx),
                params.ref.uri,
                params.argument.name,
                params.argument.value,
                context,
            )
        except UnknownTemplate:
            raise MCPError(
                INVALID_PARAMS, "Unknown resource template", data={"uri": params.ref.uri}
            ) from None
        except InvalidArgument as exc:
            raise MCPError(INVALID_PARAMS, exc.detail, data={"uri": params.ref.uri}) from None
        return types.CompleteResult.model_validate(
            {"completion": completion_fields(result.values, result.has_more, result.total)}
        )

    return handler
