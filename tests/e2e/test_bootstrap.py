"""One bootstrap builds every engine and ``Catalog``; the CLI is a package without an import cycle.

The demo's seeding once built an engine of its own that skipped the app-role probe, so on a
superuser login it wrote outside row-level security. The proof here is what PostgreSQL itself
records: a trigger notes ``current_user`` for every row written.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from catalog.core.catalog import Catalog
from catalog.core.principal import Principal
from catalog.core.resources import upsert_resource
from catalog.core.schemas.resources import ResourceIn
from catalog.core.tenants import get_tenant
from catalog.db.engine import create_engine
from catalog.db.scope import APP_ROLE
from catalog.demo import DEMO_TENANT, seed_demo
from catalog.events.listener import listener_dsn
from catalog.settings import Settings

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "catalog"

WRITTEN_TABLES = ("resources", "resource_versions", "blobs", "templates", "grants", "audit_log")


@pytest.fixture
async def superuser(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    """The test login, which must be a superuser for the app-role switch to matter at all."""
    conn = await asyncpg.connect(listener_dsn(database_url))
    try:
        if not await conn.fetchval("SELECT rolsuper FROM pg_roles WHERE rolname = current_user"):
            pytest.skip("the test login is not a superuser: row-level security binds it directly")
        yield conn
    finally:
        await conn.close()


async def note_writers(conn: asyncpg.Connection) -> None:
    """Record (current_user, table) for every row inserted into the catalogue's tenant tables."""
    await conn.execute(
        """
        CREATE TABLE written_by (role text, tbl text);
        GRANT INSERT ON written_by TO PUBLIC;
        CREATE FUNCTION note_writer() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO written_by VALUES (current_user, TG_TABLE_NAME);
            RETURN NULL;
        END $$;
        """
    )
    for table in WRITTEN_TABLES:
        await conn.execute(
            f"CREATE TRIGGER note_writer AFTER INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION note_writer()"
        )


async def writers(conn: asyncpg.Connection) -> set[tuple[str, str]]:
    return {(r["role"], r["tbl"]) for r in await conn.fetch("SELECT DISTINCT role, tbl FROM written_by")}


async def test_demo_seeding_writes_every_row_as_the_app_role(
    settings: Settings, superuser: asyncpg.Connection
) -> None:
    await note_writers(superuser)
    await seed_demo(settings)
    assert await writers(superuser) == {(APP_ROLE, table) for table in WRITTEN_TABLES}

    # The control: an engine that skips the probe writes as the superuser login, past the wall.
    engine = create_engine(settings.async_database_url(), pool_size=1)
    try:
        catalog = Catalog(engine=engine, settings=settings)
        tenant = await get_tenant(catalog, DEMO_TENANT)
        body = ResourceIn.model_validate({"uri": "test://control", "name": "c", "text": "x"})
        await upsert_resource(catalog, Principal.system("test"), tenant, body)
    finally:
        await engine.dispose()
    login = await superuser.fetchval("SELECT current_user")
    assert (login, "resources") in await writers(superuser)


def calls(path: Path, names: set[str]) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in names:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}()")
    return found


def test_only_the_bootstrap_builds_engines_and_catalogs() -> None:
    """Outside ``catalog/db`` (the engine factory itself, and Alembic's maintenance engine), no
    module but ``catalog/bootstrap.py`` creates an engine or a ``Catalog``."""
    makers = {"create_engine", "create_async_engine", "Catalog"}

    def may_build(path: Path) -> bool:
        where = path.relative_to(PACKAGE)
        return where == Path("bootstrap.py") or where.parts[0] == "db"

    offenders = [
        call for path in sorted(PACKAGE.rglob("*.py")) if not may_build(path) for call in calls(path, makers)
    ]
    assert offenders == []


def cli_imports(path: Path) -> set[str]:
    """The ``catalog.cli`` modules ``path`` imports (at any depth of the file)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "catalog.cli":
                found.update(f"catalog.cli.{alias.name}" for alias in node.names)
            elif node.module.startswith("catalog.cli."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("catalog.cli"))
    return found


def test_the_cli_package_has_no_import_cycle() -> None:
    """``catalog.cli`` imports the command modules; they import only ``catalog.cli.common``, which
    imports no other part of the CLI."""
    package = PACKAGE / "cli"
    modules = sorted(p for p in package.glob("*.py") if p.name != "__init__.py")
    assert {p.stem for p in modules} >= {"serve", "migrate", "tenants", "tokens", "grants", "templates"}
    for path in modules:
        allowed = set() if path.stem == "common" else {"catalog.cli.common"}
        assert cli_imports(path) <= allowed, path.name
    assert not (PACKAGE / "cli.py").exists() and not (PACKAGE / "cli_catalog.py").exists()


def test_the_console_script_and_python_m_catalog_both_run_main() -> None:
    entry = ROOT / "pyproject.toml"
    assert 'catalog = "catalog.cli:main"' in entry.read_text()
    result = subprocess.run(
        [sys.executable, "-m", "catalog", "--help"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0
    for command in ("serve", "migrate", "tenant", "token", "grant", "template", "import", "export"):
        assert f"    {command} " in result.stdout
