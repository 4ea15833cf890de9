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
