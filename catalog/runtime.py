"""Process-wide settings of the Python runtime that the long-running commands share."""

from __future__ import annotations

import gc


def settle_garbage_collector() -> None:
    """Keep the start-up heap out of the cyclic collector's way, and collect young objects less often.

    Everything alive once a command has started (modules, the SDK's models, the engine) lives as long
    as the process; ``gc.freeze`` stops every full collection from walking it again. A fan-out to
    hundreds of listen streams allocates tens of thousands of short-lived objects per update; at
    the default threshold (700) that is dozens of collections inside one delivery.

    Once per process: objects frozen are never collected, even once unreachable, so freezing again
    in a process that starts apps over and over (a test run) would keep each start's garbage-to-be.
    """
    global _settled
    if _settled:
        return
    _settled = True
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


GC_YOUNG_THRESHOLD = 10_000
_settled = False
