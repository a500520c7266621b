"""Backup and restore of a whole tenant: one self-describing stream of JSON lines (gzip on disk).

**What a backup holds.** Everything of the tenant: blobs (their bytes, in base64 chunks), templates,
grants, tokens (metadata only: never a hash, so nothing in a backup authenticates), and resources in
their current state followed by their whole version history (content of every version included).
Tags live in the resource, template and grant lines (the tag index is rebuilt by the database). Not
held: the audit log and the change feed (the restored tenant's audit log starts with one
``tenant.restore`` entry; its feed starts empty and clients resynchronise as after any gap).

**Format 1** (one JSON object a line, in this order; ``catalog backup`` gzips it):

- ``{"kind": "catalog-backup", "format": 1, "createdAt", "schema", "tenant": {slug, name, createdAt}}``
- per blob, by sha256: ``{"kind": "blob", "sha256", "size", "mimeType", "createdAt"}`` then
  ``ceil(size / 256 KiB)`` lines ``{"kind": "chunk", "data": <base64>}``
- ``{"kind": "template", "id", "version", "createdAt", "updatedAt", "template": <admin-API body>}``
- ``{"kind": "grant", "id", "createdAt", "grant": <admin-API body>}``
- ``{"kind": "token", "id", "createdAt", "revokedAt", "token": {name, scopes, admin, expiresAt}}``
- ``{"kind": "resource", "id", "version", "createdAt", "updatedAt", "contentChangedAt",
  "resource": <admin-API body with text or blobSha256>}``, by URI
- ``{"kind": "version", "resourceUri", "version", "uri", "snapshot", "text" | "blobSha256",
  "changedBy", "changedAt"}``, by the resource's URI, then version
- ``{"kind": "end", "counts": {...}}``: without it (a truncated file) a restore fails.

Why lines and not an archive: both ends stream without ever seeking or knowing a size up front
(a tar member needs its size in its header, so a JSONL member would be spooled to disk first), a
reader needs nothing but a line splitter, every line is checked by the admin API's own models on
the way back, and ``zcat FILE | jq`` shows it. Base64 costs a third more for blobs, which gzip
partly wins back; blob bytes are checked against their sha256 on restore.

**Memory.** Blobs are read in 256 KiB chunks; everything else streams from server-side cursors a
few rows at a time, inside one read-only REPEATABLE READ transaction (a consistent snapshot).
Restore writes in batches bounded by count and bytes. Neither side ever holds more than a batch,
or one blob (a blob is stored in one statement), whatever the size of the tenant. A restore reads
each line with a bounded ``readline`` (:func:`catalog.core.jsonlines.max_line_bytes`) and scans its
nesting before parsing it, so a hostile file (one endless line in a gzip bomb, deep nesting, a
number of thousands of digits) is refused by line number at a bounded cost, and every line is
validated by the admin API's models (a version's snapshot as a resource body) before it is written.

**Restore** creates the new tenant and writes rows as they were -- ids are new; versions,
timestamps, history (``changedBy`` as recorded) are kept -- through batched inserts of its own:
a restore reproduces history instead of making new history, so it does not go through the
upsert path. The database's triggers still write the change feed and the tag index. Tokens come
back revoked (at restore time, or when they were revoked) with a fresh random hash that no one is
ever shown: the inventory of who had access, none of the access. On any error the half-restored
tenant is deleted again.

The format and its line models are :mod:`.format`'s; writing a backup, :mod:`.dump`'s; reading one
back, :mod:`.restore`'s.
"""
