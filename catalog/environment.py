"""The environment as a command reads it without pydantic, where that is certain to agree with
:mod:`catalog.settings`: ``catalog token list`` starts in a tenth of the time when it need not
import pydantic (nor SQLAlchemy, which the settings' URL check needs).

:func:`quick_settings` answers only for an environment whose every ``CATALOG_`` setting it can
vouch for: a plainly valid ``CATALOG_DATABASE_URL`` (:func:`plain_database_url`: a URL in a
strict subset of what SQLAlchemy parses, read the way its asyncpg dialect reads it), a plain
``CATALOG_STATEMENT_TIMEOUT_MS``, and settings whose every value the model accepts. For any other
environment -- an embedded database, a pooler, a setting it does not know, a value it cannot vouch
for -- it answers None, and the command reads the settings model, which names what is wrong.
``tests/unit/test_environment.py`` holds these names and rules to the model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote

PREFIX = "CATALOG_"
DEFAULT_STATEMENT_TIMEOUT_MS = 15_000

# Every field of catalog.settings.Settings (a test holds the two equal): a CATALOG_ variable that
# names none of them is ignored by the model too (``extra="ignore"``), e.g. CATALOG_TOKEN.
SETTINGS = frozenset(
    {
        "database_url",
        "database_pooler",
        "listen_database_url",
        "read_database_url",
        "read_max_lag_ms",
        "pool_size",
        "pool_wait_seconds",
        "home",
        "admin_token",
        "secret_key",
        "public_tenant",
        "allowed_hosts",
        "allowed_origins",
        "max_blob_bytes",
        "statement_timeout_ms",
        "rate_limit_per_minute",
        "rate_limit_burst",
        "max_streams_per_credential",
        "max_streams_per_tenant",
        "max_anonymous_streams",
        "max_streams",
        "max_header_bytes",
        "header_timeout_seconds",
        "max_connections_per_address",
        "workers",
        "session_idle_seconds",
        "max_sessions_per_caller",
        "max_sessions_per_tenant",
        "oauth_issuer",
        "oauth_audience",
        "oauth_jwks",
        "oauth_tenant_claim",
        "oauth_admin_scope",
        "oauth_scopes",
        "oauth_leeway_seconds",
        "oauth_jwks_wait_seconds",
        "mcp_fast_path",
        "read_ttl_ms",
        "list_ttl_ms",
        "templates_ttl_ms",
        "page_size",
        "mcp_tools",
        "metrics_access",
        "log_format",
    }
)

# Settings the model accepts with any value (free text, secrets, paths, comma-separated lists of
# free text): the quick reader need not judge them (a property test proves the model agrees).
ANY_VALUE = frozenset(
    {
        "home",
        "admin_token",
        "secret_key",
        "public_tenant",
        "allowed_hosts",
        "allowed_origins",
        "oauth_issuer",
        "oauth_audience",
        "oauth_jwks",
        "oauth_tenant_claim",
        "oauth_admin_scope",
        "oauth_scopes",
    }
)

# Characters a user name, password or database name may hold here: RFC 3986's unreserved and
# sub-delimiters, and percent-escapes (decoded as SQLAlchemy decodes them). None of ':', '/', '@',
# '?', '[' or ']', so SQLAlchemy's URL pattern cannot split such a URL any other way.
_PART = r"(?:[A-Za-z0-9._~!$&'()*+,;=-]|%[0-9A-Fa-f]{2})"
PLAIN_DATABASE_URL = re.compile(
    rf"postgresql(?:\+[A-Za-z0-9_]+)?://"
    rf"(?:(?P<user>{_PART}*)(?::(?P<password>{_PART}*))?@)?"
    r"(?P<host>[A-Za-z0-9.-]+)?(?::(?P<port>[0-9]{1,5}))?"
    rf"(?:/(?P<database>{_PART}*))?"
)
_PLAIN_MILLISECONDS = re.compile(r"0|[1-9][0-9]{0,8}")


@dataclass(frozen=True)
class PlainDatabaseUrl:
    """A PostgreSQL URL's parts as SQLAlchemy's asyncpg dialect hands them to ``asyncpg.connect``."""

    host: str | None
    port: int | None
    user: str | None
    password: str | None
    database: str | None

    def connect_args(self) -> dict[str, str | int]:
        # The dialect passes only the parts that are set and not empty (``translate_connect_args``):
        # asyncpg's defaults (PGHOST, the login's name, ...) fill the others alike.
        parts = {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "database": self.database,
        }
        return {name: value for name, value in parts.items() if value}


def plain_database_url(value: str) -> PlainDatabaseUrl | None:
    """``value``'s parts when it is a plainly valid PostgreSQL URL (no query, no IPv6 host, no
    ':' '/' '@' inside a part), else None (the settings model judges it)."""
    match = PLAIN_DATABASE_URL.fullmatch(value)
    if match is None:
        return None
    user, password, host, port, database = match.group("user", "password", "host", "port", "database")
    return PlainDatabaseUrl(
        host=host,
        port=int(port) if port else None,
        user=unquote(user) if user is not None else None,
        password=unquote(password) if password is not None else None,
        database=unquote(database) if database is not None else None,
    )


@dataclass(frozen=True)
class QuickSettings:
    database: PlainDatabaseUrl
    statement_timeout_ms: int


def quick_settings(environ: Mapping[str, str]) -> QuickSettings | None:
    """What a command on the configured database needs of the settings, when ``environ`` is one
    the settings model certainly reads the same way; None otherwise (then the model reads it)."""
    database: PlainDatabaseUrl | None = None
    timeout = DEFAULT_STATEMENT_TIMEOUT_MS
    for key, value in environ.items():
        if key[: len(PREFIX)].upper() != PREFIX:
            continue
        name = key[len(PREFIX) :].lower()
        if name not in SETTINGS or name in ANY_VALUE:
            continue
        if key != PREFIX + name.upper():
            return None  # the model reads names in any case: which spelling wins is its to say
        if name == "database_url":
            database = plain_database_url(value)
            if database is None:
                return None
        elif name == "statement_timeout_ms" and _PLAIN_MILLISECONDS.fullmatch(value):
            timeout = int(value)
        else:
            return None
    if database is None:
        return None  # the embedded database: started, and migrated, by the full command
    return QuickSettings(database, timeout)
