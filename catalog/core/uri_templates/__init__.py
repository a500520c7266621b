"""The one place for resource-template rules: RFC 6570 parsing, matching, bodies and completion.

Parsing and expansion are the MCP SDK's :class:`mcp.shared.uri_template.UriTemplate`; this module
adds the catalogue's rules on top.  Matching has the SDK's semantics on a scan of this module whose
work is linear in the URI for every template (see "The matching rule" below).

Decisions
---------
* **Accepted templates** (:func:`parse_template`): RFC 6570 as the SDK supports it (levels 1-3, no
  ``{var:N}``); at most 2048 bytes of UTF-8; no control, format or whitespace characters; the literal
  text before the first expression must be a valid, *canonical* URI prefix with a scheme
  (``test://template/``; ``Test://x/{id}`` is refused with the canonical spelling in the message),
  and a sample expansion must already be a canonical URI (so ``file:///a/../{x}`` or
  ``file:///a//{x}`` are refused: stored and requested URIs are canonical, such a template could
  never match).  Explode modifiers (``{/path*}``) are refused so every variable binds one string; use
  ``{+path}`` for multi-segment values.  Repeated variables are refused (by the SDK).
* **Matching** (:func:`match`) expects a canonical URI (:func:`catalog.core.uris.normalize_uri`);
  values come back percent-decoded.  Optional variables the URI leaves undefined (``{?q}``, and
  ``{/y}``, ``{.ext}``, ``{;p}``, ``{#f}``: RFC 6570 then omits their lead character too) are absent
  from the result.  Reading costs at most :data:`MATCH_STEPS_PER_CHARACTER` characters per
  character of URI and template, per shape (:func:`match_steps` counts them).  Templates some of
  whose expansions could not be read back are refused when created (:func:`check_readable`).
* **Bodies** (:func:`render_body`) use the template's own variable names as ``{var}`` placeholders.
  A placeholder is ``{name}`` with ``name`` an RFC 6570 variable name, and it must be one of the
  template's variables (a typo is refused when the template is saved); every other brace is the
  body's own text, so a JSON body is written naturally: ``{"a": {"id": "{id}"}}``.  ``{{name}}``
  is the literal text ``{name}``, for the rare body that needs it (``${{HOME}}`` in a script).  Unknown
  placeholders are refused when the template is created (:func:`validate_body`); at render time a
  variable missing from the match (an absent optional query variable) renders as the empty string.
  Values are escaped for the body's mime type: JSON-string escaping (no surrounding quotes) for
  ``application/json`` and ``*/*+json``; HTML/XML escaping (``& < > " '``) for ``text/html``,
  ``text/xml``, ``application/xml`` and ``*/*+xml``, where characters XML 1.0 cannot carry become
  U+FFFD; verbatim otherwise.  Lone surrogates become U+FFFD in every mode, so a rendered body always
  encodes as UTF-8.  Rendering never fails because of a value.
* **Completion** (:func:`completion_candidates`): the SQL prefix is the template expanded, left to
  right, with the values already known (``context.arguments``) and then the partial value of the
  argument being completed; it stops at the first variable whose value is unknown, at the first
  query expression (``{?..}``/``{&..}``, matched in any order), and inside a value at the first
  character whose spelling in a canonical URI is not unique (anything but unreserved or non-ASCII
  characters: ``!`` and ``%21`` are different URIs that decode to the same value).  So completing
  ``{name}`` of ``file:///{dir}/{name}`` without ``dir`` in context scans all of ``file:///``; the
  ``extract`` function then checks the template match, agreement with every context value, and that
  the value starts with the partial one.

Modules
-------
* :mod:`.parsing`: :class:`~.parsing.ParsedTemplate`, :func:`~.parsing.parse_template` and
  :func:`~.parsing.expand`.
* :mod:`.matching`: :func:`~.matching.match` and its variants, :func:`~.matching.check_readable`.
* :mod:`.scanner`: how a URI is matched in linear time (the shapes a template compiles to).
* :mod:`.bodies`: :func:`~.bodies.render_body` and :func:`~.bodies.validate_body`.
* :mod:`.completion`: :func:`~.completion.completion_candidates`.

Callers import from the module that defines a name.
"""
