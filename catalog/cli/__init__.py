"""The ``catalog`` command: one parser, one module per command group, each thin over the core.

Modules depend on ``catalog.cli.common`` (database, running a body, output) and never on each
other or on this package, so there is no cycle: ``__init__`` imports the command modules, they
import ``common``. Configuration errors end in one ``catalog: ...`` line and exit status 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from catalog.cli import backup, grants, migrate, serve, stdio, templates, tenants, tokens, transfer
from catalog.config_error import ConfigError

# In the order `catalog --help` lists them.
COMMAND_MODULES = (serve, stdio, migrate, tenants, tokens, grants, templates, transfer, backup)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help()
        return 2
    try:
        return args.run(args)
    except ConfigError as exc:
        print(f"catalog: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="catalog", description="A multi-tenant catalogue of MCP resources.")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.add_commands(commands)
    return parser
