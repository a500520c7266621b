"""One action over several resources at once (the console's selection bar), all or nothing.

A batch names resources by id and one action: delete them, add a tag to each, or give a scope a
``{scope, uri}`` grant of each one's URI. It runs in one transaction: every id is looked up and
locked first (in id order, so two batches cannot deadlock), and an id that is not a resource of
the tenant refuses the whole batch with a 422 naming it, before anything is written. Each item is
then written by the same code as its single operation (:func:`.writes.delete_locked`,
:func:`.writes.update_row`, :func:`catalog.core.grants.insert_grant`), so it is audited, versioned
and put on the change feed exactly as that operation would be; a failure of any item rolls back
every other.
"""

from __future__ import annotations

from catalog.core.catalog import Catalog
from catalog.core.errors import FieldError, InvalidInput
from catalog.core.grants import insert_grant
from catalog.core.principal import Principal
from catalog.core.resources import repository as rows
from catalog.core.resources.record import ResourceRecord
from catalog.core.resources.writes import delete_locked, update_row
from catalog.core.schemas.base import MAX_TAGS
from catalog.core.schemas.grants import GrantIn
from catalog.core.schemas.resources import ResourceBatchIn, ResourceBatchOut, ResourcePatch
from catalog.core.tenants import Tenant
from catalog.db.engine import TenantScope, transaction


def _refusals(body: ResourceBatchIn, found: dict[int, ResourceRecord]) -> list[FieldError]:
    """Every id the batch cannot act on, pointed at by its place in ``ids``."""
    errors: list[FieldError] = []
    for index, resource_id in enumerate(body.ids):
        record = found.get(resource_id)
        if record is None:
            errors.append(FieldError(f"/ids/{index}", f"no resource {resource_id} in this tenant"))
        elif body.action == "tag" and body.tag not in record.tags and len(record.tags) >= MAX_TAGS:
            errors.append(
                FieldError(f"/ids/{index}", f"resource {resource_id} carries {MAX_TAGS} tags already")
            )
    return errors


async def apply_batch(
    catalog: Catalog, principal: Principal, tenant: Tenant, body: ResourceBatchIn
) -> ResourceBatchOut:
    """Apply ``body.action`` to every resource of ``body.ids`` in one transaction, or to none."""
    ids = list(dict.fromkeys(body.ids))  # an id given twice is acted on once
    changed = 0
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        found = await rows.lock_ids(conn, tenant.id, ids)
        errors = _refusals(body, found)
        if errors:
            raise InvalidInput(
                f"nothing was changed: {len(errors)} of the ids cannot take the {body.action}", errors=errors
            )
        for resource_id in ids:
            current = found[resource_id]
            if body.action == "delete":
                await delete_locked(conn, principal, tenant, current)
                changed += 1
            elif body.action == "tag":
                assert body.tag is not None  # the schema requires it for this action
                if body.tag in current.tags:
                    continue
                patch = ResourcePatch(tags=[*current.tags, body.tag])
                await update_row(
                    catalog, conn, principal, tenant, current, patch, ["tags"], replace_content=False
                )
                changed += 1
            else:
                assert body.scope is not None  # the schema requires it for this action
                grant = GrantIn(scope=body.scope, uri=current.uri)
                if await insert_grant(conn, principal, tenant, grant) is not None:
                    changed += 1
    return ResourceBatchOut(action=body.action, ids=ids, changed=changed)
