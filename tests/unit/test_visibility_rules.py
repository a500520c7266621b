"""The one visibility rule (catalog/core/visibility.py) on hand-written cases, without a database.

Who decides: an admin of the tenant (a tenant token with the admin flag, the platform admin, the
system) sees everything; a caller of another tenant, or one without scopes, sees nothing; anyone
else sees what the grants of its scopes name (RES-7, RES-25, COMP-6): a ``uri`` exactly, a
``uriPrefix`` as a plain string prefix (not cut at ``/``), a ``tag`` by intersection. Templates are
matched on their literal prefix. There is no media-type rule in visibility: ``mimeType`` is a
listing filter (``ListingFilter.mime_type``), applied after the rule, tested at the end.

``tests/properties/test_visibility_agrees.py`` (with a database) holds these answers equal to the SQL
predicate and the page function; here the rule itself is pinned down.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.dialects import postgresql

from catalog.core.principal import Principal
from catalog.core.resources.repository import ListingFilter, listing_clause
from catalog.core.uris import uri_prefix_upper_bound
from catalog.core.visibility import Visibility, grants_decide, visibility_of_grants
from catalog.db.models import resources, templates

TENANT = 7


def reader(*scopes: str, tenant: int = TENANT) -> Principal:
    return Principal(kind="token", tenant_id=tenant, tenant_slug="acme", scopes=frozenset(scopes), token_id=1)


def granted(
    *, uris: tuple[str, ...] = (), prefixes: tuple[str, ...] = (), tags: tuple[str, ...] = ()
) -> Visibility:
    return visibility_of_grants(reader("r"), TENANT, uris=uris, prefixes=prefixes, tags=tags)


# -- who the grants decide for ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "principal",
    [
        Principal(kind="token", tenant_id=TENANT, is_admin=True),
        Principal(kind="token", tenant_id=TENANT, is_admin=True, scopes=frozenset({"r"})),
        Principal.platform_admin(),
        Principal.system("import"),
    ],
    ids=["tenant-admin", "tenant-admin-with-scopes", "platform-admin", "system"],
)
def test_an_admin_of_the_tenant_sees_everything_without_grants(principal: Principal) -> None:
    visibility = visibility_of_grants(principal, TENANT, prefixes=["file:///only/"])
    assert not grants_decide(principal, TENANT)
    assert visibility.everything and not visibility.nothing
    assert visibility.allows("anything:at-all") and visibility.allows_template("x://{y}")
    assert (visibility.uris, visibility.prefixes, visibility.tags) == (frozenset(), (), frozenset())


@pytest.mark.parametrize(
    "principal",
    [
        reader(),  # no scopes
        reader("r", tenant=8),  # another tenant's reader
        Principal(kind="token", tenant_id=8, is_admin=True, scopes=frozenset({"r"})),  # another's admin
        Principal(kind="jwt", tenant_id=None, scopes=frozenset({"r"})),  # no tenant at all
    ],
    ids=["no-scopes", "other-tenant", "other-tenant-admin", "no-tenant"],
)
def test_a_caller_without_standing_in_the_tenant_sees_nothing_whatever_the_grants(
    principal: Principal,
) -> None:
    visibility = visibility_of_grants(principal, TENANT, uris=["file:///x"], prefixes=[""], tags=["t"])
    assert not grants_decide(principal, TENANT)
    assert visibility.nothing and not visibility.everything
    assert not visibility.allows("file:///x", ("t",))
    assert not visibility.allows_template("file:///{x}", ("t",))


def test_a_reader_with_no_matching_grants_sees_nothing() -> None:
    visibility = granted()
    assert grants_decide(reader("r"), TENANT)
    assert visibility.nothing
    assert not visibility.allows("file:///x", ("t",))


def test_the_anonymous_caller_is_a_reader_of_the_public_scope() -> None:
    anonymous = Principal.anonymous(TENANT, "acme")
    assert anonymous.scopes == frozenset({"public"}) and grants_decide(anonymous, TENANT)
    visibility = visibility_of_grants(anonymous, TENANT, tags=["public"])
    assert visibility.allows("file:///readme", ("public",))
    assert not visibility.allows("file:///secret", ("internal",))


# -- uri, prefix and tag grants --------------------------------------------------------------------


def test_a_uri_grant_names_one_resource_exactly() -> None:
    visibility = granted(uris=("file:///docs/a.txt",))
    assert visibility.allows("file:///docs/a.txt")
    assert not visibility.allows("file:///docs/a.txt.bak")
    assert not visibility.allows("file:///docs/a.tx")
    assert not visibility.allows("file:///docs/a.txt/child")
    assert not visibility.allows("FILE:///docs/a.txt")  # compared as stored: canonical URIs only


def test_a_prefix_grant_is_a_plain_string_prefix_not_cut_at_delimiters() -> None:
    """``file:///a`` covers ``file:///ab`` too; a curator who means a directory grants ``file:///a/``."""
    loose = granted(prefixes=("file:///a",))
    assert loose.allows("file:///a") and loose.allows("file:///a/b") and loose.allows("file:///ab")
    assert not loose.allows("file:///b")
    directory = granted(prefixes=("file:///a/",))
    assert directory.allows("file:///a/b") and directory.allows("file:///a/b/c")
    assert not directory.allows("file:///a") and not directory.allows("file:///ab")
    query = granted(prefixes=("https://h/p?",))
    assert query.allows("https://h/p?x=1") and not query.allows("https://h/p/x")


def test_an_empty_prefix_grant_covers_the_whole_tenant_but_is_no_admin() -> None:
    visibility = granted(prefixes=("",))
    assert visibility.allows("file:///x") and visibility.allows("urn:y")
    assert not visibility.everything  # still a reader: cursors and admin routes tell them apart


def test_a_tag_grant_shows_what_carries_the_tag() -> None:
    visibility = granted(tags=("public", "team-a"))
    assert visibility.allows("file:///x", ("public",))
    assert visibility.allows("file:///x", {"other", "team-a"})
    assert visibility.allows("file:///x", frozenset({"team-a"}))
    assert not visibility.allows("file:///x", ("Public",))  # tags are case-sensitive
    assert not visibility.allows("file:///x")
    assert not visibility.allows("file:///x", ())


def test_grants_add_up() -> None:
    visibility = granted(uris=("urn:one",), prefixes=("file:///a/",), tags=("t",))
    assert visibility.allows("urn:one")
    assert visibility.allows("file:///a/x")
    assert visibility.allows("https://elsewhere/x", ("t",))
    assert not visibility.allows("https://elsewhere/x", ("u",))


def test_covered_prefixes_are_dropped_and_the_rest_sorted() -> None:
    visibility = granted(prefixes=("file:///b/", "file:///a/deep/", "file:///a/", "file:///b/", "urn:"))
    assert visibility.prefixes == ("file:///a/", "file:///b/", "urn:")


def test_page_selectors_are_the_grants_as_uri_ranges() -> None:
    visibility = granted(uris=("urn:z", "urn:a"), prefixes=("file:///a/", ""), tags=("t2", "t1"))
    lows, highs, tags, uris = visibility.page_selectors()
    # The empty prefix covers "file:///a/": only it is kept, and it has no upper bound.
    assert lows == [""]
    assert highs == ["\U0010ffff" * 4]
    assert (tags, uris) == (["t1", "t2"], ["urn:a", "urn:z"])
    assert granted(prefixes=("file:///a/",)).page_selectors()[:2] == (["file:///a/"], ["file:///a0"])


@given(
    prefix=st.text(st.characters(blacklist_categories=("Cs",)), max_size=8),
    uri=st.text(st.characters(blacklist_categories=("Cs",)), max_size=12),
)
def test_the_prefix_rule_and_its_index_range_agree(prefix: str, uri: str) -> None:
    """The SQL predicate is ``low <= uri < high`` ("C" collation is code-point order, as Python's):
    it selects exactly the URIs ``allows`` accepts for that prefix."""
    upper = uri_prefix_upper_bound(prefix)
    in_range = prefix <= uri and (upper is None or uri < upper)
    assert granted(prefixes=(prefix,)).allows(uri) is in_range


# -- templates --------------------------------------------------------------------------------------


def test_a_template_is_matched_on_its_literal_prefix() -> None:
    visibility = granted(prefixes=("file:///docs/",))
    assert visibility.allows_template("file:///docs/{name}")
    assert visibility.allows_template("file:///docs/{+path}")
    assert not visibility.allows_template("file:///{dir}/docs")  # literal prefix "file:///"
    assert not visibility.allows_template("file:///doc{s}")  # literal prefix "file:///doc"


def test_a_uri_grant_naming_a_template_shows_that_template() -> None:
    visibility = granted(uris=("file:///docs/{name}",))
    assert visibility.allows_template("file:///docs/{name}")
    assert not visibility.allows_template("file:///docs/{other}")


def test_a_template_with_a_tag_grant_and_an_unparsable_template() -> None:
    visibility = granted(prefixes=("file:///",), tags=("t",))
    assert visibility.allows_template("other:{x}", ("t",))
    assert not visibility.allows_template("other:{x}", ("u",))
    # Not a template: no literal prefix, so only a uri or tag grant can show it.
    assert not visibility.allows_template("file:///{unclosed")
    assert visibility.allows_template("file:///{unclosed", ("t",))


# -- the SQL the rule becomes ----------------------------------------------------------------------


def _compiled(clause: object) -> tuple[str, dict[str, object]]:
    compiled = clause.compile(dialect=postgresql.dialect())  # type: ignore[attr-defined]
    return str(compiled), dict(compiled.params)


def test_prefix_grants_become_index_ranges_not_post_filters() -> None:
    sql, params = _compiled(
        granted(uris=("urn:x",), prefixes=("file:///a/",), tags=("t",)).resources_clause(resources)
    )
    assert "resources.tenant_id = " in sql and "LIKE" not in sql
    assert "resources.uri >= " in sql and "resources.uri < " in sql
    assert sorted(v for v in params.values() if isinstance(v, str)) == ["file:///a/", "file:///a0"]
    assert params["tenant_id_1"] == TENANT
    assert ["urn:x"] in params.values() and ["t"] in params.values()


def test_everything_is_the_tenant_filter_alone_and_nothing_is_false() -> None:
    """An admin's predicate is the tenant's rows and no more; a caller who sees nothing gets a
    constant ``false`` (SQLAlchemy folds the tenant filter away), so no row is read for it."""
    admin = visibility_of_grants(Principal.platform_admin(), TENANT)
    sql, params = _compiled(admin.resources_clause(resources))
    assert sql == "resources.tenant_id = %(tenant_id_1)s::BIGINT" and params == {"tenant_id_1": TENANT}
    sql, params = _compiled(granted().resources_clause(resources))
    assert (sql, params) == ("false", {})


def test_template_prefix_grants_range_over_the_literal_prefix_column() -> None:
    sql, _ = _compiled(granted(uris=("t://{x}",), prefixes=("t://",)).templates_clause(templates))
    assert "templates.uri_template = ANY" in sql
    assert "templates.literal_prefix >= " in sql and "templates.literal_prefix < " in sql


def test_a_media_type_filter_is_exact_or_a_family_with_wildcards_escaped() -> None:
    """``mimeType`` narrows a listing after the visibility rule: ``image/png`` exactly, ``image/*``
    every subtype; ``_`` and ``%`` in the family are literal, not LIKE wildcards."""
    visibility = granted(prefixes=("file:///",))
    sql, params = _compiled(listing_clause(visibility, ListingFilter(mime_type="x_y%/*")))
    assert "resources.mime_type LIKE " in sql and "ESCAPE" in sql
    assert params["mime_type_1"] == "x\\_y\\%/%"
    sql, params = _compiled(listing_clause(visibility, ListingFilter(mime_type="image/png")))
    assert "resources.mime_type = " in sql and params["mime_type_1"] == "image/png"


def test_a_visibility_carries_its_callers_fingerprint() -> None:
    assert granted().fingerprint == visibility_of_grants(reader("r"), TENANT).fingerprint != ""
    assert granted().fingerprint != visibility_of_grants(reader("r", "w"), TENANT).fingerprint
