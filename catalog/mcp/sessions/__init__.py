"""2025-11-25 Streamable HTTP sessions (COMPAT-7), served by any worker of any host.

The SDK's session manager keeps a session in the memory of the process that opened it, so the next
request of the session, which the kernel or a load balancer may hand to another worker, finds no
session ("Session not found"). Here a session lives in PostgreSQL (``catalog.core.sessions``) and
every request is served on its own, by whichever process receives it, with the SDK's public kernel
(``serve_one`` over a ``Connection`` rebuilt from the stored ``initialize`` parameters):

* ``POST`` ``initialize`` opens a session (``Mcp-Session-Id`` in the answer), keeping a bounded part
  of its parameters (``-32602`` if even that is over the cap), unless the caller or its tenant
  holds its cap of live sessions (429, ``Retry-After``, ``-31003``: see ``catalog.core.sessions``);
  any other request resumes it (one statement that checks the credential and the idle time and
  touches it) and is answered on an SSE stream of its own, which also carries what the handler
  sends the client meanwhile. A notification or a response is ``202``. A client's answer to a
  server-initiated request (the consent form's ``elicitation/create``) is stored and announced on
  the ``catalog_sessions`` NOTIFY channel, so the process whose read waits for it, wherever it
  runs, continues.
* ``GET`` opens the session's stream for server-initiated messages. The process holding it produces
  them itself from the events every process receives (``list_changed`` for every session, and
  ``updated`` for the session's ``resources/subscribe`` URIs, which are stored with the session and
  reloaded when any process changes them). One stream per session: a newer one, on any process,
  ends the older, so each message is sent once. An open stream keeps its session alive.
* ``DELETE`` ends the session everywhere: its rows go and every process ends its streams and waits.
  A session unused for ``CATALOG_SESSION_IDLE_SECONDS`` is gone at once and swept later.

2026-07-28 requests never come here: they are stateless (``catalog.mcp.asgi`` routes by era).

Modules: :mod:`.transport` (``SessionTransport``: the HTTP methods, ``initialize``, a request of a
session, cancellation, ``resources/subscribe``), :mod:`.back_channel` (what a handler sends the
client while serving a request, and the client's answers), :mod:`.get_stream` (the GET stream),
:mod:`.lifecycle` (the lifespan, the idle sweep, the notices of other processes) and :mod:`.base`
(what they share: the session header, the host, ``session_of``). Callers import from the module
that defines a name.
"""
