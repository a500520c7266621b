"""Property-based leak test: random tenants, resources, templates, grants and
tokens, created through the admin API of a live server; for every principal, everything observable
on every surface must be exactly what the visibility rule allows.

The expected sets come from :class:`Oracle`, a small restatement of the rule in docs/contract.md
("Who sees what") written here from the text, without calling ``catalog.core.visibility``:

* a resource is visible to a principal of its tenant who is an admin, or who holds a scope that some
  grant of that tenant gives over it: ``{uri}`` equal to its URI, ``{uriPrefix}`` a string prefix of
  its URI (or, for a prefix ending in ``/``, its URI plus that ``/``), ``{tag}`` one of its tags;
* a template likewise, a prefix grant matching its literal prefix (the text before the first ``{``),
  a uri grant naming the template itself (as does a prefix ending in ``/`` without it), a tag
  grant one of its tags;
* invisible and non-existent are the same ``-32602 Resource not found`` with ``data.uri``.

Surfaces checked per principal (opaque tokens, admin or not, of every tenant; the anonymous caller of
the public tenant; one JWT): the read-only tools (flat and tree listings, search, ``read_resource``
of every URI), every ``resources/list`` page (following ``nextCursor``; pages are made
small so that every listing spans several pages), another principal's cursor (``-32602`` unless both
have the same standing), ``resources/read`` of every URI of the universe (all tenants' stored URIs and
some that only templates answer: contents exactly, or the one not-found error), directory reads,
template bodies, ``resources/templates/list``, completion values of every template argument, a
``subscriptions/listen`` stream subscribed to every URI while every resource of every tenant changes,
the admin listings of admin credentials (own tenant only; 403 elsewhere), 403 ``insufficient_scope``
for the others, 401 for a revoked and an expired token, and the same list and reads in a 2025-11-25
session. The same list, templates, reads, completion and tools over ``catalog stdio`` (one process
per token, for a sample of the opaque tokens: :data:`STDIO_TOKENS`). Fewer examples:
``CATALOG_LEAK_EXAMPLES=5``.

Then a marker resource is added to every tenant and two more rounds of
streams run, each waiting on the marker's ``updated`` (never on time): **directories** (streams
subscribed only to directory URIs: a descendant fires exactly when it and a subscribed directory
are visible, so a hidden directory never fires, however it is touched) and **tags** (every resource
re-tagged, a tag added or removed, or deleted: a stream hears ``updated`` exactly for the URIs
visible before or after, and ``list_changed`` exactly when its visible set changed), followed by the
listings and reads of every principal against the re-tagged world.

Last, **revocation**: every opaque token is revoked through the admin API while it
listens; each stream ends with ``CREDENTIAL_ENDED`` before grants widen every scope, the anonymous
caller and the JWT hear those grants, and every revoked token is refused on both surfaces.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import os
import re
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import httpx
import httpx2
import mcp_types as types
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ResourcesListChanged, ResourceUpdated, SubscriptionLost
from mcp.shared.exceptions import MCPError

from catalog.app import create_app
from catalog.mcp.context import CREDENTIAL_ENDED
from tests.conftest import _admin, through_pooler_env
from tests.e2e.test_oauth import AUDIENCE, ISSUER, Issuer
from tests.mcp_helpers import mcp_settings, serve
from tests.processes import catalog_env

ADMIN_TOKEN = "cat_test-platform-admin-token"
API = "/admin/v1"
PUBLIC = "pub"  # CATALOG_PUBLIC_TENANT: kept across examples (emptied at the start of each)
PAGE = 2  # items per MCP list page in this test (the server's 100 would need hundreds of rows)
WAIT = 20.0  # seconds any expected notification may take

SCOPES = ["s1", "s2", "public"]
TAGS = ["red", "blue"]
SEGMENTS = ["a", "b", "ab"]
ROOTS = ["file:///", "test://h/"]
STORED = [  # 33 URIs: prefixes overlap as strings (a, ab) and as paths (a, a/b, a/b/a)
    root + "/".join(parts)
    for root in ROOTS
    for depth in (1, 2, 3)
    for parts in itertools.product(SEGMENTS, repeat=depth)
    if depth < 3 or (root == "file:///" and parts[0] == "a")
]
# Never stored: answered only by a template, or by nothing at all.
UNSTORED = [
    "file:///a/zz",
    "file:///zz",
    "file:///a/zz/b",
    "test://h/zz/zz",
    "test://h/bzz",
    "test://nowhere/at/all",
]
PREFIXES = [
    "file:///",
    "file:///a",
    "file:///a/",
    "file:///ab",
    "file:///a/b",
    "test://",
    "test://h/",
    "test://h/a",
]
# (uriTemplate, body): a body with {var} placeholders, or None (listed, completable, never read).
TEMPLATES = [
    ("file:///a/{x}", "A:{x}"),
    ("file:///{x}", "R:{x}"),
    ("file:///a/{x}/b", "AB:{x}"),
    ("test://h/{x}/{y}", "H:{x}:{y}"),
    ("test://h/b{x}", None),
    ("file:///ab/{x}", "AB2:{x}"),
]
EXAMPLES = int(os.environ.get("CATALOG_LEAK_EXAMPLES", "30"))


# -- the generated world --------------------------------------------------------------------------


@dataclass(frozen=True)
class Res:
    uri: str
    kind: str  # text | blob | dir
    tags: frozenset[str]


@dataclass(frozen=True)
class Tpl:
    uri_template: str
    body: str | None
    tags: frozenset[str]

    @property
    def literal_prefix(self) -> str:
        return self.uri_template.split("{", 1)[0]

    @property
    def variables(self) -> list[str]:
        return re.findall(r"\{(\w+)\}", self.uri_template)


@dataclass(frozen=True)
class Grant:
    scope: str
    kind: str  # uri | uriPrefix | tag
    value: str


@dataclass(frozen=True)
class Tok:
    scopes: frozenset[str]
    admin: bool


@dataclass(frozen=True)
class TenantSpec:
    resources: tuple[Res, ...]
    templates: tuple[Tpl, ...]
    grants: tuple[Grant, ...]
    tokens: tuple[Tok, ...]


@dataclass(frozen=True)
class World:
    tenants: tuple[TenantSpec, ...]  # tenants[0] is the public tenant
    jwt: tuple[int, frozenset[str], bool] | None  # (tenant index, scopes, admin)
    dead_tenant: int  # where the revoked and the expired tokens live


tags_st = st.frozensets(st.sampled_from(TAGS))
scopes_st = st.frozensets(st.sampled_from(SCOPES))


@st.composite
def tenant_specs(draw: Any) -> TenantSpec:
    uris = draw(st.lists(st.sampled_from(STORED), min_size=1, max_size=9, unique=True))
    # Directories over stored children (so directory reads meet hidden children) half of the time.
    parents = sorted({uri.rsplit("/", 1)[0] for uri in uris} & set(STORED) - set(uris))
    uris += draw(st.lists(st.sampled_from(parents), unique=True)) if parents else []
    kinds = st.sampled_from(["text", "text", "blob", "dir"])
    resources = tuple(Res(uri, "dir" if uri in parents else draw(kinds), draw(tags_st)) for uri in uris)
    chosen = draw(st.lists(st.sampled_from(TEMPLATES), max_size=3, unique=True))
    templates = tuple(Tpl(t, body, draw(tags_st)) for t, body in chosen)
    selector = st.one_of(
        st.tuples(st.just("uri"), st.sampled_from(uris) | st.sampled_from(STORED + UNSTORED)),
        st.tuples(st.just("uriPrefix"), st.sampled_from(PREFIXES)),
        st.tuples(st.just("tag"), st.sampled_from(TAGS)),
    )
    grants = tuple(
        Grant(scope, kind, value)
        for scope, (kind, value) in draw(
            st.lists(st.tuples(st.sampled_from(SCOPES), selector), max_size=5, unique=True)
        )
    )
    tokens = tuple(
        Tok(scopes, admin)
        for scopes, admin in draw(
            st.lists(st.tuples(scopes_st, st.sampled_from([False, False, True])), min_size=1, max_size=3)
        )
    )
    return TenantSpec(resources, templates, grants, tokens)


@st.composite
def worlds(draw: Any) -> World:
    tenants = tuple(draw(st.lists(tenant_specs(), min_size=2, max_size=3)))
    jwt = draw(st.none() | st.tuples(st.integers(0, len(tenants) - 1), scopes_st, st.booleans()))
    return World(tenants, jwt, draw(st.integers(0, len(tenants) - 1)))


# -- the oracle: the contract's rule, restated --------------------------------------------------


@dataclass(frozen=True)
class Who:
    """A principal as the test knows it: how it authenticates and what the rule says it holds."""

    label: str
    tenant: int
    kind: str  # token | jwt | anonymous
    scopes: frozenset[str]
    admin: bool
    token: str | None  # None: anonymous

    @property
    def standing(self) -> tuple[Any, ...]:
        """What a cursor is bound to: two principals with the same standing see the same set."""
        return (self.tenant, self.kind, self.admin, self.scopes)


def _variable_pattern(template: str) -> re.Pattern[str]:
    """RFC 6570 level 1 ``{var}``: a run (maybe empty) of unreserved or percent-encoded characters."""
    out, names = [], []
    for piece in re.split(r"(\{\w+\})", template):
        if piece.startswith("{"):
            names.append(piece[1:-1])
            out.append(f"(?P<{piece[1:-1]}>(?:[A-Za-z0-9\\-._~]|%[0-9A-Fa-f]{{2}})*)")
        else:
            out.append(re.escape(piece))
    return re.compile("".join(out))


def template_match(tpl: Tpl, uri: str) -> dict[str, str] | None:
    found = _variable_pattern(tpl.uri_template).fullmatch(uri)
    return found.groupdict() if found else None


@dataclass
class Oracle:
    world: World
    slugs: list[str]

    def grants_for(self, who: Who) -> list[Grant]:
        return [g for g in self.world.tenants[who.tenant].grants if g.scope in who.scopes]

    def sees(self, who: Who, tenant: int, res: Res) -> bool:
        if tenant != who.tenant:
            return False
        if who.admin:
            return True
        for g in self.grants_for(who):
            if g.kind == "uri" and g.value == res.uri:
                return True
            if g.kind == "uriPrefix" and res.uri.startswith(g.value):
                return True
            if g.kind == "uriPrefix" and g.value.endswith("/") and res.uri == g.value[:-1]:
                return True
            if g.kind == "tag" and g.value in res.tags:
                return True
        return False

    def sees_template(self, who: Who, tpl: Tpl) -> bool:
        if who.admin:
            return True
        for g in self.grants_for(who):
            if g.kind == "uri" and g.value == tpl.uri_template:
                return True
            if g.kind == "uriPrefix" and tpl.literal_prefix.startswith(g.value):
                return True
            if g.kind == "uriPrefix" and g.value.endswith("/") and tpl.uri_template == g.value[:-1]:
                return True
            if g.kind == "tag" and g.value in tpl.tags:
                return True
        return False

    def sees_uri(self, who: Who, uri: str) -> bool:
        """Whether ``who`` sees the stored resource at ``uri`` of its own tenant."""
        res = next((r for r in self.world.tenants[who.tenant].resources if r.uri == uri), None)
        return res is not None and self.sees(who, who.tenant, res)

    def visible(self, who: Who) -> list[Res]:
        spec = self.world.tenants[who.tenant]
        return sorted(
            (r for r in spec.resources if self.sees(who, who.tenant, r)), key=lambda r: r.uri.encode()
        )

    def visible_templates(self, who: Who) -> list[Tpl]:
        spec = self.world.tenants[who.tenant]
        return sorted(
            (t for t in spec.templates if self.sees_template(who, t)), key=lambda t: t.uri_template.encode()
        )

    def content(self, tenant: int, res: Res) -> tuple[str, str | None, str | bytes]:
        if res.kind == "blob":
            return (res.uri, "application/octet-stream", blob_of(self.slugs[tenant], res.uri))
        return (res.uri, "text/plain", text_of(self.slugs[tenant], res.uri))

    def read(self, who: Who, uri: str) -> list[tuple[str, str | None, str | bytes]] | None:
        """The contents ``resources/read`` of ``uri`` must give, or None for "Resource not found"."""
        spec = self.world.tenants[who.tenant]
        stored = next((r for r in spec.resources if r.uri == uri), None)
        if stored is not None and self.sees(who, who.tenant, stored):
            if stored.kind != "dir":
                return [self.content(who.tenant, stored)]
            children = [
                r
                for r in self.visible(who)
                if r.kind != "dir" and r.uri.startswith(uri + "/") and len(r.uri) > len(uri) + 1
            ]
            return [self.content(who.tenant, r) for r in children]
        candidates = [
            t
            for t in self.visible_templates(who)
            if t.body is not None and template_match(t, uri) is not None
        ]
        if not candidates:
            return None
        best = min(candidates, key=lambda t: (-len(t.literal_prefix), t.uri_template.encode()))
        values = template_match(best, uri) or {}
        body = best.body or ""
        for name, value in values.items():
            body = body.replace("{" + name + "}", value)
        return [(uri, "text/plain", body)]

    def completion(self, who: Who, tpl: Tpl, argument: str, partial: str) -> list[str] | None:
        """The values completion must offer, or None for "Unknown resource template"."""
        # Named by its uriTemplate: the caller's tenant may hold a template of that name or not.
        own = next(
            (t for t in self.world.tenants[who.tenant].templates if t.uri_template == tpl.uri_template), None
        )
        if own is None or not self.sees_template(who, own):
            return None
        values = set()
        for res in self.visible(who):
            found = template_match(own, res.uri)
            if found is not None and found[argument].startswith(partial):
                values.add(found[argument])
        return sorted(values)


def text_of(slug: str, uri: str) -> str:
    return f"{slug} {uri}"


def blob_of(slug: str, uri: str) -> bytes:
    return f"{slug} {uri}".encode() + b"\x00\xff"


# -- the live server, shared by every example ---------------------------------------------------


@dataclass
class Live:
    base_url: str
    database_dsn: str
    issuer: Issuer
    loop: asyncio.AbstractEventLoop
    counter: Iterator[int] = field(default_factory=itertools.count)
    stdio_env: dict[str, str] = field(default_factory=dict)  # for `catalog stdio` on the same database

    @property
    def mcp_url(self) -> str:
        return self.base_url + "/mcp"


@pytest.fixture(scope="module")
def live(postgres_server: Any, template_database: str, tmp_path_factory: Any) -> Iterator[Live]:
    # The test drives its own event loop (hypothesis runs the examples of a synchronous test).
    loop = asyncio.new_event_loop()
    name = f"catalog_leaks_{uuid.uuid4().hex[:10]}"
    loop.run_until_complete(
        _admin(postgres_server, f'CREATE DATABASE "{name}" TEMPLATE "{template_database}"')
    )
    home = Path(tmp_path_factory.mktemp("leaks"))
    issuer = Issuer(home)
    app_settings = mcp_settings(
        postgres_server.url_for(name),
        home / "home",
        public_tenant=PUBLIC,
        page_size=PAGE,
        oauth_issuer=ISSUER,
        oauth_audience=AUDIENCE,
        oauth_jwks=str(issuer.jwks_path),
    )
    try:
        with serve(create_app(app_settings)) as (base_url, _server_loop, _stop):
            stdio_env = catalog_env(
                **through_pooler_env(postgres_server.url_for(name)),
                CATALOG_HOME=str(home / "stdio-home"),
                CATALOG_SECRET_KEY=app_settings.secret_key.get_secret_value(),  # type: ignore[union-attr]
                CATALOG_ADMIN_TOKEN=ADMIN_TOKEN,
                CATALOG_PUBLIC_TENANT=PUBLIC,
                CATALOG_PAGE_SIZE=str(PAGE),
            )
            state = Live(base_url, postgres_server.dsn_for(name), issuer, loop, stdio_env=stdio_env)
            loop.run_until_complete(_create_public_tenant(state))
            yield state
    finally:
        loop.run_until_complete(_admin(postgres_server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        loop.close()


def admin_http(live: Live, token: str = ADMIN_TOKEN) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=live.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


async def _create_public_tenant(live: Live) -> None:
    async with admin_http(live) as http:
        assert (await http.post(f"{API}/tenants", json={"slug": PUBLIC})).status_code == 201


@asynccontextmanager
async def mcp_client(live: Live, who: Who, mode: str = "2026-07-28") -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {who.token}"} if who.token else {}
    transport = streamable_http_client(
        live.mcp_url, http_client=httpx2.AsyncClient(headers=headers, timeout=30)
    )
    async with Client(transport, mode=mode, cache=None) as client:
        yield client


@asynccontextmanager
async def stdio_client(live: Live, slug: str, who: Who) -> AsyncIterator[Client]:
    """``catalog stdio --tenant slug`` with ``who``'s token, launched as a desktop client would."""
    assert who.token is not None
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "catalog", "stdio", "--tenant", slug],
        env={**live.stdio_env, "CATALOG_TOKEN": who.token},
    )
    async with Client(params, mode="2026-07-28", cache=None, read_timeout_seconds=60) as client:
        yield client


# -- building an example through the admin API ----------------------------------------------------


async def _all_items(http: httpx.AsyncClient, path: str, **params: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        response = await http.get(path, params={**params, **({"cursor": cursor} if cursor else {})})
        assert response.status_code == 200, response.text
        page = response.json()
        items += page["items"]
        cursor = page.get("nextCursor")
        if not cursor:
            return items


async def _empty_public_tenant(http: httpx.AsyncClient) -> None:
    base = f"{API}/tenants/{PUBLIC}"
    for kind in ("resources", "templates", "grants"):
        for item in await _all_items(http, f"{base}/{kind}"):
            assert (await http.delete(f"{base}/{kind}/{item['id']}")).status_code == 204


@dataclass
class Built:
    slugs: list[str]
    principals: list[Who]
    dead: list[str]  # revoked and expired tokens
    resource_ids: dict[tuple[int, str], int]


async def build(live: Live, world: World) -> Built:
    run = next(live.counter)
    slugs = [PUBLIC] + [f"leak-{run}-{i}" for i in range(1, len(world.tenants))]
    principals: list[Who] = [Who("anonymous", 0, "anonymous", frozenset({"public"}), False, None)]
    ids: dict[tuple[int, str], int] = {}
    async with admin_http(live) as http:
        await _empty_public_tenant(http)
        for slug in slugs[1:]:
            assert (await http.post(f"{API}/tenants", json={"slug": slug})).status_code == 201
        for index, (slug, spec) in enumerate(zip(slugs, world.tenants, strict=True)):
            base = f"{API}/tenants/{slug}"
            for res in spec.resources:
                body: dict[str, Any] = {
                    "uri": res.uri,
                    "name": res.uri.rsplit("/", 1)[-1],
                    "tags": sorted(res.tags),
                }
                if res.kind == "dir":
                    body["mimeType"] = "inode/directory"
                elif res.kind == "blob":
                    body |= {"mimeType": "application/octet-stream", "blob": _b64(blob_of(slug, res.uri))}
                else:
                    body |= {"mimeType": "text/plain", "text": text_of(slug, res.uri)}
                created = await http.post(f"{base}/resources", json=body)
                assert created.status_code == 201, created.text
                ids[(index, res.uri)] = created.json()["id"]
            for tpl in spec.templates:
                body = {"uriTemplate": tpl.uri_template, "name": "t", "tags": sorted(tpl.tags)}
                if tpl.body is not None:
                    body |= {"text": tpl.body, "mimeType": "text/plain"}
                assert (await http.post(f"{base}/templates", json=body)).status_code == 201
            for grant in spec.grants:
                created = await http.post(
                    f"{base}/grants", json={"scope": grant.scope, grant.kind: grant.value}
                )
                assert created.status_code == 201, created.text
            for number, tok in enumerate(spec.tokens):
                minted = await http.post(
                    f"{base}/tokens", json={"scopes": sorted(tok.scopes), "admin": tok.admin}
                )
                assert minted.status_code == 201, minted.text
                label = f"{slug}/token{number}{'-admin' if tok.admin else ''}{sorted(tok.scopes)}"
                principals.append(Who(label, index, "token", tok.scopes, tok.admin, minted.json()["token"]))
        # The strongest credentials, made dead: an admin token revoked, an admin token expired.
        base = f"{API}/tenants/{slugs[world.dead_tenant]}/tokens"
        revoked = (await http.post(base, json={"admin": True, "scopes": SCOPES})).json()
        assert (await http.delete(f"{base}/{revoked['id']}")).status_code == 204
        expired = (
            await http.post(base, json={"admin": True, "scopes": SCOPES, "expiresAt": "2999-01-01T00:00:00Z"})
        ).json()
    conn = await asyncpg.connect(live.database_dsn)
    try:  # time passes, in the database: no sleeping
        await conn.execute(
            "UPDATE tokens SET expires_at = now() - interval '1 second' WHERE id = $1", expired["id"]
        )
    finally:
        await conn.close()
    if world.jwt is not None:
        tenant, scopes, admin = world.jwt
        claim = " ".join(sorted(scopes) + (["catalog:admin"] if admin else []))
        token = live.issuer.token(tenant=slugs[tenant], scope=claim, sub=f"agent-{run}")
        principals.append(
            Who(f"jwt:{slugs[tenant]}{sorted(scopes)}{admin}", tenant, "jwt", scopes, admin, token)
        )
    return Built(slugs, principals, [revoked["token"], expired["token"]], ids)


async def teardown(live: Live, built: Built) -> None:
    async with admin_http(live) as http:
        for slug in built.slugs[1:]:
            assert (await http.delete(f"{API}/tenants/{slug}")).status_code == 204


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()


# -- the checks -----------------------------------------------------------------------------------


def universe(world: World) -> list[str]:
    stored = {r.uri for spec in world.tenants for r in spec.resources}
    return sorted(stored | set(UNSTORED))


def contents_of(result: types.ReadResourceResult) -> list[tuple[str, str | None, str | bytes]]:
    import base64

    out: list[tuple[str, str | None, str | bytes]] = []
    for item in result.contents:
        if isinstance(item, types.BlobResourceContents):
            out.append((item.uri, item.mime_type, base64.b64decode(item.blob)))
        else:
            out.append((item.uri, item.mime_type, item.text))
    return out


def error_of(exc: MCPError) -> tuple[int, str, Any]:
    return (exc.code, exc.error.message, exc.error.data)


async def list_all(client: Client, templates: bool = False) -> tuple[list[Any], list[Any]]:
    items: list[Any] = []
    pages: list[Any] = []
    cursor = None
    while True:
        if templates:
            page = await client.list_resource_templates(cursor=cursor)
            items += page.resource_templates
        else:
            page = await client.list_resources(cursor=cursor)
            items += page.resources
        pages.append(page)
        cursor = page.next_cursor
        if cursor is None:
            return items, pages
        assert len(pages) < 100, "a listing that never ends"


async def check_mcp(live: Live, oracle: Oracle, who: Who, everything: list[str]) -> str | None:
    """List, templates, reads and completion of one principal (2026-07-28); returns its first cursor."""
    async with mcp_client(live, who) as client:
        return await mcp_checks(client, oracle, who, everything)


async def mcp_checks(client: Client, oracle: Oracle, who: Who, everything: list[str]) -> str | None:
    """:func:`check_mcp` on a session of any transport."""
    expected = oracle.visible(who)
    expected_templates = oracle.visible_templates(who)
    items, pages = await list_all(client)
    assert [r.uri for r in items] == [r.uri for r in expected], who.label
    assert [r.mime_type for r in items] == [
        {"dir": "inode/directory", "blob": "application/octet-stream"}.get(r.kind, "text/plain")
        for r in expected
    ]
    assert all(len(p.resources) <= PAGE for p in pages)
    scope = "private"  # whoever asks: one /mcp answers every tenant differently (CACHE-6)
    assert {p.cache_scope for p in pages} == {scope}, who.label

    templates, template_pages = await list_all(client, templates=True)
    assert [t.uri_template for t in templates] == [t.uri_template for t in expected_templates], who.label
    assert {p.cache_scope for p in template_pages} == {scope}

    for uri in everything:
        want = oracle.read(who, uri)
        try:
            got = contents_of(await client.read_resource(uri))
        except MCPError as exc:
            assert want is None, (who.label, uri, error_of(exc))
            # Invisible and absent: one error, naming only what the caller sent.
            assert error_of(exc) == (-32602, "Resource not found", {"uri": uri}), (who.label, uri)
            continue
        assert want is not None, (who.label, uri, "leaked", got)
        assert got == want, (who.label, uri)

    all_templates = {t.uri_template: t for spec in oracle.world.tenants for t in spec.templates}
    for _, tpl in sorted(all_templates.items()):
        ref = types.ResourceTemplateReference(type="ref/resource", uri=tpl.uri_template)
        for argument in tpl.variables:
            for partial in ("", "a"):
                want = oracle.completion(who, tpl, argument, partial)
                try:
                    result = await client.complete(ref, {"name": argument, "value": partial})
                except MCPError as exc:
                    assert want is None, (who.label, tpl, argument, error_of(exc))
                    assert error_of(exc) == (
                        -32602,
                        "Unknown resource template",
                        {"uri": tpl.uri_template},
                    )
                    continue
                assert want is not None, (who.label, tpl, "completion of an invisible template")
                assert result.completion.values == want, (who.label, tpl, argument, partial)
                assert (result.completion.total, result.completion.has_more) == (len(want), False)
    return pages[0].next_cursor


def tool_structured(result: types.CallToolResult, label: Any) -> dict[str, Any]:
    assert not result.is_error, (label, result.content)
    assert isinstance(result.structured_content, dict), label
    return result.structured_content


async def tool_pages(
    client: Client, name: str, arguments: dict[str, Any], label: Any
) -> list[dict[str, Any]]:
    """Every page of a listing tool, following ``nextCursor``."""
    pages: list[dict[str, Any]] = []
    args = dict(arguments)
    while True:
        page = tool_structured(await client.call_tool(name, args), (label, name, arguments))
        assert len(page["resources"]) + len(page.get("folders", [])) <= PAGE, label
        pages.append(page)
        if "nextCursor" not in page:
            return pages
        args["cursor"] = page["nextCursor"]
        assert len(pages) < 100, "a listing that never ends"


def tree_level(visible: list[Res], prefix: str) -> tuple[list[str], list[str]]:
    """One level of the URI tree at ``prefix``, restated: the folders (one ``/``-ended segment
    deeper; at the root ``scheme://authority/``) something visible is under, and the visible
    resources right there, each in URI byte order."""
    folders: set[str] = set()
    leaves: list[str] = []
    for res in visible:
        if not res.uri.startswith(prefix):
            continue
        start = len(prefix) if prefix else res.uri.index("://") + 3
        slash = res.uri.find("/", start)
        if slash < 0:
            leaves.append(res.uri)
        else:
            folders.add(res.uri[: slash + 1])
    return sorted(folders, key=str.encode), leaves


async def check_tools(live: Live, oracle: Oracle, who: Who, everything: list[str]) -> None:
    """The read-only tools (``catalog.mcp.tools``) show exactly what the resource methods show:
    flat and tree listings, a search (metadata, then text matches), and ``read_resource`` of every
    URI of the universe, invisible and absent alike one error naming only the URI sent."""
    async with mcp_client(live, who) as client:
        await tool_checks(client, oracle, who, everything)


async def tool_checks(client: Client, oracle: Oracle, who: Who, everything: list[str]) -> None:
    """:func:`check_tools` on a session of any transport."""
    visible = oracle.visible(who)
    flat = await tool_pages(client, "list_resources", {"recursive": True}, who.label)
    assert [e["uri"] for p in flat for e in p["resources"]] == [r.uri for r in visible], who.label
    for prefix in ("", "file:///", "file:///a/", "test://h/"):
        pages = await tool_pages(client, "list_resources", {"uriPrefix": prefix} if prefix else {}, who.label)
        folders = [f for p in pages for f in p["folders"]]
        leaves = [e["uri"] for p in pages for e in p["resources"]]
        assert (folders, leaves) == tree_level(visible, prefix), (who.label, prefix)
    # "ab" matches URIs (metadata); the slug's word matches only the text of the caller's tenant.
    found = await tool_pages(client, "search_resources", {"query": "ab"}, who.label)
    want = [r.uri for r in visible if "ab" in r.uri]
    assert [e["uri"] for p in found for e in p["resources"]] == want, who.label
    word = PUBLIC if who.tenant == 0 else "leak"
    found = await tool_pages(client, "search_resources", {"query": word}, who.label)
    want = [r.uri for r in visible if r.kind == "text"]
    assert [e["uri"] for p in found for e in p["resources"]] == want, (who.label, word)
    for uri in everything:
        expected = oracle.read(who, uri)
        result = await client.call_tool("read_resource", {"uri": uri})
        if expected is None:
            assert result.is_error, (who.label, uri, "leaked", result.structured_content)
            assert [c.text for c in result.content if isinstance(c, types.TextContent)] == [
                f"Resource not found: {uri}"
            ], (who.label, uri)
            continue
        items = tool_structured(result, (who.label, uri))["contents"]
        got = [
            (i["uri"], i.get("mimeType"), base64.b64decode(i["blob"]) if "blob" in i else i["text"])
            for i in items
        ]
        assert got == expected, (who.label, uri, "read_resource tool")


# A process per token (~1.5 s of CPU to start, on top of its requests): one token an example, not
# all; the sample moves through the tenants' tokens from example to example, so the 30 examples of a
# run reach admin and scoped tokens of several tenants. Started alongside the HTTP checks.
STDIO_TOKENS = 1


def stdio_sample(built: Built) -> list[Who]:
    """At most :data:`STDIO_TOKENS` opaque tokens, spread over the example's list of them (tenant by
    tenant), starting at a place the world's size picks, so the admin and the scoped tokens of
    different tenants take turns across examples."""
    tokens = [who for who in built.principals if who.kind == "token"]
    if not tokens:
        return []
    start = len(built.resource_ids) % len(tokens)
    tokens = tokens[start:] + tokens[:start]
    step = max(1, -(-len(tokens) // max(STDIO_TOKENS, 1)))
    return tokens[::step][:STDIO_TOKENS]


async def check_stdio(live: Live, oracle: Oracle, built: Built, who: Who, everything: list[str]) -> None:
    """``catalog stdio`` (no HTTP: the token from its environment, its tenant named on the command
    line) shows ``who`` exactly what HTTP does, in one session: every page of the listing, templates,
    reads of every URI of the universe (hidden and absent one error), completion, and the tools."""
    who = replace(who, label=f"stdio {who.label}")
    async with stdio_client(live, built.slugs[who.tenant], who) as client:
        await mcp_checks(client, oracle, who, everything)
        await tool_checks(client, oracle, who, everything)


async def check_foreign_cursor(live: Live, oracle: Oracle, owner: Who, cursor: str, other: Who) -> None:
    async with mcp_client(live, other) as client:
        try:
            page = await client.list_resources(cursor=cursor)
        except MCPError as exc:
            assert owner.standing != other.standing, (owner.label, other.label, error_of(exc))
            assert error_of(exc) == (-32602, "Invalid cursor", {"reason": "invalid_cursor"})
            return
    # Accepted only between principals who see the same set: the owner's second page.
    assert owner.standing == other.standing, (owner.label, other.label, "foreign cursor accepted")
    assert [r.uri for r in page.resources] == [r.uri for r in oracle.visible(owner)[PAGE : 2 * PAGE]]


async def check_legacy(live: Live, oracle: Oracle, who: Who, everything: list[str]) -> None:
    """The same list and reads in a 2025-11-25 session (not found is -32002 there)."""
    async with mcp_client(live, who, mode="legacy") as client:
        items, _ = await list_all(client)
        assert [r.uri for r in items] == [r.uri for r in oracle.visible(who)], who.label
        for uri in everything:
            want = oracle.read(who, uri)
            try:
                got = contents_of(await client.read_resource(uri))
            except MCPError as exc:
                assert want is None, (who.label, uri, error_of(exc))
                assert error_of(exc) == (-32002, "Resource not found", {"uri": uri})
                continue
            assert got == want, (who.label, uri, "2025 session")


async def check_admin_api(live: Live, oracle: Oracle, built: Built, who: Who) -> None:
    own = built.slugs[who.tenant]
    spec = oracle.world.tenants[who.tenant]
    async with admin_http(live, who.token or "") as http:
        if not who.admin:
            response = await http.get(f"{API}/tenants/{own}/resources")
            assert response.status_code == 403, (who.label, response.text)
            assert 'error="insufficient_scope"' in response.headers["www-authenticate"]
            return
        tenants = await _all_items(http, f"{API}/tenants")
        assert [t["slug"] for t in tenants] == [own], who.label
        resources = await _all_items(http, f"{API}/tenants/{own}/resources", limit=2)
        assert [r["uri"] for r in resources] == sorted((r.uri for r in spec.resources), key=str.encode)
        assert [sorted(r.get("tags", [])) for r in resources] == [
            sorted(r.tags) for r in sorted(spec.resources, key=lambda r: r.uri.encode())
        ]
        templates = await _all_items(http, f"{API}/tenants/{own}/templates", limit=2)
        assert sorted(t["uriTemplate"] for t in templates) == sorted(t.uri_template for t in spec.templates)
        grants = await _all_items(http, f"{API}/tenants/{own}/grants")
        assert sorted(
            (g["scope"], g.get("uri") or g.get("uriPrefix") or g.get("tag")) for g in grants
        ) == sorted((g.scope, g.value) for g in spec.grants)
        for slug in [s for s in built.slugs if s != own] + ["no-such-tenant"]:
            for kind in ("resources", "templates", "grants", "tokens", "audit", "changes"):
                response = await http.get(f"{API}/tenants/{slug}/{kind}")
                assert response.status_code == 403, (who.label, slug, kind, response.text)
                assert slug not in response.text or slug == "no-such-tenant"


async def check_dead_tokens(live: Live, built: Built) -> None:
    envelope = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "leaks", "version": "0"},
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "resources/list", "params": {"_meta": envelope}}
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "resources/list",
    }
    async with httpx.AsyncClient(timeout=30) as http:
        for token in built.dead:
            auth = {"Authorization": f"Bearer {token}"}
            response = await http.post(live.mcp_url, json=body, headers={**headers, **auth})
            assert (
                response.status_code == 401
                and 'error="invalid_token"' in response.headers["www-authenticate"]
            )
            assert "resources" not in response.json()
            admin = await http.get(f"{live.base_url}{API}/tenants", headers=auth)
            assert admin.status_code == 401


@dataclass
class Stream:
    who: Who
    updated: set[str] = field(default_factory=set)
    others: list[Any] = field(default_factory=list)
    list_changed: int = 0
    acked: asyncio.Event = field(default_factory=asyncio.Event)
    first: asyncio.Event = field(default_factory=asyncio.Event)
    second: asyncio.Event = field(default_factory=asyncio.Event)
    honoured: Any = None


async def listen(live: Live, stream: Stream, everything: list[str]) -> None:
    async with (
        mcp_client(live, stream.who) as client,
        client.listen(resources_list_changed=True, resource_subscriptions=everything) as sub,
    ):
        stream.honoured = sub.honored
        stream.acked.set()
        async for event in sub:
            if isinstance(event, ResourceUpdated):
                stream.updated.add(event.uri)
            elif isinstance(event, ResourcesListChanged):
                stream.list_changed += 1
                (stream.first if stream.list_changed == 1 else stream.second).set()
                if stream.list_changed == 2:
                    return
            else:
                stream.others.append(event)


async def check_listen(live: Live, oracle: Oracle, built: Built, everything: list[str]) -> None:
    """Every principal listens to every URI; every resource of every tenant changes. Each stream must
    get ``updated`` for exactly its visible resources."""

    async def writes() -> None:
        async with admin_http(live) as http:
            for (tenant, uri), rid in built.resource_ids.items():
                changed = await http.patch(
                    f"{API}/tenants/{built.slugs[tenant]}/resources/{rid}",
                    json={"description": f"changed {uri}"},
                )
                assert changed.status_code == 200, changed.text

    for s in await listen_round(live, built, everything, writes, "all"):
        assert s.updated == {r.uri for r in oracle.visible(s.who)}, s.who.label


async def listen_round(live: Live, built: Built, uris: list[str], writes: Any, phase: str) -> list[Stream]:
    """Every principal listens to ``uris`` (and list changes) while ``writes()`` runs. Waiting is on
    events, never on time: after the writes a grant (of a scope nobody holds) is created in every
    tenant, which every stream sees as ``list_changed``; once all have seen it, a second such grant.
    The second ``list_changed`` follows every event committed before the first grant (one stream's
    notifications go out in commit order; a batch's ``list_changed`` is sent before its
    ``updated``, hence two rounds). For writes that change no one's visible set."""
    streams = [Stream(who) for who in built.principals]
    tasks = [asyncio.create_task(listen(live, s, uris)) for s in streams]
    try:
        await _all_set([s.acked for s in streams], tasks)
        for s in streams:
            assert s.honoured.resource_subscriptions == uris and s.honoured.resources_list_changed
        await writes()
        async with admin_http(live) as http:
            for round_ in ("first", "second"):
                for slug in built.slugs:
                    sentinel = {"scope": f"nobody-{phase}-{round_}", "tag": f"sentinel-{round_}"}
                    assert (await http.post(f"{API}/tenants/{slug}/grants", json=sentinel)).status_code == 201
                await _all_set([getattr(s, round_) for s in streams], tasks)
        await asyncio.wait_for(asyncio.gather(*tasks), WAIT)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for s in streams:
        assert s.others == [], s.who.label
    return streams


async def _all_set(events: list[asyncio.Event], tasks: list[asyncio.Task[None]]) -> None:
    """Wait until every event is set; a stream that fails meanwhile raises its error."""
    waiting: asyncio.Future[Any] = asyncio.gather(*(e.wait() for e in events))
    pending: set[asyncio.Future[Any]] = {waiting, *(t for t in tasks if not t.done())}
    deadline = asyncio.get_running_loop().time() + WAIT
    try:
        while True:
            timeout = deadline - asyncio.get_running_loop().time()
            done, pending = await asyncio.wait(
                pending, timeout=max(timeout, 0), return_when=asyncio.FIRST_COMPLETED
            )
            if not done:
                raise AssertionError(f"no notification within {WAIT}s")
            if waiting in done:
                return
            for task in done:
                task.result()  # a stream that ended with an error raises it here
    finally:
        if not waiting.done():
            waiting.cancel()
            await asyncio.gather(waiting, return_exceptions=True)


# -- directories and tags ----------------------------------------------------------------------------

MARKER = "file:///zz"  # stored only in these phases; both tags, so every tag grant sees it


def with_marker(world: World) -> World:
    marker = Res(MARKER, "text", frozenset(TAGS))
    return World(
        tuple(
            TenantSpec((*spec.resources, marker), spec.templates, spec.grants, spec.tokens)
            for spec in world.tenants
        ),
        world.jwt,
        world.dead_tenant,
    )


def retag(res: Res, index: int) -> Res | None:
    """The tag phase's change to the ``index``-th resource of a tenant: deleted (every third leaf), or
    one tag added or removed (``red`` for even indexes, ``blue`` for odd ones)."""
    if index % 3 == 2 and res.kind != "dir":
        return None
    return Res(res.uri, res.kind, res.tags ^ {TAGS[index % 2]})


def retagged(world: World) -> World:
    tenants = []
    for spec in world.tenants:
        changed = [
            retag(res, index) if res.uri != MARKER else res for index, res in enumerate(spec.resources)
        ]
        tenants.append(
            TenantSpec(tuple(r for r in changed if r is not None), spec.templates, spec.grants, spec.tokens)
        )
    return World(tuple(tenants), world.jwt, world.dead_tenant)


@dataclass
class Watcher:
    who: Who
    updated: set[str] = field(default_factory=set)
    list_changed: int = 0
    others: list[Any] = field(default_factory=list)
    acked: asyncio.Event = field(default_factory=asyncio.Event)
    marked: asyncio.Event = field(default_factory=asyncio.Event)


async def watch_until_marker(live: Live, watcher: Watcher, uris: list[str]) -> None:
    async with (
        mcp_client(live, watcher.who) as client,
        client.listen(resources_list_changed=True, resource_subscriptions=uris) as sub,
    ):
        watcher.acked.set()
        async for event in sub:
            if event == ResourceUpdated(uri=MARKER):
                watcher.marked.set()
                return
            if isinstance(event, ResourceUpdated):
                watcher.updated.add(event.uri)
            elif isinstance(event, ResourcesListChanged):
                watcher.list_changed += 1
            else:
                watcher.others.append(event)


async def run_watchers(
    live: Live, built: Built, oracle: Oracle, uris: list[str], writes: Any
) -> list[Watcher]:
    """Streams for every principal that sees the marker (every tag grant does), subscribed to ``uris``
    (and the marker);
    ``writes()`` runs once all are acknowledged, then the marker changes in every tenant and each
    stream is followed until its marker ``updated`` (everything committed before it has arrived)."""
    watchers = [Watcher(who) for who in built.principals if oracle.sees_uri(who, MARKER)]
    subscribed = [*uris, *([MARKER] if MARKER not in uris else [])]
    tasks = [asyncio.create_task(watch_until_marker(live, w, subscribed)) for w in watchers]
    try:
        await _all_set([w.acked for w in watchers], tasks)
        await writes()
        async with admin_http(live) as http:
            for tenant, slug in enumerate(built.slugs):
                marker = built.resource_ids[(tenant, MARKER)]
                touched = await http.patch(
                    f"{API}/tenants/{slug}/resources/{marker}", json={"description": f"mark {uuid.uuid4()}"}
                )
                assert touched.status_code == 200, touched.text
        await _all_set([w.marked for w in watchers], tasks)
        await asyncio.wait_for(asyncio.gather(*tasks), WAIT)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for w in watchers:
        assert w.others == [], w.who.label
    return watchers


async def add_marker(live: Live, built: Built) -> None:
    async with admin_http(live) as http:
        for tenant, slug in enumerate(built.slugs):
            body = {
                "uri": MARKER,
                "name": "zz",
                "mimeType": "text/plain",
                "text": text_of(slug, MARKER),
                "tags": TAGS,
            }
            created = await http.post(f"{API}/tenants/{slug}/resources", json=body)
            assert created.status_code == 201, created.text
            built.resource_ids[(tenant, MARKER)] = created.json()["id"]


async def check_directory_events(live: Live, oracle: Oracle, built: Built) -> None:
    """Every principal listens to the directories only; every directory is touched, then every
    other resource changes. A descendant fires exactly when it is visible under a subscribed
    directory that is visible: a hidden directory never fires, and never makes its visible
    descendants fire (the token that sees ``file:///a/b`` but not ``file:///a``)."""
    world = oracle.world
    directories = sorted({r.uri for spec in world.tenants for r in spec.resources if r.kind == "dir"})
    if not directories:
        return

    async def writes() -> None:
        async with admin_http(live) as http:
            for first in (True, False):  # the directories first, then everything else
                for tenant, spec in enumerate(world.tenants):
                    for res in spec.resources:
                        if (res.kind == "dir") != first or res.uri == MARKER:
                            continue
                        rid = built.resource_ids[(tenant, res.uri)]
                        changed = await http.patch(
                            f"{API}/tenants/{built.slugs[tenant]}/resources/{rid}",
                            json={"description": f"touched {uuid.uuid4()}"},
                        )
                        assert changed.status_code == 200, changed.text

    for s in await listen_round(live, built, directories, writes, "dirs"):
        # A subscribed URI fires when visible (another tenant's directory URI may be a plain resource
        # here); a visible stored directory also for its visible descendants.
        visible = {r.uri: r for r in oracle.visible(s.who)}
        seen = [u for u in directories if u in visible]
        seen_dirs = [u for u in seen if visible[u].kind == "dir"]
        expected = set(seen) | {
            uri
            for uri, r in visible.items()
            if r.kind != "dir" and uri != MARKER and any(uri.startswith(d + "/") for d in seen_dirs)
        }
        assert s.updated == expected, (s.who.label, sorted(s.updated ^ expected))


async def check_tag_events(live: Live, oracle: Oracle, built: Built, everything: list[str]) -> Oracle:
    """Every resource re-tagged or deleted (see :func:`retag`) while every principal that sees the
    marker listens to every URI. Returns the oracle of the world afterwards."""
    before = oracle
    after = Oracle(retagged(oracle.world), oracle.slugs)

    async def writes() -> None:
        async with admin_http(live) as http:
            for tenant, spec in enumerate(before.world.tenants):
                base = f"{API}/tenants/{built.slugs[tenant]}/resources"
                for index, res in enumerate(spec.resources):
                    if res.uri == MARKER:
                        continue
                    rid = built.resource_ids[(tenant, res.uri)]
                    new = retag(res, index)
                    if new is None:
                        assert (await http.delete(f"{base}/{rid}")).status_code == 204
                        del built.resource_ids[(tenant, res.uri)]
                    else:
                        changed = await http.patch(f"{base}/{rid}", json={"tags": sorted(new.tags)})
                        assert changed.status_code == 200, changed.text

    for w in await run_watchers(live, built, before, everything, writes):
        visible_before = {r.uri for r in before.visible(w.who)} - {MARKER}
        visible_after = {r.uri for r in after.visible(w.who)} - {MARKER}
        assert w.updated == visible_before | visible_after, (w.who.label, sorted(w.updated))
        assert (w.list_changed > 0) == (visible_before != visible_after), (w.who.label, w.list_changed)
    return after


async def check_listings(live: Live, oracle: Oracle, who: Who) -> None:
    """After the tag phase: the listing and the reads of every stored URI follow the new tags."""
    async with mcp_client(live, who) as client:
        items, _ = await list_all(client)
        assert [r.uri for r in items] == [r.uri for r in oracle.visible(who)], who.label
        stored = sorted({r.uri for spec in oracle.world.tenants for r in spec.resources})
        for uri in stored:
            want = oracle.read(who, uri)
            try:
                got = contents_of(await client.read_resource(uri))
            except MCPError as exc:
                assert want is None, (who.label, uri, error_of(exc))
                continue
            assert got == want, (who.label, uri, "after re-tagging")


# -- revocation ----------------------------------------------------------------------------------------


async def listen_until_lost(live: Live, who: Who, uris: list[str], acked: asyncio.Event) -> Any:
    """Listen to ``uris`` (and list changes) until the stream ends; the error it ended with."""
    async with mcp_client(live, who) as client:
        try:
            async with client.listen(resources_list_changed=True, resource_subscriptions=uris) as sub:
                acked.set()
                async for _ in sub:
                    pass
        except SubscriptionLost as lost:
            return lost.__cause__
    raise AssertionError(f"{who.label}: the stream ended without an error")


async def check_revocation(live: Live, built: Built, everything: list[str]) -> None:
    """Every opaque token of every tenant is revoked through the admin API while it listens to every
    URI: each of its streams ends with ``CREDENTIAL_ENDED`` ``{reason: revoked}``, before any grant
    widens its scopes; afterwards every surface refuses it. The anonymous caller and the JWT listen
    on, and hear the widening grants as ``list_changed`` (waited on, never on time)."""
    holders = [who for who in built.principals if who.kind == "token"]
    others = [who for who in built.principals if who.kind != "token"]
    acked = {who.label: asyncio.Event() for who in built.principals}
    doomed = {
        who.label: asyncio.create_task(listen_until_lost(live, who, everything, acked[who.label]))
        for who in holders
    }
    kept = [Stream(who) for who in others]
    kept_tasks = [asyncio.create_task(listen(live, s, everything)) for s in kept]
    try:
        await _all_set(
            [acked[who.label] for who in holders] + [s.acked for s in kept], [*doomed.values(), *kept_tasks]
        )
        async with admin_http(live) as http:
            for slug in built.slugs:
                listed = await _all_items(http, f"{API}/tenants/{slug}/tokens")
                for token in listed:
                    if token.get("revokedAt") is None:
                        gone = await http.delete(f"{API}/tenants/{slug}/tokens/{token['id']}")
                        assert gone.status_code == 204, gone.text
            for label, task in doomed.items():
                error = await asyncio.wait_for(task, WAIT)
                assert isinstance(error, MCPError), (label, error)
                assert (error.code, error.error.data) == (CREDENTIAL_ENDED, {"reason": "revoked"}), label
            # Wider grants for every scope now: the dead streams are gone; the living hear them.
            for round_ in ("first", "second"):
                for slug in built.slugs:
                    for scope in SCOPES:
                        wider = {"scope": scope, "uriPrefix": f"file:///{round_}"}
                        assert (
                            await http.post(f"{API}/tenants/{slug}/grants", json=wider)
                        ).status_code == 201
                await _all_set([getattr(s, round_) for s in kept], kept_tasks)
    finally:
        for task in [*doomed.values(), *kept_tasks]:
            task.cancel()
        await asyncio.gather(*doomed.values(), *kept_tasks, return_exceptions=True)
    await check_dead_tokens(
        live, Built(built.slugs, built.principals, [w.token for w in holders if w.token], {})
    )


async def check_world(live: Live, world: World) -> None:
    built = await build(live, world)
    try:
        oracle = Oracle(world, built.slugs)
        everything = universe(world)
        async with asyncio.TaskGroup() as checks:
            # The stdio processes start while the HTTP checks run: their start-up is mostly waiting.
            for who in stdio_sample(built):
                checks.create_task(check_stdio(live, oracle, built, who, everything))
            cursors = await asyncio.gather(
                *(check_mcp(live, oracle, who, everything) for who in built.principals)
            )
            await asyncio.gather(*(check_tools(live, oracle, who, everything) for who in built.principals))
        everyone = built.principals
        for index, (owner, cursor) in enumerate(zip(everyone, cursors, strict=True)):
            if cursor:  # the next principal (anonymous, tokens, JWT) tries it
                await check_foreign_cursor(live, oracle, owner, cursor, everyone[(index + 1) % len(everyone)])
        await asyncio.gather(
            *(check_legacy(live, oracle, who, everything) for who in built.principals),
            *(check_admin_api(live, oracle, built, who) for who in built.principals if who.token),
            check_dead_tokens(live, built),
        )
        await check_listen(live, oracle, built, everything)
        await add_marker(live, built)
        marked = Oracle(with_marker(world), built.slugs)
        await check_directory_events(live, marked, built)
        after = await check_tag_events(live, marked, built, everything)
        await asyncio.gather(*(check_listings(live, after, who) for who in built.principals))
        await check_revocation(live, built, everything)
    finally:
        await teardown(live, built)


# The examples are run as SHARDS tests of EXAMPLES / SHARDS each (the longest test of the suite):
# under pytest-xdist they run on different workers at once, each with a live server of its own.
SHARDS = 2


@pytest.mark.slow
@pytest.mark.parametrize("shard", range(SHARDS))
@settings(
    max_examples=-(-EXAMPLES // SHARDS),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(world=worlds())
def test_every_surface_shows_exactly_what_the_grants_allow(live: Live, shard: int, world: World) -> None:
    """RES-7 (docs/requirements.toml)."""
    live.loop.run_until_complete(check_world(live, world))


def test_a_tag_grant_change_is_list_changed_not_a_gap(live: Live) -> None:
    """Regression (found by the test above): a tag grant names no URI, so its change-feed row has
    none, and the listener took the NULL for "URI too long for the payload", could not resolve it,
    and announced a gap, which fires ``updated`` for every subscribed URI the stream may see, stored
    or not. A tag grant change must reach a stream as ``list_changed`` alone."""

    async def scenario() -> list[Any]:
        slug = f"leak-tag-{next(live.counter)}"
        async with admin_http(live) as http:
            assert (await http.post(f"{API}/tenants", json={"slug": slug})).status_code == 201
            base = f"{API}/tenants/{slug}"
            try:
                stored = await http.post(
                    f"{base}/resources", json={"uri": "file:///a/b", "name": "b", "text": "x"}
                )
                assert (
                    await http.post(f"{base}/grants", json={"scope": "s1", "uriPrefix": "file:///a/"})
                ).status_code == 201
                minted = await http.post(f"{base}/tokens", json={"scopes": ["s1"]})
                who = Who("s1", 1, "token", frozenset({"s1"}), False, minted.json()["token"])
                got: list[Any] = []
                async with (
                    mcp_client(live, who) as client,
                    # file:///a/a is covered by the grant but not stored: a gap would fire it first.
                    client.listen(
                        resources_list_changed=True, resource_subscriptions=["file:///a/a", "file:///a/b"]
                    ) as sub,
                ):
                    created = await http.post(f"{base}/grants", json={"scope": "other", "tag": "red"})
                    assert created.status_code == 201
                    with anyio.fail_after(WAIT):
                        async for event in sub:
                            got.append(event)
                            if isinstance(event, ResourcesListChanged):
                                # then a real change, whose `updated` closes the observation
                                patched = await http.patch(
                                    f"{base}/resources/{stored.json()['id']}", json={"description": "changed"}
                                )
                                assert patched.status_code == 200
                            if isinstance(event, ResourceUpdated):
                                break
                return got
            finally:
                assert (await http.delete(base)).status_code == 204

    got = live.loop.run_until_complete(scenario())
    assert got == [ResourcesListChanged(), ResourceUpdated(uri="file:///a/b")]
