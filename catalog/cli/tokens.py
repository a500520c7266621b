"""``catalog token create|list|revoke``: the admin API's token routes, over the same core functions."""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from catalog.cli.common import Commands, command, err, iso, reader_gone, row, usage
from catalog.config_error import ConfigError

if TYPE_CHECKING:
    from catalog.core.catalog import Catalog


def add_commands(commands: Commands) -> None:
    token = commands.add_parser("token", help="mint, list and revoke bearer tokens")
    actions = token.add_subparsers(title="actions", metavar="ACTION")
    mint = actions.add_parser(
        "create", help="mint a token for a tenant; prints it once (only the token, on stdout)"
    )
    mint.add_argument("--tenant", required=True, metavar="SLUG")
    mint.add_argument(
        "--scope",
        dest="scopes",
        action="extend",
        nargs="+",
        default=[],
        metavar="S",
        help="a scope the token holds (repeatable)",
    )
    mint.add_argument("--admin", action="store_true", help="administer the tenant (admin API)")
    mint.add_argument("--expires-in", type=float, metavar="DAYS", help="expire after DAYS days")
    mint.add_argument("--name", help="a label for the token")
    mint.set_defaults(run=command(_create))

    listing = actions.add_parser(
        "list",
        help="the tenant's tokens, never their secrets: id, state (live|expired|revoked), scopes"
        " (comma-separated), admin (yes|no), expires, created, name -- tab-separated",
    )
    listing.add_argument("--tenant", required=True, metavar="SLUG")
    listing.set_defaults(run=_quick_list)

    revoke = actions.add_parser("revoke", help="revoke a token: refused from the next request on")
    revoke.add_argument("--tenant", required=True, metavar="SLUG")
    revoke.add_argument("id", type=int, metavar="ID", help="the token's id (see `token list`)")
    revoke.set_defaults(run=command(_revoke))
    token.set_defaults(run=usage(token))


async def _create(catalog: Catalog, args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from catalog.core.principal import Principal
    from catalog.core.schemas.tokens import TokenIn
    from catalog.core.tenants import get_tenant
    from catalog.core.tokens import create_token
    from catalog.core.transfer.items import validation_reason

    if args.expires_in is not None and not args.expires_in > 0:
        raise ConfigError("--expires-in must be a positive number of days")
    tenant = await get_tenant(catalog, args.tenant)
    try:
        expires_at = datetime.now(UTC) + timedelta(days=args.expires_in) if args.expires_in else None
        body = TokenIn(scopes=args.scopes, admin=args.admin, expires_at=expires_at, name=args.name)
    except (ValidationError, OverflowError) as exc:
        reason = validation_reason(exc) if isinstance(exc, ValidationError) else "--expires-in is too large"
        raise ConfigError(f"invalid token: {reason}") from None
    created = await create_token(catalog, Principal.system("cli"), tenant, body)
    print(created.token, flush=True)
    details = [
        f"scopes: {', '.join(created.scopes) or '(none)'}",
        f"admin: {'yes' if created.admin else 'no'}",
        f"expires: {iso(created.expires_at) if created.expires_at else 'never'}",
    ]
    err(
        f"catalog: token {created.id} for tenant {tenant.slug} ({'; '.join(details)}); shown once, keep it safe"
    )
    if not created.scopes and not created.admin:
        # Visibility comes only from grants on scopes (or the admin flag): such a token is valid
        # and sees nothing, which is rarely what was meant.
        err(
            f"catalog: warning: token {created.id} has no scope and is not an admin, so it sees nothing;"
            " give it --scope S (a scope some grant names) or --admin"
        )
    return 0


def state(revoked_at: datetime | None, expires_at: datetime | None, now: datetime) -> str:
    if revoked_at is not None:
        return "revoked"
    if expires_at is not None and expires_at <= now:
        return "expired"
    return "live"


def token_row(
    token_id: int,
    scopes: Sequence[str],
    admin: bool,
    expires_at: datetime | None,
    revoked_at: datetime | None,
    created_at: datetime,
    name: str | None,
    now: datetime,
) -> str:
    """One line of `token list`: id, state, scopes, admin, expires, created, name."""
    return row(
        token_id,
        state(revoked_at, expires_at, now),
        ",".join(scopes),
        "yes" if admin else "no",
        iso(expires_at),
        iso(created_at),
        name,
    )


def _quick_list(args: argparse.Namespace) -> int:
    """`token list` on one bare connection when the environment allows (``quick_settings``): a
    command that starts without importing SQLAlchemy or pydantic. Whatever that path cannot
    answer (an embedded database not running, settings it cannot vouch for, an unknown tenant,
    any failure) the full command answers, with its own errors and start-up."""
    from catalog.environment import quick_settings

    settings = quick_settings(os.environ)
    if settings is not None:
        from catalog.core.direct.token_list import embedded_tenant_tokens, tenant_tokens

        timeout = settings.statement_timeout_ms
        if settings.database is not None:
            read = tenant_tokens(settings.database.connect_args(), timeout, args.tenant)
        else:
            assert settings.home is not None
            read = embedded_tenant_tokens(settings.home, timeout, args.tenant)
        tokens = asyncio.run(read)
        if tokens is not None:
            now = datetime.now(UTC)
            lines = [
                token_row(t.id, t.scopes, t.is_admin, t.expires_at, t.revoked_at, t.created_at, t.name, now)
                for t in tokens
            ]
            try:
                print(*lines, sep="\n", end="\n" if lines else "", flush=True)
            except BrokenPipeError:
                return reader_gone()
            return 0
    return command(_list)(args)


async def _list(catalog: Catalog, args: argparse.Namespace) -> int:
    from catalog.core.tenants import get_tenant
    from catalog.core.tokens import list_tokens

    tenant = await get_tenant(catalog, args.tenant)
    now = datetime.now(UTC)
    for t in await list_tokens(catalog, tenant):
        print(token_row(t.id, t.scopes, t.admin, t.expires_at, t.revoked_at, t.created_at, t.name, now))
    return 0


async def _revoke(catalog: Catalog, args: argparse.Namespace) -> int:
    from catalog.core.principal import Principal
    from catalog.core.tenants import get_tenant
    from catalog.core.tokens import delete_token

    tenant = await get_tenant(catalog, args.tenant)
    await delete_token(catalog, Principal.system("cli"), tenant, args.id)
    err(f"catalog: revoked token {args.id} of tenant {tenant.slug}")
    return 0
