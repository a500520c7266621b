"""MCP request handlers: thin translations between ``mcp_types`` and ``catalog.core``.

Each factory takes a :class:`CatalogSource` (the endpoint, which knows the catalog once the app
runs) and returns an SDK handler ``async (ctx, params) -> result``. What differs by era (error
codes, the consent flow, cache hints) is decided with ``catalog.mcp.context``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, MISSING_REQUIRED_CLIENT_CAPABILITY

from catalog.core import reading
from catalog.core.catalog import Catalog
from catalog.core.cursors import InvalidCursor
from catalog.core.direct.completion import InvalidArgument, UnknownTemplate, complete_argument
from catalog.core.reading import Content, InvalidReadParams, ReadOutcome, ResourceNotFound
from catalog.core.replicas import on_replica
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


_Params = TypeVar("_Params")
_Result = TypeVar("_Result")

# An SDK request handler (``Server(on_...=)``) taking ``_Params`` and answering ``_Result``.
Handler = Callable[[Ctx, _Params], Awaitable[_Result]]


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
CONSENT_CAPABILITIES: dict[str, Any] = {"elicitation": {"form": {}}}


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


def list_resources(
    endpoint: CatalogSource,
) -> Handler[types.PaginatedRequestParams | None, types.ListResourcesResult]:
    async def handler(ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        principal = principal_of(ctx)
        try:
            cursor = params.cursor if params else None
            records, next_cursor = await on_replica(
                endpoint.catalog,
                lambda reader: reading.resources_page(reader, principal, cursor),
                tenant_id=principal.tenant_id,
            )
        except InvalidCursor:
            raise invalid_cursor() from None
        return types.ListResourcesResult(
            resources=[to_resource(r) for r in records],
            next_cursor=next_cursor,
            **cache_hints(results.LIST, principal, endpoint.catalog.settings),
        )

    return handler


def list_templates(
    endpoint: CatalogSource,
) -> Handler[types.PaginatedRequestParams | None, types.ListResourceTemplatesResult]:
    async def handler(
        ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        principal = principal_of(ctx)
        try:
            cursor = params.cursor if params else None
            records, next_cursor = await on_replica(
                endpoint.catalog,
                lambda reader: reading.templates_page(reader, principal, cursor),
                tenant_id=principal.tenant_id,
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


@dataclass(frozen=True)
class Consented:
    """A read's outcome with its contents, and whether consent was given for it (never cached)."""

    outcome: ReadOutcome
    consented: bool


def _ask(outcome: ReadOutcome) -> types.InputRequiredResult:
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


async def read_with_consent(
    endpoint: CatalogSource,
    ctx: Ctx,
    uri: str,
    *,
    request_state: str | None = None,
    input_responses: types.InputResponses | None = None,
) -> Consented | types.InputRequiredResult:
    """Read ``uri`` for this request's principal, asking for consent where the resource wants it:
    at 2026-07-28 an ``InputRequiredResult`` (its answer comes back in ``input_responses``), in a
    2025-11-25 session a server-initiated ``elicitation/create``. ``resources/read`` and the
    ``read_resource`` tool (``catalog.mcp.tools``) share it. The core's ``ResourceNotFound`` and
    ``InvalidReadParams`` pass through (each caller says them its own way); a declined consent is
    ``CONSENT_DECLINED``, a client that cannot be asked the capability error of its era."""
    catalog, principal = endpoint.catalog, principal_of(ctx)
    # On a read replica when one fits; the reads below, with a consent purpose, write its audit
    # entry and run on the primary.
    outcome = await on_replica(
        catalog, lambda reader: reading.read_resource(reader, principal, uri), tenant_id=principal.tenant_id
    )
    if not outcome.needs_consent:
        return Consented(outcome, consented=False)
    if is_2026(ctx):
        # RequestStateBoundary has already verified and unsealed requestState (else -32602).
        answer = (input_responses or {}).get(CONSENT_KEY)
        if request_state == CONSENT_STATE and isinstance(answer, types.ElicitResult):
            if answer.action in ("decline", "cancel"):
                raise _declined(uri, answer.action)
            purpose = _purpose(answer)
            if purpose is not None:
                read = await reading.read_resource(catalog, principal, uri, consent_purpose=purpose)
                return Consented(read, consented=True)
        if not supports_form_elicitation(ctx):
            raise MCPError(
                MISSING_REQUIRED_CLIENT_CAPABILITY,
                "Reading this resource needs consent: the client must declare the elicitation (form) capability",
                data={"requiredCapabilities": CONSENT_CAPABILITIES},
            )
        return _ask(outcome)
    if not supports_form_elicitation(ctx):
        raise MCPError(
            INVALID_PARAMS,
            "Reading this resource needs consent: the client must declare the elicitation capability",
            data={"uri": uri, "requiredCapabilities": CONSENT_CAPABILITIES},
        )
    # Server-initiated elicitation/create on this POST's SSE stream (needs json_response=False).
    answer_2025 = await ctx.session.elicit_form(
        outcome.consent_message or "", CONSENT_SCHEMA, related_request_id=ctx.request_id
    )
    purpose = _purpose(answer_2025)
    if purpose is None:
        raise _declined(
            uri, answer_2025.action if answer_2025.action != "accept" else "accept-without-purpose"
        )
    read = await reading.read_resource(catalog, principal, uri, consent_purpose=purpose)
    return Consented(read, consented=True)


def read_resource(
    endpoint: CatalogSource,
) -> Handler[types.ReadResourceRequestParams, types.ReadResourceResult | types.InputRequiredResult]:
    async def handler(
        ctx: Ctx, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult | types.InputRequiredResult:
        try:
            read = await read_with_consent(
                endpoint,
                ctx,
                params.uri,
                request_state=params.request_state,
                input_responses=params.input_responses,
            )
        except ResourceNotFound:
            raise not_found(ctx, params.uri) from None
        except InvalidReadParams as exc:  # a refused URI or consent purpose
            raise MCPError(INVALID_PARAMS, exc.detail, data={"uri": params.uri}) from None
        if isinstance(read, types.InputRequiredResult):
            return read
        # A read that needed consent is never cached.
        ttl_ms = 0 if read.consented else results.read_ttl_ms(read.outcome.ttl_ms, endpoint.catalog.settings)
        return types.ReadResourceResult(
            contents=to_contents(read.outcome.contents),
            ttl_ms=ttl_ms,
            cache_scope=cache_scope(principal_of(ctx)) if ttl_ms else "private",
        )

    return handler


def complete(endpoint: CatalogSource) -> Handler[types.CompleteRequestParams, types.CompleteResult]:
    async def handler(ctx: Ctx, params: types.CompleteRequestParams) -> types.CompleteResult:
        if not isinstance(params.ref, types.ResourceTemplateReference):
            raise MCPError(
                INVALID_PARAMS, "Only resource template arguments can be completed (no prompts here)"
            )
        context = (params.context.arguments if params.context else None) or {}
        principal = principal_of(ctx)
        ref, argument = params.ref, params.argument
        try:
            result = await on_replica(
                endpoint.catalog,
                lambda reader: complete_argument(
                    reader, principal, ref.uri, argument.name, argument.value, context
                ),
                tenant_id=principal.tenant_id,
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
