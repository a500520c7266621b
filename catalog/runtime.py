"""Process-wide settings of the Python runtime, and the one way a serving process says it is stopping."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Callable, Iterator


def settle_garbage_collector() -> None:
    """Keep the start-up heap out of the cyclic collector's way, and collect young objects less often.

    Everything alive once a command has started (modules, the SDK's models, the engine) lives as long
    as the process; ``gc.freeze`` stops every full collection from walking it again. A fan-out to
    hundreds of listen streams allocates tens of thousands of short-lived objects per update; at
    the default threshold (700) that is dozens of collections inside one delivery.

    Once per process: objects frozen are never collected, even once unreachable, so freezing again
    in a process that starts servers over and over (a test run) would keep each start's garbage.
    """
    global _settled
    if not _settled:
        _settled = True
        gc.collect()
        gc.freeze()
        gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    if _paused_by_start_up:
        gc.enable()


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic collection while a server starts, until :func:`settle_garbage_collector` (or the end).

    Start-up is imports, which allocate hundreds of thousands of objects that live as long as the
    process: the collector walked them again and again while they were made (about a fifth of the
    import time), only for the start-up heap to be collected once and frozen when the server has
    started. Paused, that one collection is all. Whatever ends the block first (a start-up that
    failed, a server stopped) turns the collector back on, as it found it.
    """
    global _paused_by_start_up
    if not gc.isenabled():
        yield  # off already: not ours to turn on
        return
    gc.disable()
    _paused_by_start_up = True
    try:
        yield
    finally:
        _paused_by_start_up = False
        gc.enable()


def freeze_start_up_imports() -> None:
    """Freeze the modules a paused start-up has imported, as they are, before it goes on.

    Modules are never unloaded: the collection :func:`settle_garbage_collector` makes would walk the
    ~170,000 objects the imports made to find the ~1,000 (about 0.45 MB) that importing leaves
    unreachable -- the same in every Python process: modules that replace their own pure-Python
    classes (``datetime``), enums converted in ``socket``, ``ssl`` and ``signal``, pydantic's
    scratch classes. They are frozen with the rest instead, and the settling collection walks only
    what start-up made after the imports (the database's start, the app, its engine), which it
    still collects. Only while :func:`collector_paused` holds (no collection has run since the
    process started); otherwise nothing.
    """
    if _paused_by_start_up and not _settled:
        gc.freeze()


GC_YOUNG_THRESHOLD = 10_000
_settled = False
_paused_by_start_up = False


# -- stopping ---------------------------------------------------------------------------------------
#
# uvicorn waits for open connections to finish *before* it runs the app's lifespan shutdown, and a
# listen stream or a 2025-11-25 GET stream never finishes on its own. So the server tells the apps
# it serves that it is stopping first (``begin_shutdown``, called by ``catalog.serving``), and each
# app's lifespan turns that into its one shutdown signal, which the event hub and the MCP endpoint
# await to end their streams. Keyed by event loop: a test process runs several servers, each on a
# loop of its own in a thread, and stopping one must not end another's streams.

_on_shutdown: dict[asyncio.AbstractEventLoop, list[Callable[[], None]]] = {}


@contextlib.contextmanager
def shutdown_hook(callback: Callable[[], None]) -> Iterator[None]:
    """Call ``callback`` when the server running on this event loop begins to stop."""
    loop = asyncio.get_running_loop()
    callbacks = _on_shutdown.setdefault(loop, [])
    callbacks.append(callback)
    try:
        yield
    finally:
        callbacks.remove(callback)
        if not callbacks:
            del _on_shutdown[loop]


def begin_shutdown() -> None:
    """The server on this event loop is stopping: every app it serves ends its streams now."""
    for callback in list(_on_shutdown.get(asyncio.get_running_loop(), ())):
        callback()
