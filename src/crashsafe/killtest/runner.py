"""Run one scraper through a kill schedule against the demo shop, and score the result."""

from __future__ import annotations

import random
import signal
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from crashsafe.demo.process import ShopProcess
from crashsafe.errors import CrashsafeError
from crashsafe.killtest.scrapers import Row, Scraper

FINAL_TIMEOUT = 900.0  # seconds for the last, uninterrupted run
GRACEFUL_TIMEOUT = 60.0  # after SIGINT, before we give up and SIGKILL


@dataclass(frozen=True, slots=True)
class Calibration:
    """From an uninterrupted crashsafe run: ``startup`` is spawn to first request,
    ``crawl`` first request to exit."""

    startup: float
    crawl: float


def kill_schedule(
    *, kills: int, workers: int, window: tuple[float, float], calibration: Calibration, seed: int
) -> list[list[float]]:
    """Seconds after each (re)start at which to kill, per worker.

    Kill k lands ``startup + u * crawl / kills`` seconds after a start, ``u`` uniform in
    ``window``: with the default window the kills together cover about 60 % of an
    uninterrupted crawl, so they land mid-crawl and the last run still has work.
    """
    rng = random.Random(seed)
    step = calibration.crawl / kills
    return [
        [calibration.startup + rng.uniform(*window) * step for _ in range(kills)]
        for _ in range(workers)
    ]


@dataclass(slots=True)
class Outcome:
    """One scraper in one run: every figure the kill test reports."""

    scraper: str
    rows: int = 0
    distinct: int = 0
    wrong: int = 0
    missing: int = 0
    requests: int = 0
    minimum: int = 0
    repeated: int = 0
    kills_landed: int = 0
    seconds: float = 0.0
    final_exit: list[int] = field(default_factory=list)

    @property
    def duplicates(self) -> int:
        return self.rows - self.distinct


def score(rows: list[Row], catalogue: dict[str, dict[str, str]]) -> tuple[int, int, int]:
    """(distinct products, rows with a wrong value, products missing)."""
    seen = Counter(sku for sku, _, _ in rows if sku)
    wrong = sum(
        1
        for sku, name, price in rows
        if sku not in catalogue
        or (name, price) != (catalogue[sku]["name"], catalogue[sku]["price"])
    )
    distinct = sum(1 for sku in seen if sku in catalogue)
    return distinct, wrong, len(catalogue) - distinct


def _stop(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    proc.send_signal(sig)
    try:
        proc.wait(GRACEFUL_TIMEOUT if sig != signal.SIGKILL else None)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_one(
    scraper: Scraper,
    shop: ShopProcess,
    workdir: Path,
    schedule: list[list[float]],
    catalogue: dict[str, dict[str, str]],
    *,
    sig: signal.Signals = signal.SIGKILL,
) -> Outcome:
    """Kill ``scraper`` per ``schedule`` (one list of delays per worker), then let it finish."""
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = scraper.command(shop.url, workdir)
    shop.reset()
    outcome = Outcome(scraper.name)
    lock = threading.Lock()

    def worker(delays: list[float]) -> None:
        for delay in delays:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                proc.wait(delay)
            except subprocess.TimeoutExpired:
                _stop(proc, sig)
                with lock:
                    outcome.kills_landed += 1
            else:
                return  # it finished before the kill: nothing left to kill

    started = time.monotonic()
    threads = [threading.Thread(target=worker, args=(d,)) for d in schedule]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    finals = [
        subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for _ in schedule
    ]
    for proc in finals:
        try:
            proc.wait(FINAL_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        outcome.final_exit.append(proc.returncode)
    outcome.seconds = time.monotonic() - started

    stats = shop.stats()
    rows = scraper.rows(workdir)
    outcome.rows = len(rows)
    outcome.distinct, outcome.wrong, outcome.missing = score(rows, catalogue)
    outcome.requests = stats["requests"]
    outcome.minimum = stats["minimum"]
    outcome.repeated = stats["over_minimum"]
    return outcome


def calibrate(scraper: Scraper, shop: ShopProcess, workdir: Path) -> Calibration:
    """Time one uninterrupted run: startup (spawn → first request) and crawl."""
    workdir.mkdir(parents=True, exist_ok=True)
    shop.reset()
    spawned = time.time()
    proc = subprocess.run(scraper.command(shop.url, workdir), capture_output=True, timeout=900)
    ended = time.time()
    if proc.returncode != 0:
        raise CrashsafeError(
            f"calibration run of {scraper.name} failed: {proc.stderr.decode()[-2000:]}"
        )
    log = shop.log(spawned)
    first = log[0][0] if log else spawned
    return Calibration(startup=first - spawned, crawl=max(ended - first, 0.05))
