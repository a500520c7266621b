"""``catalog template add|list|remove``: RFC 6570 resource templates with an optional body."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from catalog.cli.common import Commands, command, err, iso, row, usage
from catalog.config_error import ConfigError

if TYPE_CHECKING:
    from catalog.core.catalog import Catalog


def add_commands(commands: Commands) -> None:
    template = commands.add_parser("template", help="add, list and remove resource templates")
    actions = template.add_subparsers(title="actions", metavar="ACTION")
    add = actions.add_parser(
        "add",
        help="add a template; prints its id",
        description="URI_TEMPLATE is RFC 6570 (e.g. 'test://orders/{id}'); a body (--text or --text-file)"
        " may use its variables as {var} placeholders, rendered on read.",
    )
    add.add_argument("--tenant", required=True, metavar="SLUG")
    add.add_argument("uri_template", metavar="URI_TEMPLATE")
    add.add_argument("--name", required=True)
    add.add_argument("--title")
    add.add_argument("--description")
    add.add_argument("--mime-type", metavar="TYPE")
    add.add_argument("--tag", dest="tags", action="append", metavar="TAG", help="a tag (repeatable)")
    body = add.add_mutually_exclusive_group()
    body.add_argument("--text", help="the body rendered on read")
    body.add_argument("--text-file", type=Path, metavar="FILE", help="the body, from a UTF-8 file")
    add.set_defaults(run=command(_add))

    listing = actions.add_parser(
        "list",
        help="the tenant's templates by URI template: id, uriTemplate, name, mimeType, tags"
        " (comma-separated), version, updated -- tab-separated",
    )
    listing.add_argument("--tenant", required=True, metavar="SLUG")
    listing.set_defaults(run=command(_list))

    remove = actions.add_parser("remove", help="remove a template by id (see `template list`)")
    remove.add_argument("--tenant", required=True, metavar="SLUG")
    remove.add_argument("id", type=int, metavar="ID")
    remove.set_defaults(run=command(_remove))
    template.set_defaults(run=usage(template))


def _body(args: argparse.Namespace) -> dict[str, Any]:
    text = args.text
    if args.text_file is not None:
        try:
            text = args.text_file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise ConfigError(f"{args.text_file}: not UTF-8 text") from None
    fields = {
        "uriTemplate": args.uri_template,
        "name": args.name,
        "title": args.title,
        "description": args.description,
        "mimeType": args.mime_type,
        "tags": args.tags,
        "text": text,
    }
    return {key: value for key, value in fields.items() if value is not None}


async def _add(catalog: Catalog, args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from catalog.core.principal import Principal
    from catalog.core.schemas.templates import TemplateIn
    from catalog.core.templates import create_template
    from catalog.core.tenants import get_tenant
    from catalog.core.transfer.items import validation_reason

    body = _body(args)  # a missing --text-file fails before the database is asked anything
    tenant = await get_tenant(catalog, args.tenant)
    try:
        parsed = TemplateIn.model_validate(body)
    except ValidationError as exc:
        raise ConfigError(f"invalid template: {validation_reason(exc)}") from None
    record = await create_template(catalog, Principal.system("cli"), tenant, parsed)
    print(record.id, flush=True)
    err(f"catalog: template {record.id} of tenant {tenant.slug}: {record.uri_template}")
    return 0


async def _list(catalog: Catalog, args: argparse.Namespace) -> int:
    from catalog.core.principal import Principal
    from catalog.core.templates import list_templates
    from catalog.core.tenants import get_tenant

    tenant = await get_tenant(catalog, args.tenant)
    cursor: str | None = None
    while True:
        records, cursor = await list_templates(catalog, Principal.system("cli"), tenant, cursor=cursor)
        for t in records:
            print(
                row(t.id, t.uri_template, t.name, t.mime_type, ",".join(t.tags), t.version, iso(t.updated_at))
            )
        if cursor is None:
            return 0


async def _remove(catalog: Catalog, args: argparse.Namespace) -> int:
    from catalog.core.principal import Principal
    from catalog.core.templates import delete_template
    from catalog.core.tenants import get_tenant

    tenant = await get_tenant(catalog, args.tenant)
    await delete_template(catalog, Principal.system("cli"), tenant, args.id)
    err(f"catalog: removed template {args.id} of tenant {tenant.slug}")
    return 0
