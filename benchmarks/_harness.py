"""Run contenders as subprocesses against one demo shop and measure them the same way.

Wall time, CPU seconds (user + system, from wait4) and peak RSS of each child.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Measurement:
    wall: float
    cpu: float
    peak_rss_mb: float
    returncode: int


def measure(args: Sequence[str], *, env: dict[str, str] | None = None) -> Measurement:
    """Run ``args`` to the end; CPU and peak RSS come from the kernel's accounting."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        list(args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env or dict(os.environ)
    )
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code
    if code != 0:
        sys.stderr.write(err.decode(errors="replace"))
    return Measurement(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, code)


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def print_table(results: dict[str, list[Measurement]], pages: int) -> None:
    """Medians per contender: pages/s, CPU s per 1 000 pages, peak RSS, ratio to the first."""
    ref = next(iter(results))
    ref_rate = pages / median([m.wall for m in results[ref]])
    width = max(22, *(len(name) for name in results))
    head = (
        f"{'contender':<{width}} {'pages/s':>9} {'CPU s/1k pages':>15} {'peak RSS MB':>12} "
        f"{'vs ' + ref:>20}"
    )
    print(head)
    print("-" * len(head))
    for name, ms in results.items():
        rate = pages / median([m.wall for m in ms])
        cpu = median([m.cpu for m in ms]) / pages * 1000
        rss = median([m.peak_rss_mb for m in ms])
        print(f"{name:<{width}} {rate:>9,.0f} {cpu:>15.2f} {rss:>12.0f} {rate / ref_rate:>19.2f}x")


class ManualClock:
    """Seconds since the epoch, moved on by hand (``clock.now += 86400``): a store on it
    lives through simulated days."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now
