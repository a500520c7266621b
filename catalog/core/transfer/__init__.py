"""Bulk transfer: ``catalog import`` (a directory tree or a JSONL file) and ``catalog export``.

Sources turn files into :class:`ResourceIn` bodies (or into :class:`Problem` s, never exceptions);
:func:`~.importer.import_items` writes them in batches through :func:`catalog.core.resources.upsert_many`, the
one write path, so an import makes versions, audit rows and change-feed rows like any other write and
a re-run that finds nothing new changes nothing. :func:`~.exporter.export_lines` pages through the keyset
listing and yields JSONL objects in the same ``ResourceIn`` shape, so ``export | import`` rebuilds an
identical catalogue.

Directory rules: every regular file becomes a resource whose URI is its path relative to the
imported directory (percent-encoded, then made canonical by :func:`normalize_uri`) under a base URI
(``file:///`` unless ``--prefix`` names another), named after the file; text when the bytes are UTF-8 without NUL, else a blob; the mime type is guessed from the
name (a fixed table, the same on every machine), falling back to ``text/plain`` or
``application/octet-stream``. Every sub-directory becomes an ``inode/directory`` resource. A symlink
is followed only when its target lies inside the imported directory (and is not one of the link's own
ancestors), resolved once, while the tree is listed; anything else that is not a regular file or a
directory is skipped. Reading never follows a link: each file is opened beneath the root's descriptor
one name at a time with ``O_NOFOLLOW`` and must be the very file the listing found (device and inode),
so a file or directory swapped for a link (or another file) after the listing is refused -- a failed
entry, named, while the rest is imported -- and nothing outside the tree is read. Entries matched by the ignore
rules (``.gitignore`` syntax: version-control folders and ``__pycache__`` by default, plus an
ignore file's lines) are left out silently and counted.

The package: :mod:`.items` (what sources yield), :mod:`.jsonl` and :mod:`.directory` (the sources),
:mod:`.mime` (the type guess), :mod:`.importer` and :mod:`.exporter`.
"""
