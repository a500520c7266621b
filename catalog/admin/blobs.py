"""Blobs: streamed, content-addressed uploads (per tenant) and streamed downloads.

Upload answers 201 when the bytes are new to the tenant and 200 when the tenant already had
exactly these bytes (deduplicated by sha256: nothing new is stored, the existing blob, with the
media type it was first uploaded with, is returned). Either way the body is the blob's
``{sha256, size, mimeType}``, ready for a resource's ``blobSha256``.
"""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Header, Path, Request, Response, status
from fastapi.responses import JSONResponse, StreamingResponse

from catalog.admin.deps import AdminTenantDep, CatalogDep, PrincipalDep
from catalog.core import blobs as core
from catalog.core.errors import FieldError, InvalidInput, NotFound, TooLarge
from catalog.core.schemas.base import MIME_TYPE_PATTERN
from catalog.core.schemas.resources import BlobOut

router = APIRouter(prefix="/tenants/{slug}/blobs", tags=["blobs"])

# Uploads to this route are streamed and bounded by the route itself (by CATALOG_MAX_BLOB_BYTES),
# so the edge does not buffer their bodies.
_UPLOAD_PATH = re.compile(r"/admin/v1/tenants/[^/]+/blobs/?")


def is_streamed_upload(path: str) -> bool:
    return _UPLOAD_PATH.fullmatch(path) is not None


DEFAULT_MIME_TYPE = "application/octet-stream"
Sha256 = Annotated[str, Path(pattern=r"^[0-9a-f]{64}$", description="the blob's sha256 (lowercase hex)")]


def _mime_type(content_type: str | None) -> str:
    if content_type is None or not content_type.strip():
        return DEFAULT_MIME_TYPE
    value = content_type.strip()
    if len(value) > 255 or not MIME_TYPE_PATTERN.fullmatch(value):
        raise InvalidInput(
            "Content-Type is not a media type",
            errors=[FieldError("#/header/content-type", "type/subtype, e.g. image/png")],
        )
    return value


def _check_declared_length(catalog_limit: int, content_length: str | None) -> None:
    """Refuse at once a body that says it is too large (the stream is checked as well)."""
    if content_length is not None and content_length.isdigit() and int(content_length) > catalog_limit:
        raise TooLarge(f"the blob is larger than the limit of {catalog_limit} bytes (CATALOG_MAX_BLOB_BYTES)")


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=BlobOut,
    response_model_exclude_none=True,
    responses={
        200: {"description": "the tenant had these bytes already (deduplicated)", "model": BlobOut},
        201: {"description": "stored"},
        413: {"description": "larger than CATALOG_MAX_BLOB_BYTES; nothing stored"},
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": "the raw bytes; Content-Type becomes the blob's mimeType",
            "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def upload_blob(
    request: Request,
    tenant: AdminTenantDep,
    catalog: CatalogDep,
    principal: PrincipalDep,
    content_type: Annotated[str | None, Header(alias="Content-Type", include_in_schema=False)] = None,
    content_length: Annotated[str | None, Header(alias="Content-Length", include_in_schema=False)] = None,
) -> JSONResponse:
    """Upload raw bytes, streamed and hashed on the way in, bounded by ``CATALOG_MAX_BLOB_BYTES``."""
    mime_type = _mime_type(content_type)
    _check_declared_length(catalog.settings.max_blob_bytes, content_length)
    blob, created = await core.put_stream(catalog, tenant.id, request.stream(), mime_type, by=principal)
    out = BlobOut(sha256=blob.sha256, size=blob.size, mime_type=blob.mime_type)
    return JSONResponse(
        out.dump(),
        status_code=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        headers={"Location": f"/admin/v1/tenants/{tenant.slug}/blobs/{blob.sha256}"},
    )


@router.get(
    "/{sha256}",
    response_class=StreamingResponse,
    responses={200: {"content": {"*/*": {"schema": {"type": "string", "format": "binary"}}}}, 404: {}},
)
async def download_blob(sha256: Sha256, tenant: AdminTenantDep, catalog: CatalogDep) -> Response:
    """The bytes, streamed, with the Content-Type they were uploaded with and their Content-Length;
    ``nosniff``, a sandboxing CSP, and ``attachment`` unless the type is passive (images, plain text,
    JSON, audio, video)."""
    blob = await core.get_blob(catalog, tenant.id, sha256)
    if blob is None:
        raise NotFound(f"no blob {sha256}")
    return StreamingResponse(
        core.stream_bytes(catalog, tenant.id, blob),
        headers={
            "Content-Type": blob.mime_type or DEFAULT_MIME_TYPE,
            "Content-Length": str(blob.size),
            "ETag": f'"{blob.sha256}"',
            **download_headers(blob.sha256, blob.mime_type),
        },
    )


# Types a browser shows without running anything. Everything else (HTML, SVG, XML, scripts, PDF,
# types we have never heard of) is sent as an attachment: curators upload whatever they like, and a
# blob opened from the admin origin must not run script there.
PASSIVE_TYPES = frozenset(
    {
        "application/octet-stream",
        "application/json",
        "text/plain",
        "text/csv",
        "image/png",
        "image/jpeg",
        "image/gif",
        "image/webp",
        "image/avif",
    }
)
BLOB_CSP = "default-src 'none'; sandbox"


def download_headers(sha256: str, mime_type: str | None) -> dict[str, str]:
    """The headers that make stored content safe to serve from this origin, for every response
    that carries blob bytes: never sniffed into another type, never able to run script (a sandboxed
    CSP even if rendered), and active types downloaded instead of rendered."""
    essence = (mime_type or DEFAULT_MIME_TYPE).split(";", 1)[0].strip().lower()
    passive = essence in PASSIVE_TYPES or essence.startswith(("audio/", "video/"))
    return {
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": BLOB_CSP,
        "Content-Disposition": f'{"inline" if passive else "attachment"}; filename="{sha256}"',
    }
