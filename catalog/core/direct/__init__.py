"""The driver executor: the core's MCP operations run on the bare asyncpg driver, one statement
per request where it can (the MCP fast path, ``catalog.mcp.fast``; ``CATALOG_MCP_FAST_PATH``).

The plan of each operation (canonical URI, visibility selectors, cursor start, the values
answered) is the core's, shared with the SQLAlchemy executor (:mod:`catalog.core.reading`,
:mod:`catalog.core.resources`) and imported from there; only its execution lives here. Whatever
this package cannot answer (None) is answered by the SQLAlchemy executor, and the shadow mode
(``catalog.mcp.shadow``) proves both give the same answer. Only this package and ``catalog.db``
import ``asyncpg``, ``catalog.db.driver`` or ``catalog.db.statements`` (the contract "The bare
driver only in the driver executor" in pyproject.toml).

Modules (imported directly; nothing is re-exported here):

- :mod:`.standing`: who a credential is and what it sees, from ``catalog_plain_read``'s principal
  and grants; the visibility each credential had last (the guess the next statement runs with).
- :mod:`.reading`: ``resources/read`` of a visible text or blob resource in one statement.
- :mod:`.listing`: ``resources/list`` pages in one statement (``catalog_plain_page``,
  ``catalog_visible_page``).
- :mod:`.completion`: ``completion/complete`` scans (both paths run them on the driver; the fast
  path's first statement also authenticates).
- :mod:`.tokens`: a bearer token's principal (``catalog_token_principal``), on every request.
- :mod:`.token_list`: a tenant's tokens on one connection of its own, for ``catalog token list``
  (no SQLAlchemy imported; the statements are :mod:`catalog.core.plain_sql`'s).

The SQL functions keep their historical names (``catalog_plain_read``, ``catalog_plain_page``):
renaming them takes a migration.
"""
