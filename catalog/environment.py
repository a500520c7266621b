"""The environment as a command reads it without pydantic, where that is certain to agree with
:mod:`catalog.settings`: ``catalog token list`` starts in a tenth of the time when it need not
import pydantic (nor SQLAlchemy, which the settings' URL check needs).

:func:`quick_settings` answers only for an environment whose every ``CATALOG_`` setting it can
vouch for: plainly valid database URLs (:func:`plain_database_url`: a URL in a strict subset of
what SQLAlchemy parses, read the way its asyncpg dialect reads it), plainly written numbers within
the model's bounds and the model's own choices (:data:`CHECKED`), and settings whose every value
the model accepts. With no database URL it names the embedded database's home. For any other
environment -- a pooler, a value it cannot vouch for (valid or not), a name spelled in another
case -- it answers None, and the command reads the settings model, which names what is wrong: a
value the model refuses is refused with the model's own words.
``tests/unit/test_environment.py`` holds these names, bounds and rules to the model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

PREFIX = "CATALOG_"
DEFAULT_STATEMENT_TIMEOUT_MS = 15_000

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
# PostgreSQL URLs (the second and third for the server only): vouched for when plain.
DATABASE_URLS = frozenset({"database_url", "listen_database_url", "read_database_url"})


@dataclass(frozen=True)
class Number:
    """A numeric setting's type and bounds, as the model declares them (``Field(gt=, ge=, le=)``)."""

    kind: type[int] | type[float]
    gt: float | None = None
    ge: float | None = None
    le: float | None = None

    def accepts(self, value: str) -> bool:
        """True when ``value`` is a plainly written number within the bounds; False for anything
        else, valid or not (the model judges that)."""
        if not (_PLAIN_INT if self.kind is int else _PLAIN_DECIMAL).fullmatch(value):
            return False
        number = float(value) if self.kind is float else int(value)
        return (
            (self.gt is None or number > self.gt)
            and (self.ge is None or number >= self.ge)
            and (self.le is None or number <= self.le)
        )


@dataclass(frozen=True)
class Choice:
    """Values of a ``Literal`` setting the quick reader accepts as written: the model's own values
    (those a bare connection serves: no pooler) and '' where the model reads it as the default."""

    values: frozenset[str]

    def accepts(self, value: str) -> bool:
        return value in self.values


MAX_TTL_MS = 2**31 - 1  # a day is 86,400,000: the bound only keeps the value an int32 in every client
MAX_PAGE_SIZE = 1000

# Every other field of catalog.settings.Settings and what the model accepts of it
# (tests/unit/test_environment.py holds each to the model's declaration and validators).
CHECKED: dict[str, Number | Choice] = {
    # PgBouncer in transaction mode would break the bare connection's prepared statements.
    "database_pooler": Choice(frozenset({"none"})),
    "read_max_lag_ms": Number(int, ge=0, le=3_600_000),
    "pool_size": Number(int, ge=1, le=1000),
    "pool_wait_seconds": Number(float, gt=0, le=300),
    "max_blob_bytes": Number(int, gt=0),
    "statement_timeout_ms": Number(int, ge=0),
    "rate_limit_per_minute": Number(float, ge=0),
    "rate_limit_burst": Number(int, ge=1),
    "max_streams_per_credential": Number(int, ge=1),
    "max_streams_per_tenant": Number(int, ge=1),
    "max_anonymous_streams": Number(int, ge=0),
    "max_streams": Number(int, ge=1),
    "max_header_bytes": Number(int, ge=1024, le=16 * 1024 * 1024),
    "header_timeout_seconds": Number(float, gt=0, le=3600),
    "max_connections_per_address": Number(int, ge=0),
    "workers": Number(int, ge=1),
    "session_idle_seconds": Number(float, gt=0, le=7 * 24 * 3600),
    "max_sessions_per_caller": Number(int, ge=1),
    "max_sessions_per_tenant": Number(int, ge=1),
    "oauth_leeway_seconds": Number(int, ge=0, le=600),
    "oauth_jwks_wait_seconds": Number(float, gt=0, le=30),
    "mcp_fast_path": Choice(frozenset({"on", "off", "shadow", ""})),
    "read_ttl_ms": Number(int, ge=0, le=MAX_TTL_MS),
    "list_ttl_ms": Number(int, ge=0, le=MAX_TTL_MS),
    "templates_ttl_ms": Number(int, ge=0, le=MAX_TTL_MS),
    "page_size": Number(int, ge=1, le=MAX_PAGE_SIZE),
    "mcp_tools": Choice(frozenset({"on", "off", ""})),
    "metrics_access": Choice(frozenset({"admin", "open"})),
    "log_format": Choice(frozenset({"json", "text", ""})),
}

# Every field of catalog.settings.Settings (a test holds the two equal): a CATALOG_ variable that
# names none of them is ignored by the model too (``extra="ignore"``), e.g. CATALOG_TOKEN.
SETTINGS = ANY_VALUE | DATABASE_URLS | frozenset(CHECKED)

# Numbers as a person writes them (no sign but '-', no spaces, underscores, exponents or leading
# zeros; at most 18 digits before the point, 17 after): what the model certainly reads as Python does.
_PLAIN_INT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")
_PLAIN_DECIMAL = re.compile(r"-?(?:0|[1-9][0-9]{0,17})(?:\.[0-9]{1,17})?")
# asyncpg's own ``ssl`` modes: the one URL option the dialect hands over as a string that
# ``asyncpg.connect`` takes as written (``sslmode``, libpq's name, it refuses).
SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")

# Characters a user name, password or database name may hold here: RFC 3986's unreserved and
# sub-delimiters, and percent-escapes (decoded as SQLAlchemy decodes them). None of ':', '/', '@',
# '?', '[' or ']', so SQLAlchemy's URL pattern cannot split such a URL any other way.
_PART = r"(?:[A-Za-z0-9._~!$&'()*+,;=-]|%[0-9A-Fa-f]{2})"
PLAIN_DATABASE_URL = re.compile(
    rf"postgresql(?:\+[A-Za-z0-9_]+)?://"
    rf"(?:(?P<user>{_PART}*)(?::(?P<password>{_PART}*))?@)?"
    r"(?P<host>[A-Za-z0-9.-]+)?(?::(?P<port>[0-9]{1,5}))?"
    rf"(?:/(?P<database>{_PART}*))?"
    # A Unix socket's directory as the query's host (libpq's and SQLAlchemy's way of writing it;
    # the embedded server's own URL): an absolute path, '/' written as is or as %2F, and none of
    # ':' ',' '+' '&' that the dialect would read as a port, a second host, a space or a new option.
    r"(?:\?host=(?P<socket>(?:/|%2[Ff])(?:[A-Za-z0-9._~-]|/|%2[Ff])*))?"
    rf"(?:(?(socket)&|\?)ssl=(?P<ssl>{'|'.join(SSL_MODES)}))?"
)


@dataclass(frozen=True)
class PlainDatabaseUrl:
    """A PostgreSQL URL's parts as SQLAlchemy's asyncpg dialect hands them to ``asyncpg.connect``."""

    host: str | None
    port: int | None
    user: str | None
    password: str | None
    database: str | None
    ssl: str | None = None

    def connect_args(self) -> dict[str, str | int]:
        # The dialect passes only the parts that are set and not empty (``translate_connect_args``),
        # and a query option as written: asyncpg's defaults (PGHOST, the login's name, ...) fill the
        # others alike.
        parts = {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "database": self.database,
            "ssl": self.ssl,
        }
        return {name: value for name, value in parts.items() if value}


def plain_database_url(value: str) -> PlainDatabaseUrl | None:
    """``value``'s parts when it is a plainly valid PostgreSQL URL (no query but ``host=`` a socket
    directory and ``ssl=MODE``, no IPv6 host, no ':' '/' '@' inside a part), else None (the settings
    model judges it)."""
    match = PLAIN_DATABASE_URL.fullmatch(value)
    if match is None:
        return None
    user, password, host, port, database = match.group("user", "password", "host", "port", "database")
    socket = match.group("socket")
    return PlainDatabaseUrl(
        host=unquote(socket) if socket else host,  # the query's host stands for the authority's
        port=int(port) if port else None,
        user=unquote(user) if user is not None else None,
        password=unquote(password) if password is not None else None,
        database=unquote(database) if database is not None else None,
        ssl=match.group("ssl"),
    )


def _plain_urls(name: str, value: str) -> bool:
    """Whether the model certainly accepts ``value`` for one of :data:`DATABASE_URLS` (the list is
    split as ``catalog.settings`` splits it; an empty one is unset)."""
    if name == "read_database_url":
        return all(plain_database_url(url.strip()) for url in value.split(",") if url.strip())
    return value == "" or plain_database_url(value) is not None


def default_home() -> Path:
    """``CATALOG_HOME`` unset: the platform's user data directory (the settings' default too)."""
    import platformdirs  # only when it is unset: `catalog --help` and a set home need it not

    return Path(platformdirs.user_data_dir("catalog"))


@dataclass(frozen=True)
class QuickSettings:
    """What ``catalog token list`` needs of the settings: the configured database, or else (None)
    the embedded one under ``home``; and the statement timeout."""

    database: PlainDatabaseUrl | None
    home: Path | None  # read only for the embedded database
    statement_timeout_ms: int


def quick_settings(environ: Mapping[str, str]) -> QuickSettings | None:
    """What a command needs of the settings, when ``environ`` is one the settings model certainly
    reads the same way and accepts; None otherwise (then the model reads it, and names what it
    refuses)."""
    values: dict[str, str] = {}
    for key, value in environ.items():
        if key[: len(PREFIX)].upper() != PREFIX:
            continue
        name = key[len(PREFIX) :].lower()
        if name not in SETTINGS:
            continue
        if key != PREFIX + name.upper():
            return None  # the model reads names in any case: which spelling wins is its to say
        if name in ANY_VALUE:
            pass
        elif name in DATABASE_URLS:
            if not _plain_urls(name, value):
                return None
        elif not CHECKED[name].accepts(value):
            return None
        values[name] = value
    url = values.get("database_url", "")
    database = plain_database_url(url) if url else None  # '' is unset, as for the model
    home = None
    if database is None:
        # The model's Path(value) exactly: no expansion of '~', '' is the working directory.
        home = Path(values["home"]) if "home" in values else default_home()
    return QuickSettings(
        database=database,
        home=home,
        statement_timeout_ms=int(values.get("statement_timeout_ms", DEFAULT_STATEMENT_TIMEOUT_MS)),
    )
