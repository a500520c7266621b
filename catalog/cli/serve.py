"""``catalog serve``: bind the socket, get the database ready, print where to connect, run uvicorn.

The order matters and each step is its own function; what is process-wide (the socket hand-over,
the collector, the workers and how they stop) is ``catalog.serving``'s:

1. bind the port first -- a port in use is one clear line before anything else starts;
2. the database: the configured one (refused unless at head) or the embedded one, started and
   migrated for the duration; its URL is handed to the workers through the environment. With one
   worker the app is imported meanwhile, while the embedded server starts (its processes, not this
   one's: a warm start is mostly imports, so the two overlap);
3. ``--demo`` seeding, secrets created once (not raced by the workers), the banner;
4. ``catalog.serving.serve`` on the bound socket (the socket object, never its descriptor).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import sys
from typing import TYPE_CHECKING

from catalog.cli.common import Commands
from catalog.config_error import ConfigError
from catalog.runtime import collector_paused

if TYPE_CHECKING:
    from catalog.settings import Settings


def add_commands(commands: Commands) -> None:
    serve = commands.add_parser("serve", help="run the HTTP server (MCP endpoint and admin API)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=1)
    serve.add_argument(
        "--demo", action="store_true", help="seed tenant 'demo' and let anonymous callers read it"
    )
    serve.set_defaults(run=serve_command)


def _bind(host: str, port: int, workers: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if workers > 1 and sys.platform.startswith("linux"):
        # Each worker then listens on a socket of its own on this port and the kernel spreads new
        # connections over them (catalog.serving.listening_socket); one shared socket hands most of
        # them to whichever worker wakes first, long-lived streams included.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        reason = "is in use" if exc.errno == 98 else f"cannot be bound ({exc.strerror})"
        raise ConfigError(f"port {port} on {host} {reason}") from None
    sock.set_inheritable(True)
    return sock


def _raise_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _after_uvicorn(signum: int, frame: object) -> None:
    """uvicorn re-raises the signal that stopped it once it has shut down; by then there is nothing
    left to interrupt, so return and let ``serve`` finish (and stop the embedded PostgreSQL)."""


def serve_command(args: argparse.Namespace) -> int:
    if args.workers < 1:
        raise ConfigError("--workers must be at least 1")
    if args.workers > 1:  # this process supervises: the workers pause their own collectors
        return _serve(args)
    with collector_paused():  # until the server has started (catalog.serving settles it)
        return _serve(args)


def _serve(args: argparse.Namespace) -> int:
    from catalog.bootstrap import database, require_head
    from catalog.settings import get_settings

    settings = get_settings()
    settings.ensure_home()
    if settings.behind_pooler:
        settings.listen_url()  # it must be set: one line now, not a failure in every worker
    sock = _bind(args.host, args.port, args.workers)
    # Until uvicorn runs, SIGTERM unwinds through the finally blocks (which stop the embedded
    # PostgreSQL) instead of killing the process mid-way.
    signal.signal(signal.SIGTERM, _raise_exit)
    # One worker serves in this process: its app is imported while the embedded PostgreSQL starts.
    # Several are spawned processes that import it themselves, so this one would do it for nothing.
    meanwhile = _import_app if args.workers == 1 else None
    with database(settings, meanwhile=meanwhile) as url:
        if settings.database_url is not None:
            require_head(url)
        settings = _worker_settings(url, demo=args.demo)
        if args.demo:
            from catalog.demo import seed_demo

            asyncio.run(seed_demo(settings))
        _banner(settings, args)
        for handled in (signal.SIGTERM, signal.SIGINT):
            signal.signal(handled, _after_uvicorn)
        from catalog.serving import serve

        serve(sock, args.workers)  # the socket object, never its descriptor: see catalog.serving
    return 0


def _import_app() -> None:
    from catalog.serving import import_app

    import_app()


def _worker_settings(url: str, *, demo: bool) -> Settings:
    """The settings the workers will read: the environment they inherit, with the database's URL."""
    from catalog.settings import get_settings

    os.environ["CATALOG_DATABASE_URL"] = url  # the workers' database, embedded or not
    if demo:
        os.environ.setdefault("CATALOG_PUBLIC_TENANT", "demo")
    get_settings.cache_clear()
    return get_settings()


def _banner(settings: Settings, args: argparse.Namespace) -> None:
    token_line = admin_token_line(settings, terminal=sys.stdout.isatty())
    settings.signing_key()  # created now, once, rather than raced by the workers
    for line in [*banner_lines(args.host, args.port, settings.allowed_hosts), token_line]:
        print(f"catalog: {line}", flush=True)
    if args.demo:
        print("catalog: demo tenant 'demo' is readable anonymously", flush=True)


def admin_token_line(settings: Settings, *, terminal: bool) -> str:
    """Where the platform admin token is: the token itself only once, and only to a terminal; stdout
    that is not one is a log stream (``docker logs``, a log shipper), which must never hold it."""
    token, generated = settings.platform_admin_token()
    if settings.admin_token is not None:
        return "platform admin token: the one CATALOG_ADMIN_TOKEN gives"
    path = settings.admin_token_path
    if generated and terminal:
        return f"platform admin token (shown once, kept in {path}): {token}"
    if generated:
        return f"platform admin token generated and kept in {path} (not printed: stdout is not a terminal)"
    return f"platform admin token kept in {path}"


# -- where clients connect ------------------------------------------------------------------------

WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def client_hosts(host: str) -> list[str]:
    """Names a client can put in a URL to reach a server bound to ``host``: the host itself, or for
    a wildcard address this machine's name, then its interface addresses, loopback last."""
    if host not in WILDCARD_HOSTS:
        return [host]
    import ipaddress

    import psutil

    families = (socket.AF_INET,) if host == "0.0.0.0" else (socket.AF_INET, socket.AF_INET6)
    outside, loopback = [socket.gethostname()], []
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family not in families:
                continue
            ip = ipaddress.ip_address(address.address.split("%", 1)[0])
            if not ip.is_link_local:
                (loopback if ip.is_loopback else outside).append(str(ip))
    return list(dict.fromkeys([*outside, *sorted(loopback)]))


def url_host(name: str) -> str:
    return f"[{name}]" if ":" in name else name


def host_allowed(name: str, port: int, allowed_hosts: list[str]) -> bool:
    """Whether /mcp accepts ``Host: name:port`` (an entry without a port allows any port)."""
    return url_host(name) in allowed_hosts or f"{url_host(name)}:{port}" in allowed_hosts


def banner_lines(host: str, port: int, allowed_hosts: list[str], hosts: list[str] | None = None) -> list[str]:
    """Where to connect, as ``serve`` prints it: never a wildcard address, which no client can use.

    Bound to every address, the URL shown first uses a name ``CATALOG_ALLOWED_HOSTS`` accepts (so it
    works as printed), the others follow, and names that /mcp would refuse (421) are pointed out.
    """
    hosts = hosts if hosts is not None else client_hosts(host)
    accepted = [name for name in hosts if host_allowed(name, port, allowed_hosts)]
    first = (accepted or hosts)[0]
    base = f"http://{url_host(first)}:{port}"
    lines = [f"MCP endpoint   {base}/mcp", f"admin API docs {base}/docs", f"console        {base}/console"]
    if host in WILDCARD_HOSTS:
        others = [f"http://{url_host(name)}:{port}/mcp" for name in hosts if name != first]
        if others:
            lines.append(f"listening on every address ({host or '0.0.0.0'}): also {', '.join(others)}")
        refused = [name for name in hosts if name not in accepted]
        if refused:
            lines.append(
                f"note: /mcp answers 421 to a Host that CATALOG_ALLOWED_HOSTS does not list"
                f" (now {', '.join(allowed_hosts) or 'none'}): add {', '.join(refused)}"
                " to reach it by those names"
            )
    return lines
