"""``resources/read`` on the driver: a visible text or blob resource, no consent, not a directory,
its authentication, grants and row in one statement (``catalog_plain_read``, a historical name;
``catalog/db/sql/functions.sql``), which sends the row only when the selectors passed show it.
Anything else answers None, and the SQLAlchemy executor (``catalog.core.reading.read_resource``)
answers it."""

from __future__ import annotations

from dataclasses import dataclass

from catalog.core.catalog import Catalog
from catalog.core.direct.standing import remember_visibility, standing_arguments, standing_of
from catalog.core.principal import Principal
from catalog.core.reading import Content
from catalog.core.schemas.base import DIRECTORY_MIME_TYPE
from catalog.core.uris import InvalidUri, normalize_uri
from catalog.db.driver import self_scoped_driver

_VISIBLE_READ = "SELECT * FROM catalog_plain_read($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
_NO_SELECTORS = (None, None, None, None, None)


@dataclass(frozen=True)
class FastRead:
    """A read :func:`fast_read` answered: who asked (its principal, as the token lookup would have
    made it), the one content item, and the resource's own cache hint (None: the server's)."""

    principal: Principal
    content: Content
    ttl_ms: int | None = None


async def fast_read(
    catalog: Catalog, uri: str, *, token: str | None = None, principal: Principal | None = None
) -> FastRead | None:
    """``uri`` read in one statement for an opaque ``token`` (looked up by the same statement) or
    an already authenticated tenant ``principal``; None whenever the full path must answer: an
    unknown, revoked or expired token, a refused URI, no visible resource with exactly this URI (a
    template may render it, or the error is the full path's), a directory, a consent message, a
    resource without content.

    The statement sends the row only when the selectors passed show it (a hidden row costs what a
    missing one does): those this credential's visibility had last time. When the grants the
    statement returns compile to other selectors (the credential's first read, its grants changed),
    it is asked once more with those."""
    try:
        key = normalize_uri(uri)
    except InvalidUri:
        return None
    credential = standing_arguments(token, principal)
    if credential is None:
        return None
    guess = catalog.page_visibilities.get(credential)
    for _ in range(2):
        selectors = _NO_SELECTORS if guess is None else (guess.everything, *guess.page_selectors())
        async with self_scoped_driver(catalog.engine) as driver:
            row = await driver.fetchrow(_VISIBLE_READ, *credential, key, *selectors)
        if row is None:  # no standing either
            return None
        standing = standing_of(row, principal)
        if standing is None:
            return None
        reader, visibility = standing
        if visibility == guess:
            break
        remember_visibility(catalog, credential, visibility)
        guess = visibility
    else:
        return None  # the grants changed between the two statements: the full path decides
    if (
        row["resource_uri"] is None
        or row["resource_consent_message"]
        or row["resource_mime_type"] == DIRECTORY_MIME_TYPE
        or not visibility.allows(row["resource_uri"], row["resource_tags"] or ())
    ):
        return None
    mime_type = row["resource_mime_type"]
    if row["resource_has_blob"]:
        if row["resource_blob"] is None:
            return None
        content = Content(uri, mime_type, blob=bytes(row["resource_blob"]))
    elif row["resource_text"] is None:
        return None  # no content at all: the full path's empty answer
    else:
        content = Content(uri, mime_type, text=row["resource_text"])
    return FastRead(reader, content, row["resource_ttl_ms"])
