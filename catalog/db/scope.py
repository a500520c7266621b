"""What a connection to the catalogue's database carries, in plain Python (no SQLAlchemy to
import): the session's parameters, the app role and its probe, and the settings row-level security
reads for a tenant scope.

``catalog.db.engine`` builds its engine from these; the driver executor's one-connection reads
(``catalog.core.direct.token_list``, what ``catalog token list`` runs) bind the same scope and
role on a bare asyncpg connection without paying for SQLAlchemy's import.
"""

from __future__ import annotations

from dataclasses import dataclass

APP_ROLE = "catalog_app"
APPLICATION_NAME = "catalog"
# A request waits this long at most for a connection (a dead server refuses at once; a silent
# network or an exhausted pool must not hold a request for the library defaults of 60 s / 30 s).
CONNECT_TIMEOUT_S = 5.0
COMMAND_TIMEOUT_S = 60.0


def _quoted(value: str) -> str:
    """``value`` as an SQL string literal (``standard_conforming_strings``, on since PostgreSQL 9.1)."""
    return "'" + value.replace("'", "''") + "'"


# Superusers bypass RLS, even forced; ordinary table owners do not (the tables FORCE it). So a
# connection switches role only when its login is a superuser and the migration could create the
# role. The role is a literal: the one statement runs unchanged through SQLAlchemy and asyncpg.
APP_ROLE_PROBE = (
    "SELECT rolsuper AS is_superuser, EXISTS (SELECT 1 FROM pg_roles WHERE rolname = "
    + _quoted(APP_ROLE)
    + ") AS role_exists FROM pg_roles WHERE rolname = current_user"
)


def app_role(is_superuser: bool, role_exists: bool) -> str | None:
    """The role a connection runs as, from the answer of ``APP_ROLE_PROBE``."""
    return APP_ROLE if is_superuser and role_exists else None


@dataclass(frozen=True)
class TenantScope:
    """Which tenant's rows a transaction may touch: one tenant, or (platform work) all of them."""

    tenant_id: int | None = None
    all_tenants: bool = False

    @classmethod
    def tenant(cls, tenant_id: int) -> TenantScope:
        return cls(tenant_id=tenant_id)

    @classmethod
    def platform(cls) -> TenantScope:
        return cls(all_tenants=True)


def session_settings(session: dict[str, str]) -> list[tuple[str, str]]:
    """The settings a session would carry, as (name, value) pairs, for one transaction behind a
    transaction pooler."""
    settings = [("statement_timeout", session["statement_timeout"])]
    if session["role"]:
        settings.append(("role", session["role"]))
    return settings


def scope_settings(scope: TenantScope) -> list[tuple[str, str]]:
    """The settings row-level security reads for ``scope`` (migration 0001's policies)."""
    tenant = "" if scope.tenant_id is None else str(int(scope.tenant_id))
    return [("catalog.tenant_id", tenant), ("catalog.all_tenants", "on" if scope.all_tenants else "off")]


def set_local(settings: list[tuple[str, str]], *, literal: bool = False) -> str:
    """One SELECT setting each of ``settings`` for the rest of the transaction: its values as
    parameters ($1, $2, ...), or as literals for a simple-query message (which takes none)."""
    values = (_quoted(value) if literal else f"${n}" for n, (_, value) in enumerate(settings, 1))
    return "SELECT " + ", ".join(
        f"set_config({_quoted(name)}, {value}, true)"
        for (name, _), value in zip(settings, values, strict=True)
    )
