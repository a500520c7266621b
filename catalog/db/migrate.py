"""Alembic, driven programmatically: the scripts ship inside the package as ``catalog.migrations``.

Alembic is imported only to change the schema (or check it against the models): what every start-up
asks -- the schema's revision and the scripts' head -- is one query and a read of the scripts'
``revision``/``down_revision`` lines, which is all alembic would do for a straight line of
migrations (about 0.2 s of imports less before a server is ready).
"""

from __future__ import annotations

import ast
import asyncio
import importlib.resources
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from sqlalchemy import text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy.engine import Connection

VERSION_TABLE = "alembic_version"  # alembic's default, which the migrations keep


def scripts_location() -> Path:
    return Path(str(importlib.resources.files("catalog.migrations")))


def alembic_config(url: str | URL, *, stdout: TextIO | None = None) -> Config:
    from alembic.config import Config

    config = Config(stdout=stdout) if stdout is not None else Config()
    config.set_main_option("script_location", str(scripts_location()))
    rendered = make_url(url).set(drivername="postgresql+asyncpg").render_as_string(hide_password=False)
    # ConfigParser interpolation would eat a '%' in a password.
    config.set_main_option("sqlalchemy.url", rendered.replace("%", "%%"))
    return config


def head_revision() -> str:
    """The revision the scripts end at (what a database at head has in ``alembic_version``)."""
    head = linear_head(scripts_location() / "versions")
    return head if head is not None else alembic_head()


def alembic_head() -> str:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config("postgresql+asyncpg://unused/unused"))
    head = script.get_current_head()
    assert head is not None
    return head


_SCRIPT_NAMES = ("revision", "down_revision", "branch_labels", "depends_on")


def linear_head(versions: Path) -> str | None:
    """The last revision when the scripts in ``versions`` form one straight line (each names the one
    before it as its ``down_revision``, no branch labels, no dependencies), read without importing
    them; None for anything else (a branch, a merge, a name that is not a literal), which is left to
    alembic."""
    down: dict[str, str | None] = {}
    for path in sorted(versions.glob("*.py")):
        if path.name == "__init__.py":
            continue
        values = _script_values(path)
        if values is None:
            return None
        revision, down_revision = values.get("revision"), values.get("down_revision")
        if not isinstance(revision, str) or revision in down:
            return None
        if not (down_revision is None or isinstance(down_revision, str)):
            return None
        if values.get("branch_labels") is not None or values.get("depends_on") is not None:
            return None
        down[revision] = down_revision
    heads = set(down) - {before for before in down.values() if before is not None}
    if len(heads) != 1:
        return None
    head = heads.pop()
    walked: set[str] = set()
    step: str | None = head
    while step is not None:  # back from the head, through every script once, to the base
        if step in walked or step not in down:
            return None
        walked.add(step)
        step = down[step]
    return head if len(walked) == len(down) else None


def _script_values(path: Path) -> dict[str, object] | None:
    """The module-level literal values of a migration script's identifiers (None: unreadable)."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None
    values: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            targets, value = [node.target], node.value
        elif isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            targets, value = node.targets, node.value
        else:
            continue
        for target in targets:
            assert isinstance(target, ast.Name)
            if target.id in _SCRIPT_NAMES:
                try:
                    values[target.id] = ast.literal_eval(value)
                except ValueError:
                    return None
    return values


async def current_revision(url: str | URL) -> str | None:
    """The revision the database at ``url`` is at; None for a schema alembic has never touched."""
    # No named prepared statements: this check may run through a transaction pooler (serve's
    # start-up), where a name left on a server session collides with the next client's.
    engine = create_async_engine(
        make_url(url).set(drivername="postgresql+asyncpg"),
        poolclass=NullPool,
        connect_args={"statement_cache_size": 0, "prepared_statement_cache_size": 0},
    )
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(_current_revision)
    finally:
        await engine.dispose()


def _current_revision(conn: Connection) -> str | None:
    """What ``MigrationContext.get_current_revision`` answers, in two queries without alembic (which
    is asked only for what it would refuse: several rows, several heads)."""
    exists = conn.execute(text("SELECT to_regclass(:table) IS NOT NULL"), {"table": VERSION_TABLE}).scalar()
    if not exists:
        return None
    rows = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
    if len(rows) <= 1:
        return rows[0] if rows else None
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(conn).get_current_revision()


def upgrade(url: str | URL, revision: str = "head") -> None:
    from alembic import command

    command.upgrade(alembic_config(url), revision)


def downgrade(url: str | URL, revision: str) -> None:
    from alembic import command

    command.downgrade(alembic_config(url), revision)


def check(url: str | URL) -> None:
    """Raise ``alembic.util.exc.AutogenerateDiffsDetected`` when the models and migrations differ."""
    from alembic import command

    command.check(alembic_config(url))


def is_at_head(url: str | URL) -> bool:
    return asyncio.run(current_revision(url)) == head_revision()
