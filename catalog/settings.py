"""Settings: read once from the environment (prefix ``CATALOG_``), validated with clear messages.

Secrets that are not given (the cursor/request-state signing key and the platform admin token) are
generated once and kept, mode 0600, in ``CATALOG_HOME`` so every worker and every restart agrees.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from catalog.config_error import ConfigError as ConfigError  # its home before it moved out
from catalog.config_error import first_line as first_line
from catalog.environment import DEFAULT_STATEMENT_TIMEOUT_MS, MAX_PAGE_SIZE, MAX_TTL_MS, default_home

if TYPE_CHECKING:
    # SQLAlchemy is imported where a URL is read: `catalog --help` reads none.
    from sqlalchemy.engine import URL

DEFAULT_READ_TTL_MS = 10_000
DEFAULT_LIST_TTL_MS = 10_000
DEFAULT_TEMPLATES_TTL_MS = 60_000
DEFAULT_PAGE_SIZE = 100

LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "[::1]"]
LOOPBACK_ORIGINS = ["http://127.0.0.1", "http://localhost", "http://[::1]"]


def _split_list(value: object) -> object:
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CATALOG_", extra="ignore")

    database_url: str | None = Field(default=None, description="PostgreSQL URL (asyncpg driver)")
    # What CATALOG_DATABASE_URL points at: PostgreSQL itself, or PgBouncer in transaction pooling
    # mode (no session state survives a transaction: see catalog.db.engine.create_engine).
    database_pooler: Literal["none", "pgbouncer"] = "none"
    # The LISTEN connection needs a session of its own: straight to PostgreSQL, never a pooler.
    listen_database_url: str | None = Field(default=None, description="direct PostgreSQL URL for LISTEN")
    # Read replicas (PostgreSQL streaming standbys, or a pooler in front of them; comma-separated)
    # for MCP reads, listings and completions (catalog.core.replicas); they share
    # CATALOG_DATABASE_POOLER's mode and CATALOG_POOL_SIZE (per replica). Everything else stays on
    # CATALOG_DATABASE_URL. A replica more than CATALOG_READ_MAX_LAG_MS behind is skipped (0: never).
    read_database_url: Annotated[list[str], NoDecode] = Field(default_factory=list)
    read_max_lag_ms: int = Field(default=5000, ge=0, le=3_600_000)
    # Database connections per app process, and how long a request waits for one before it is
    # answered 503 with Retry-After (the pool exhausted), instead of queueing until it times out.
    pool_size: int = Field(default=30, ge=1, le=1000)
    pool_wait_seconds: float = Field(default=10.0, gt=0, le=300)
    home: Path = Field(default_factory=default_home)
    admin_token: SecretStr | None = None
    secret_key: SecretStr | None = None
    public_tenant: str | None = None
    allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=lambda: list(LOOPBACK_HOSTS))
    allowed_origins: Annotated[list[str], NoDecode] = Field(default_factory=lambda: list(LOOPBACK_ORIGINS))
    max_blob_bytes: int = Field(default=16 * 1024 * 1024, gt=0)
    statement_timeout_ms: int = Field(default=DEFAULT_STATEMENT_TIMEOUT_MS, ge=0)
    # Requests per caller (its bearer credential, else its address) per minute, and the burst it
    # may spend at once; 0 turns the limit off. Each of `serve --workers N` allows 1/N of it.
    rate_limit_per_minute: float = Field(default=6000, ge=0)
    rate_limit_burst: int = Field(default=400, ge=1)
    # Open streams (listen, 2025 GET) per process: per credential, per tenant, all anonymous
    # callers together, and in all.
    max_streams_per_credential: int = Field(default=100, ge=1)
    max_streams_per_tenant: int = Field(default=5000, ge=1)
    max_anonymous_streams: int = Field(default=100, ge=0)
    max_streams: int = Field(default=10000, ge=1)
    # What one connection may cost `catalog serve` before a request runs (catalog.serving): the
    # bytes of a request head (request line and headers; more is answered 431 and the connection
    # closed, so a huge header is never held), the seconds a connection has to send a whole head
    # (then 408 and closed; a stream already answered is not affected), and the connections one
    # client address may hold open at once (more are answered 503; 0 turns the cap off, as behind a
    # reverse proxy, where every client shares the proxy's address). Each of `serve --workers N`
    # allows 1/N of the connections per address.
    max_header_bytes: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024)
    header_timeout_seconds: float = Field(default=10.0, gt=0, le=3600)
    max_connections_per_address: int = Field(default=256, ge=0)
    # Set by `catalog serve --workers N` for its workers (per-process shares of the limits above).
    workers: int = Field(default=1, ge=1)
    # A 2025-11-25 session unused for this long ends (an open GET stream keeps it in use).
    session_idle_seconds: float = Field(default=1800, gt=0, le=7 * 24 * 3600)
    # Live 2025-11-25 sessions (used within the idle time) one caller may hold (a credential; an
    # anonymous caller: its address), and one tenant; counted in PostgreSQL, so across every worker
    # and host. Beyond either, `initialize` is refused with 429 until one ends or idles out.
    max_sessions_per_caller: int = Field(default=100, ge=1)
    max_sessions_per_tenant: int = Field(default=10_000, ge=1)
    # OAuth 2.1 resource server (JWT access tokens); off unless issuer, audience and JWKS are all set.
    oauth_issuer: str | None = None
    oauth_audience: str | None = Field(default=None, description="the canonical /mcp URL tokens must name")
    oauth_jwks: str | None = Field(default=None, description="JWKS file path or https URL")
    oauth_tenant_claim: str = "tenant"
    oauth_admin_scope: str = "catalog:admin"
    # Scopes an agent should ask the authorization server for (advertised for /mcp, in its metadata
    # and in every 401 challenge, AUTH-4; comma-separated). Default: ``public``, the one scope every
    # tenant's grants can name (what anonymous callers hold); set it to a tenant's own read scopes.
    oauth_scopes: Annotated[list[str], NoDecode] = Field(default_factory=lambda: ["public"])
    # Clock skew allowed on a JWT's exp/nbf; a stream opened with a JWT ends at exp plus this.
    oauth_leeway_seconds: int = Field(default=30, ge=0, le=600)
    # The longest a request waits for the issuer's JWKS (a URL, fetched in the background) when no
    # key set is known yet, or a refetch for an unknown kid is due; past it: 503 naming the key set.
    oauth_jwks_wait_seconds: float = Field(default=2.0, gt=0, le=30)
    # Which executor answers the 2026-07-28 requests the fast path can answer (reads, list pages,
    # completions, listens; catalog.mcp.fast): ``on`` the fast path, ``off`` the SDK's handlers,
    # ``shadow`` the fast path, then the SDK's handlers run the same request (their answer is not
    # sent) and every difference is logged and counted (catalog_mcp_fast_path_differences_total).
    mcp_fast_path: Literal["on", "off", "shadow"] = "on"
    # The ``ttlMs`` of MCP results (CACHE-*): how long a client may answer again from its cache (the
    # SDK's client does) instead of asking; 0 says not to keep it. Reads, list pages, template pages.
    read_ttl_ms: int = Field(default=DEFAULT_READ_TTL_MS, ge=0, le=MAX_TTL_MS)
    list_ttl_ms: int = Field(default=DEFAULT_LIST_TTL_MS, ge=0, le=MAX_TTL_MS)
    templates_ttl_ms: int = Field(default=DEFAULT_TEMPLATES_TTL_MS, ge=0, le=MAX_TTL_MS)
    # Entries per ``resources/list`` and ``resources/templates/list`` page (both executors).
    page_size: int = Field(default=DEFAULT_PAGE_SIZE, ge=1, le=MAX_PAGE_SIZE)
    # The catalogue as read-only MCP tools (``search_resources``, ``list_resources``,
    # ``read_resource``; catalog.mcp.tools) besides the resource methods: ``off`` serves no tools
    # and advertises no ``tools`` capability.
    mcp_tools: Literal["on", "off"] = "on"
    # Who may read GET /metrics: the platform admin credential, or anyone who reaches the port.
    metrics_access: Literal["admin", "open"] = "admin"
    # Server log lines: json or text; unset, JSON unless stdout is a terminal.
    log_format: Literal["json", "text"] | None = None

    @property
    def oauth_enabled(self) -> bool:
        return bool(self.oauth_issuer and self.oauth_audience and self.oauth_jwks)

    @field_validator("allowed_hosts", "allowed_origins", "oauth_scopes", mode="before")
    @classmethod
    def _lists(cls, value: object) -> object:
        return _split_list(value)

    @field_validator("read_database_url", mode="before")
    @classmethod
    def _read_database_urls(cls, value: object) -> object:
        urls = _split_list(value)
        if isinstance(urls, list):
            for url in urls:
                _checked_database_url(url)
        return urls

    @field_validator("database_url", "listen_database_url")
    @classmethod
    def _database_url(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        return _checked_database_url(value)

    @field_validator("log_format", mode="before")
    @classmethod
    def _log_format(cls, value: object) -> object:
        return value.strip().lower() or None if isinstance(value, str) else value

    @field_validator("mcp_fast_path", "mcp_tools", mode="before")
    @classmethod
    def _on_off(cls, value: object) -> object:
        # Set but empty (``CATALOG_MCP_FAST_PATH=``) is the default, as for an unset variable.
        return value.strip().lower() or "on" if isinstance(value, str) else value

    @field_validator("public_tenant")
    @classmethod
    def _public_tenant(cls, value: str | None) -> str | None:
        return value or None

    @property
    def uses_embedded_database(self) -> bool:
        return self.database_url is None

    def async_database_url(self) -> URL:
        """The configured URL with the asyncpg driver, whatever driver the operator wrote."""
        from sqlalchemy.engine import make_url

        assert self.database_url is not None
        return make_url(self.database_url).set(drivername="postgresql+asyncpg")

    @property
    def behind_pooler(self) -> bool:
        return self.database_pooler != "none"

    def read_database_urls(self) -> list[URL]:
        """The read replicas' URLs with the asyncpg driver (empty: every read on the primary)."""
        from sqlalchemy.engine import make_url

        return [make_url(url).set(drivername="postgresql+asyncpg") for url in self.read_database_url]

    def listen_url(self) -> URL:
        """Where the LISTEN connection goes: ``CATALOG_LISTEN_DATABASE_URL``, else the database URL.

        Behind a transaction pooler there is no default: LISTEN through it would be registered on
        a server connection that the pooler hands to other clients, and notifications would be
        lost without an error."""
        if self.listen_database_url is not None:
            from sqlalchemy.engine import make_url

            return make_url(self.listen_database_url)
        if self.behind_pooler:
            raise ConfigError(
                f"CATALOG_LISTEN_DATABASE_URL: required with CATALOG_DATABASE_POOLER={self.database_pooler}"
                " (the LISTEN connection must go straight to PostgreSQL)"
            )
        return self.async_database_url()

    def ensure_home(self) -> Path:
        try:
            self.home.mkdir(parents=True, exist_ok=True)
            # A probe of this process's own: ``serve`` and a command (or two hosts) sharing a home
            # start at once, and one fixed name let one remove the other's probe mid-check.
            handle, probe = tempfile.mkstemp(prefix=".write-probe-", dir=self.home)
            os.close(handle)
            os.unlink(probe)
        except OSError as exc:
            raise ConfigError(f"CATALOG_HOME {self.home} is not writable: {exc.strerror or exc}") from None
        return self.home

    def signing_key(self) -> bytes:
        if self.secret_key is not None:
            return self.secret_key.get_secret_value().encode()
        return _kept_secret(self.ensure_home() / "secret_key", lambda: secrets.token_urlsafe(48)).encode()

    @property
    def admin_token_path(self) -> Path:
        """Where a generated platform admin token is kept (0600), when CATALOG_ADMIN_TOKEN is unset."""
        return self.home / "admin_token"

    def platform_admin_token(self) -> tuple[str, bool]:
        """The platform admin token, and whether it was generated just now (so `serve` prints it)."""
        if self.admin_token is not None:
            return self.admin_token.get_secret_value(), False
        self.ensure_home()
        path = self.admin_token_path
        existed = path.exists()
        token = _kept_secret(path, lambda: "cat_" + secrets.token_urlsafe(32))
        return token, not existed


def _checked_database_url(value: str) -> str:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(value)
    except ArgumentError as exc:
        raise ValueError(f"not a database URL ({exc})") from None
    if url.get_backend_name() != "postgresql":
        raise ValueError("must be a postgresql URL, e.g. postgresql+asyncpg://user@host/db")
    return value


def _kept_secret(path: Path, generate: object) -> str:
    """Read a secret kept in a 0600 file, creating it atomically on first use."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    value = generate()  # type: ignore[operator]
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(value)
    try:
        # link() fails if another process won the race; then its value is the one kept.
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    return path.read_text().strip()


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    from pydantic import ValidationError

    try:
        return Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        name = "CATALOG_" + str(first["loc"][0]).upper() if first["loc"] else "settings"
        raise ConfigError(f"{name}: {first['msg']}") from None
