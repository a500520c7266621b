"""``catalog grant add|list|remove``: which scope sees which part of a tenant's catalogue."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from catalog.cli.common import Commands, command, err, iso, row, usage
from catalog.config_error import ConfigError

if TYPE_CHECKING:
    from catalog.core.catalog import Catalog
    from catalog.core.schemas.grants import GrantOut


def add_commands(commands: Commands) -> None:
    grant = commands.add_parser("grant", help="give scopes sight of resources; list and remove grants")
    actions = grant.add_subparsers(title="actions", metavar="ACTION")
    add = actions.add_parser(
        "add",
        help="give SCOPE sight of one resource (--uri), a subtree (--uri-prefix) or a tag (--tag);"
        " prints the new grant's id",
    )
    add.add_argument("--tenant", required=True, metavar="SLUG")
    add.add_argument("--scope", required=True, metavar="S")
    selector = add.add_mutually_exclusive_group(required=True)
    selector.add_argument("--uri", metavar="URI", help="one resource (or template URI) exactly")
    selector.add_argument("--uri-prefix", metavar="PREFIX", help="everything whose URI starts with PREFIX")
    selector.add_argument("--tag", metavar="TAG", help="everything carrying TAG")
    add.set_defaults(run=command(_add))

    listing = actions.add_parser(
        "list",
        help="the tenant's grants: id, scope, kind (uri|uriPrefix|tag), selector, created -- tab-separated",
    )
    listing.add_argument("--tenant", required=True, metavar="SLUG")
    listing.set_defaults(run=command(_list))

    remove = actions.add_parser("remove", help="remove a grant by id (see `grant list`)")
    remove.add_argument("--tenant", required=True, metavar="SLUG")
    remove.add_argument("id", type=int, metavar="ID")
    remove.set_defaults(run=command(_remove))
    grant.set_defaults(run=usage(grant))


def selector(grant: GrantOut) -> tuple[str, str]:
    if grant.uri is not None:
        return "uri", grant.uri
    if grant.uri_prefix is not None:
        return "uriPrefix", grant.uri_prefix
    return "tag", grant.tag or ""


def grant_row(grant: GrantOut) -> str:
    return row(grant.id, grant.scope, *selector(grant), iso(grant.created_at))


async def _add(catalog: Catalog, args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from catalog.core.grants import create_grant
    from catalog.core.principal import Principal
    from catalog.core.schemas.grants import GrantIn
    from catalog.core.tenants import get_tenant
    from catalog.core.transfer.items import validation_reason

    tenant = await get_tenant(catalog, args.tenant)
    try:
        body = GrantIn.model_validate(
            {"scope": args.scope, "uri": args.uri, "uriPrefix": args.uri_prefix, "tag": args.tag}
        )
    except ValidationError as exc:
        raise ConfigError(f"invalid grant: {validation_reason(exc)}") from None
    created = await create_grant(catalog, Principal.system("cli"), tenant, body)
    print(created.id, flush=True)
    kind, value = selector(created)
    err(f"catalog: grant {created.id} of tenant {tenant.slug}: scope {created.scope} sees {kind} {value}")
    for warning in created.warnings or ():  # the admin API's own words (GrantIn.warnings)
        err(f"catalog: warning: {warning}")
    return 0


async def _list(catalog: Catalog, args: argparse.Namespace) -> int:
    from catalog.core.grants import list_grants
    from catalog.core.tenants import get_tenant

    tenant = await get_tenant(catalog, args.tenant)
    for grant in await list_grants(catalog, tenant):
        print(grant_row(grant))
    return 0


async def _remove(catalog: Catalog, args: argparse.Namespace) -> int:
    from catalog.core.grants import delete_grant
    from catalog.core.principal import Principal
    from catalog.core.tenants import get_tenant

    tenant = await get_tenant(catalog, args.tenant)
    await delete_grant(catalog, Principal.system("cli"), tenant, args.id)
    err(f"catalog: removed grant {args.id} of tenant {tenant.slug}")
    return 0
