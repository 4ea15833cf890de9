"""Keeping Python's cyclic garbage collector out of the hot loops.

Reference counting frees almost everything a crawl or a batch allocates; the cyclic
collector only finds cycles, but it runs every 700 new container objects and, every so
often, walks every object the process holds. Both helpers restore the collector's state
when they exit.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

CRAWL_THRESHOLD = 20_000  # new containers between young collections during a crawl


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while loading millions of acyclic objects.

    Each collection walks every object already loaded, so with the collector on, loading
    gets slower as it goes (a third of the time for 1M items here).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextmanager
def rarer_gc(threshold: int = CRAWL_THRESHOLD) -> Iterator[None]:
    """Collect young objects every ``threshold`` allocations instead of 700.

    A page allocates a few thousand short-lived containers (responses, selectors, rows),
    so the default collects several times per page for almost nothing. Cycles are still
    collected, later; memory stays bounded.
    """
    before = gc.get_threshold()
    gc.set_threshold(max(before[0], threshold), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
