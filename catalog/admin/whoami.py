"""Who the bearer is: what the console (or a script) asks first to know which pages to offer."""

from __future__ import annotations

from fastapi import APIRouter

from catalog.admin.deps import AnyAdminDep
from catalog.core.schemas.tokens import WhoAmIOut

router = APIRouter(tags=["identity"])


@router.get("/whoami", response_model=WhoAmIOut, response_model_exclude_none=True)
async def whoami(principal: AnyAdminDep) -> WhoAmIOut:
    """The platform admin, or a tenant admin token with its tenant and scopes. Other credentials
    are refused like on every admin route (401/403)."""
    return WhoAmIOut(
        kind="platform" if principal.is_platform_admin else "tenant",
        principal=principal.label,
        tenant=None if principal.is_platform_admin else principal.tenant_slug,
        admin=True,
        scopes=sorted(principal.scopes),
        expires_at=principal.expires_at,
    )
