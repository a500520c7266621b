"""Which changes a watcher is told about (catalog/core/watching.py), without a database.

Covered here: the subscription filter (``subscription_uris``, ``honoured_uris``) and
``Watch.decide`` for resource and template events whose tags the event carries, which is decided
by ``Visibility.allows`` alone. The watch's engine points at a port nothing listens on, so a test
that reached the database would fail rather than pass. Grant, tenant and gap events reload the
visibility from the database and are tested with one (``tests/db/test_events.py``,
``tests/e2e/mcp/test_mcp_subscriptions.py``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from catalog.core import watching
from catalog.core.catalog import Catalog
from catalog.core.principal import Principal
from catalog.core.visibility import visibility_of_grants
from catalog.core.watching import (
    MAX_LISTEN_URIS,
    MAX_NAMED_INVALID,
    Delivery,
    SubscriptionsRefused,
    Watch,
    honoured_uris,
    subscription_uris,
)
from catalog.events.hub import ChangeEvent
from catalog.settings import Settings

TENANT = 3
READER = Principal(kind="token", tenant_id=TENANT, tenant_slug="acme", scopes=frozenset({"r"}), token_id=1)
NO_DATABASE = create_async_engine("postgresql+asyncpg://nobody@127.0.0.1:9/none")


# -- the subscription filter ------------------------------------------------------------------------


def test_subscribed_uris_map_to_their_canonical_form_in_order_once() -> None:
    assert subscription_uris(["FILE:///b", "file:///a/./c", "FILE:///b", "urn:x"]) == {
        "FILE:///b": "file:///b",
        "file:///a/./c": "file:///a/c",
        "urn:x": "urn:x",
    }
    assert list(subscription_uris(["urn:z", "urn:a"])) == ["urn:z", "urn:a"]
    assert subscription_uris([]) == {}


def test_a_listen_naming_an_invalid_uri_is_refused_whole_and_names_it() -> None:
    """RES-23: every URI a client sends is validated; the refusal names the URIs rather than
    leaving them out of the acknowledgement (SUB-3), where a client would wait for them in vain."""
    with pytest.raises(SubscriptionsRefused) as refused:
        subscription_uris(["file:///ok", "::", "file:///a b"])
    assert refused.value.data == {"invalidUris": ["::", "file:///a b"], "invalidCount": 2}
    assert refused.value.detail.startswith("resourceSubscriptions holds 2 URI(s) that are not valid URIs")


def test_a_refusal_quotes_at_most_ten_invalid_uris_and_counts_them_all() -> None:
    invalid = [f"bad uri {n}" for n in range(MAX_NAMED_INVALID + 5)]
    with pytest.raises(SubscriptionsRefused) as refused:
        subscription_uris(invalid)
    assert refused.value.data == {"invalidUris": invalid[:MAX_NAMED_INVALID], "invalidCount": len(invalid)}


def test_a_listen_over_the_uri_limit_is_refused_before_any_is_parsed() -> None:
    with pytest.raises(SubscriptionsRefused) as refused:
        subscription_uris(["::"] * (MAX_LISTEN_URIS + 1))
    assert refused.value.data == {"limit": MAX_LISTEN_URIS, "count": MAX_LISTEN_URIS + 1}
    assert len(subscription_uris([f"urn:n{n}" for n in range(MAX_LISTEN_URIS)])) == MAX_LISTEN_URIS


def test_honoured_uris_keeps_the_valid_ones_and_skips_the_rest() -> None:
    assert honoured_uris(["::", "FILE:///a", 5, "FILE:///a", "urn:b"]) == {  # type: ignore[list-item]
        "FILE:///a": "file:///a",
        "urn:b": "urn:b",
    }


def test_a_delivery_is_empty_only_with_nothing_to_say() -> None:
    assert Delivery().empty
    assert not Delivery(list_changed=True).empty
    assert not Delivery(updated=("urn:x",)).empty


# -- deciding resource and template events --------------------------------------------------------


class _Probe:
    """Stands in for the directory probe: which stored URIs are directories."""

    def __init__(self, directories: set[str]) -> None:
        self.directories = directories
        self.asked: list[tuple[int, str, int | None]] = []

    async def is_directory(self, tenant_id: int, uri: str, seq: int | None) -> bool:
        self.asked.append((tenant_id, uri, seq))
        return uri in self.directories


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Probe]:
    answers = _Probe({"file:///pub/dir"})
    monkeypatch.setattr(watching, "_directory_probe", lambda engine: answers)
    yield answers


def watch(
    *, list_changed: bool = True, uris: tuple[str, ...] = (), directories: tuple[str, ...] = ()
) -> Watch:
    """A reader who sees ``file:///pub/`` and whatever is tagged ``open``."""
    catalog = Catalog(engine=NO_DATABASE, settings=Settings(secret_key="unit-test-secret-key"))
    visibility = visibility_of_grants(READER, TENANT, prefixes=["file:///pub/"], tags=["open"])
    return Watch(catalog, READER, list_changed, frozenset(uris), visibility, set(directories))


def resource(
    uri: str, op: str, before: tuple[str, ...] | None, after: tuple[str, ...] | None, tenant: int = TENANT
) -> ChangeEvent:
    return ChangeEvent(tenant, "resource", uri, op, seq=1, tags_before=before, tags_after=after)


async def test_a_visible_resource_created_or_deleted_changes_the_list() -> None:
    """RES-16: the visible set changed."""
    assert await watch().decide([resource("file:///pub/a", "created", None, ())]) == Delivery(
        list_changed=True
    )
    assert await watch().decide([resource("file:///pub/a", "deleted", (), None)]) == Delivery(
        list_changed=True
    )


async def test_a_hidden_resource_changing_tells_the_watcher_nothing() -> None:
    for event in (
        resource("file:///secret/a", "created", None, ()),
        resource("file:///secret/a", "updated", ("x",), ("y",)),
        resource("file:///secret/a", "deleted", (), None),
    ):
        assert (await watch().decide([event])).empty, event


async def test_an_update_that_keeps_uri_and_tags_does_not_change_the_list() -> None:
    assert (await watch().decide([resource("file:///pub/a", "updated", ("x",), ("x",))])).empty


async def test_a_tag_added_or_removed_shows_or_hides_the_resource() -> None:
    """RES-16: a resource visible only through a tag grant enters or leaves the list."""
    shown = resource("file:///other/a", "updated", (), ("open",))
    hidden = resource("file:///other/a", "updated", ("open",), ())
    assert await watch().decide([shown]) == Delivery(list_changed=True)
    assert await watch().decide([hidden]) == Delivery(list_changed=True)
    assert await watch(uris=("file:///other/a",)).decide([hidden]) == Delivery(
        list_changed=True, updated=("file:///other/a",)
    )


async def test_a_watcher_that_did_not_ask_for_list_changes_gets_none() -> None:
    """SUB-4: no ``list_changed`` unless the listen asked for it."""
    quiet = watch(list_changed=False)
    assert (await quiet.decide([resource("file:///pub/a", "created", None, ())])).empty


async def test_an_event_of_another_tenant_is_ignored() -> None:
    assert (await watch().decide([resource("file:///pub/a", "created", None, (), tenant=TENANT + 1)])).empty


async def test_a_subscribed_visible_resource_that_changes_is_updated(probe: _Probe) -> None:
    """SUB-6: ``updated`` for the subscribed URI; SUB-4: only for it."""
    subscribed = watch(list_changed=False, uris=("file:///pub/a",))
    delivery = await subscribed.decide(
        [resource("file:///pub/a", "updated", (), ()), resource("file:///pub/b", "updated", (), ())]
    )
    assert delivery == Delivery(updated=("file:///pub/a",))
    assert probe.asked == [(TENANT, "file:///pub/a", 1)]


async def test_a_subscribed_uri_hidden_throughout_never_fires(probe: _Probe) -> None:
    """SUB-7 as decided: a subscription to a URI the caller may not see is accepted and silent, so
    it reveals nothing, whatever happens to the resource."""
    hidden = watch(uris=("file:///secret/a",))
    for op, before, after in (("created", None, ()), ("updated", ("x",), ("y",)), ("deleted", (), None)):
        assert (await hidden.decide([resource("file:///secret/a", op, before, after)])).empty
    assert probe.asked == []


async def test_updates_of_one_uri_in_a_batch_are_told_once(probe: _Probe) -> None:
    subscribed = watch(uris=("file:///pub/a",))
    delivery = await subscribed.decide(
        [resource("file:///pub/a", "created", None, ()), resource("file:///pub/a", "updated", (), ())]
    )
    assert delivery == Delivery(list_changed=True, updated=("file:///pub/a",))


async def test_a_visible_descendant_of_a_subscribed_directory_is_updated(probe: _Probe) -> None:
    """SUB-6: a change under a subscribed, visible ``inode/directory`` fires ``updated`` with the
    descendant's URI; a sibling that merely shares the prefix (``dir2``) does not."""
    under = watch(list_changed=False, uris=("file:///pub/dir",), directories=("file:///pub/dir",))
    assert await under.decide([resource("file:///pub/dir/x/y", "updated", (), ())]) == Delivery(
        updated=("file:///pub/dir/x/y",)
    )
    assert (await under.decide([resource("file:///pub/dir2", "updated", (), ())])).empty
    assert probe.asked == []  # the directory itself did not change: no probe


async def test_a_hidden_descendant_of_a_subscribed_directory_never_fires() -> None:
    """The directory ``urn:d`` is visible through its tag; a descendant without the tag is not, and
    its changes stay silent (a subscription reveals nothing the caller could not read)."""
    under = watch(list_changed=False, uris=("urn:d",), directories=("urn:d",))
    assert (await under.decide([resource("urn:d/x", "updated", ("x",), ("x",))])).empty
    assert await under.decide([resource("urn:d/y", "updated", ("open",), ("open",))]) == Delivery(
        updated=("urn:d/y",)
    )


async def test_a_subscribed_directory_that_is_hidden_stops_firing_for_its_descendants(probe: _Probe) -> None:
    """Hiding (or deleting) a subscribed directory drops it from the watch's directories, so its
    descendants cannot reveal it afterwards."""
    tagged = watch(list_changed=False, uris=("urn:d",), directories=("urn:d",))
    assert await tagged.decide([resource("urn:d", "updated", ("open",), ())]) == Delivery(updated=("urn:d",))
    assert tagged.directories == set()
    assert (await tagged.decide([resource("urn:d/x", "updated", ("open",), ("open",))])).updated == ()
    assert probe.asked == []


async def test_a_subscribed_uri_becoming_a_visible_directory_is_probed_once(probe: _Probe) -> None:
    subscribed = watch(list_changed=False, uris=("file:///pub/dir",))
    await subscribed.decide([resource("file:///pub/dir", "created", None, ())])
    assert subscribed.directories == {"file:///pub/dir"}
    assert probe.asked == [(TENANT, "file:///pub/dir", 1)]


async def test_a_visible_template_changing_changes_the_list() -> None:
    template = ChangeEvent(
        TENANT, "template", "file:///pub/{name}", "created", seq=2, tags_before=None, tags_after=()
    )
    hidden = ChangeEvent(
        TENANT, "template", "file:///{name}", "created", seq=3, tags_before=None, tags_after=()
    )
    tagged = ChangeEvent(
        TENANT, "template", "file:///{name}", "updated", seq=4, tags_before=("open",), tags_after=()
    )
    assert await watch().decide([template]) == Delivery(list_changed=True)
    assert (await watch().decide([hidden])).empty
    assert await watch().decide([tagged]) == Delivery(list_changed=True)
    assert (await watch(list_changed=False).decide([template])).empty


async def test_events_without_a_uri_or_of_unknown_kind_are_ignored() -> None:
    assert (await watch().decide([ChangeEvent(TENANT, "resource", None, "created")])).empty
    assert (await watch().decide([ChangeEvent(TENANT, "blob", "file:///pub/a", "created")])).empty


async def test_without_known_tags_a_uri_the_grants_name_is_decided_without_a_query() -> None:
    """An event from before tags travelled with it: a URI a prefix grant shows needs no row."""
    old = ChangeEvent(TENANT, "resource", "file:///pub/a", "created", seq=5)
    assert await watch().decide([old]) == Delivery(list_changed=True)


def test_adding_and_discarding_subscribed_uris() -> None:
    w = watch(uris=("urn:a",), directories=("urn:a",))
    w.add("urn:b")
    assert w.uris == frozenset({"urn:a", "urn:b"})
    w.discard("urn:a")
    assert (w.uris, w.directories) == (frozenset({"urn:b"}), set())
    assert w.tenant_id == TENANT
