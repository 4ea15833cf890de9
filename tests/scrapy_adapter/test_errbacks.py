"""The errback the adapter gives every leased request (contrib/scrapy/errbacks.py)."""

from __future__ import annotations

import copy
import os
import pickle
import threading

import pytest

if os.environ.get("CI") != "true":  # in CI the adapter is tested, never skipped
    pytest.importorskip("scrapy", reason="the Scrapy adapter needs crashsafe[scrapy]")


def test_a_request_with_it_pickles_and_copies_as_without() -> None:
    from scrapy import Request

    from crashsafe.contrib.scrapy.errbacks import Settles

    class Frontier:  # (what the real one holds: locks, timers)
        lock = threading.Lock()

    request = Request("http://127.0.0.1:9/x", errback=Settles(Frontier(), None))  # type: ignore[arg-type]
    assert pickle.loads(pickle.dumps(request)).errback is None  # (it failed: a lock)
    assert copy.deepcopy(request).errback is request.errback
