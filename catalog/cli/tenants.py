"""``catalog tenant create|list|delete``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from catalog.cli.common import Commands, command, confirm, err, iso, row, usage

if TYPE_CHECKING:
    from catalog.core.catalog import Catalog


def add_commands(commands: Commands) -> None:
    tenant = commands.add_parser("tenant", help="create, list and delete tenants")
    actions = tenant.add_subparsers(title="actions", metavar="ACTION")
    create = actions.add_parser("create", help="create a tenant")
    create.add_argument("slug", metavar="SLUG", help="1-63 characters: a-z, 0-9 and '-'")
    create.add_argument("--name", help="a display name (default: the slug)")
    create.set_defaults(run=command(_create))
    actions.add_parser("list", help="list tenants: slug, name, created (tab-separated)").set_defaults(
        run=command(_list)
    )
    delete = actions.add_parser(
        "delete",
        help="delete a tenant and all its data (asks first)",
        description="Delete the tenant"
        " and every row of it: resources and their history, blobs, templates, grants, tokens, audit log"
        " and change feed, in one transaction. Asks for confirmation unless --yes.",
    )
    delete.add_argument("slug", metavar="SLUG")
    delete.add_argument("--yes", action="store_true", help="do not ask (for scripts)")
    delete.set_defaults(run=command(_delete))
    tenant.set_defaults(run=usage(tenant))


async def _create(catalog: Catalog, args: argparse.Namespace) -> int:
    from catalog.core.principal import Principal
    from catalog.core.tenants import create_tenant

    tenant = await create_tenant(catalog, args.slug, args.name, by=Principal.system("cli"))
    print(f"created tenant {tenant.slug} ({tenant.name})")
    return 0


async def _list(catalog: Catalog, args: argparse.Namespace) -> int:
    from catalog.core.principal import Principal
    from catalog.core.tenants import list_tenants

    for tenant in await list_tenants(catalog, Principal.platform_admin()):
        print(row(tenant.slug, tenant.name, iso(tenant.created_at)))
    return 0


async def _delete(catalog: Catalog, args: argparse.Namespace) -> int:
    from catalog.core.principal import Principal
    from catalog.core.tenants import delete_tenant, get_tenant, tenant_counts

    tenant = await get_tenant(catalog, args.slug)  # an unknown slug fails before any question
    counts = await tenant_counts(catalog, tenant)
    held = ", ".join(f"{n} {kind}" for kind, n in counts.items())
    confirm(f"delete tenant {tenant.slug} and all its data ({held})?", assume_yes=args.yes)
    await delete_tenant(catalog, tenant.slug, by=Principal.system("cli"))
    err(f"catalog: deleted tenant {tenant.slug} ({held})")
    return 0
