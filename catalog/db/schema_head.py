"""The migration scripts' head, read without importing alembic or SQLAlchemy: what a database at
head has in ``alembic_version``. ``catalog.db.migrate`` asks it at every start-up, and ``catalog
token list`` before it reads the embedded database on the bare driver (the full command would
migrate a database that is not at head first)."""

from __future__ import annotations

import ast
import importlib.resources
from pathlib import Path

VERSION_TABLE = "alembic_version"  # alembic's default, which the migrations keep
REVISIONS = f"SELECT version_num FROM {VERSION_TABLE}"  # one row, the revision, once migrated


def scripts_location() -> Path:
    return Path(str(importlib.resources.files("catalog.migrations")))


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
