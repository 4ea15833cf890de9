"""Run one scraper through a kill schedule against the demo shop, and score the result."""

from __future__ import annotations

import contextlib
import os
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
from crashsafe.killtest.effects_check import EffectsOutcome
from crashsafe.killtest.scrapers import Row, Scraper

FINAL_TIMEOUT = 900.0  # seconds for the last, uninterrupted run
GRACEFUL_TIMEOUT = 60.0  # after SIGINT, before we give up and SIGKILL
START_TIMEOUT = 60.0  # for a (re)started process to make its first request
POLL = 0.01
BROWSER_GONE_TIMEOUT = 10.0  # seconds for a killed crawl's Chromium to go


@dataclass(frozen=True, slots=True)
class Calibration:
    """From an uninterrupted crashsafe run: ``startup`` is spawn to first request,
    ``crawl`` first request to exit."""

    startup: float
    crawl: float


def request_schedule(
    *, kills: int, workers: int, window: tuple[float, float], pages: int, seed: int
) -> list[list[int]]:
    """How many requests a (re)started process makes before it is killed, per worker.

    Kill k lands after ``u * pages / (workers * kills)`` requests of that process, ``u``
    uniform in ``window``: with the default window the kills together cover about 60 % of
    the crawl, so they land mid-crawl and the last run still has work. Counted in the
    process's own requests (the shop tells processes apart by User-Agent), a kill lands
    mid-crawl however slow the machine is; kills timed in seconds landed after the crawl
    had finished on a busy machine, and proved nothing.
    """
    rng = random.Random(seed)
    step = pages / (workers * kills) if kills else 0.0
    return [
        [max(1, round(rng.uniform(*window) * step)) for _ in range(kills)] for _ in range(workers)
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
    final_errors: list[str] = field(default_factory=list)  # last line of a failed final run
    effects: EffectsOutcome | None = None  # killtest --effects: files, WARC, webhooks
    browsers_left: int = 0  # killtest --render: kills after which Chromium outlived its crawl

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


def stop_process(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Send ``sig``; after SIGINT/SIGTERM allow a graceful exit, then SIGKILL."""
    proc.send_signal(sig)
    try:
        proc.wait(GRACEFUL_TIMEOUT if sig != signal.SIGKILL else None)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _wait_first_request(
    shop: ShopProcess, proc: subprocess.Popen[bytes], agent: str, since: float
) -> bool:
    """Wait until the shop has seen a request from ``agent``; False if the process ended."""
    deadline = time.monotonic() + START_TIMEOUT
    while proc.poll() is None and time.monotonic() < deadline:
        if shop.log(since, agent=agent):
            return True
        time.sleep(POLL)
    return False


def _wait_requests(
    shop: ShopProcess, proc: subprocess.Popen[bytes], agent: str, since: float, count: int
) -> bool:
    """Wait until ``agent`` has made ``count`` requests; False if the process ended first."""
    deadline = time.monotonic() + FINAL_TIMEOUT
    while proc.poll() is None and time.monotonic() < deadline:
        if len(shop.log(since, agent=agent)) >= count:
            return proc.poll() is None
        time.sleep(POLL)
    return False


def run_one(
    scraper: Scraper,
    shop: ShopProcess,
    workdir: Path,
    schedule: list[list[int]],
    catalogue: dict[str, dict[str, str]],
    *,
    sig: signal.Signals = signal.SIGKILL,
    tag: str = "",
    browsers: bool = False,
) -> Outcome:
    """Kill ``scraper`` per ``schedule`` (one list per worker: requests each restarted
    process makes before its kill, see :func:`request_schedule`), then let it finish.
    With ``browsers``, after each kill and each final run the process's Chromium must be
    gone (within :data:`BROWSER_GONE_TIMEOUT`); one that is not is counted, then ended."""
    workdir.mkdir(parents=True, exist_ok=True)
    shop.reset()
    outcome = Outcome(scraper.name)
    lock = threading.Lock()

    def worker(slot: int, counts: list[int]) -> None:
        for k, count in enumerate(counts):
            agent = f"killtest-{scraper.name}{tag}-w{slot}-k{k}"
            since = time.time()
            proc = subprocess.Popen(
                scraper.command(shop.url, workdir, agent),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            if not _wait_first_request(shop, proc, agent, since):
                stop_process(proc, signal.SIGKILL)
                return  # it ended without a request: the crawl is complete
            if not _wait_requests(shop, proc, agent, since, count):
                return  # it finished before the kill: nothing left to kill
            stop_process(proc, sig)
            left = browsers and not _browser_gone(proc.pid)
            with lock:
                outcome.kills_landed += 1
                outcome.browsers_left += left

    started = time.monotonic()
    threads = [threading.Thread(target=worker, args=(n, d)) for n, d in enumerate(schedule)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    finals = [
        subprocess.Popen(
            scraper.command(shop.url, workdir, f"killtest-{scraper.name}{tag}-w{n}-final"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for n in range(len(schedule))
    ]
    for proc in finals:
        try:
            _, err = proc.communicate(timeout=FINAL_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        outcome.final_exit.append(proc.returncode)
        if browsers and not _browser_gone(proc.pid):
            outcome.browsers_left += 1
        if proc.returncode != 0:
            lines = err.decode(errors="replace").strip().splitlines() or ["(nothing on stderr)"]
            outcome.final_errors.append(lines[-1])
    outcome.seconds = time.monotonic() - started

    stats = shop.stats()
    rows = scraper.rows(workdir)
    outcome.rows = len(rows)
    outcome.distinct, outcome.wrong, outcome.missing = score(rows, catalogue)
    outcome.requests = stats["requests"]
    outcome.minimum = stats["minimum"]
    outcome.repeated = stats["over_minimum"]
    if scraper.effects:  # pictures too: each path once is the minimum
        outcome.minimum = stats["distinct_pages"] + stats["errors"]
        outcome.repeated = stats["repeated"]
    return outcome


def _browser_gone(pid: int) -> bool:
    """Whether the Chromium of the crawl process ``pid`` is gone (waited for up to
    :data:`BROWSER_GONE_TIMEOUT`); if not, its processes are ended, and False."""
    from crashsafe.crawl.browser import browser_processes

    deadline = time.monotonic() + BROWSER_GONE_TIMEOUT
    while browser_processes(pid):
        if time.monotonic() > deadline:
            for left in browser_processes(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(left, signal.SIGKILL)
            return False
        time.sleep(0.05)
    return True


def calibrate(scraper: Scraper, shop: ShopProcess, workdir: Path) -> Calibration:
    """Time one uninterrupted run: startup (spawn → first request) and crawl."""
    workdir.mkdir(parents=True, exist_ok=True)
    shop.reset()
    spawned = time.time()
    agent = f"killtest-{scraper.name}-calibration"
    cmd = scraper.command(shop.url, workdir, agent)
    proc = subprocess.run(cmd, capture_output=True, timeout=FINAL_TIMEOUT)
    ended = time.time()
    if proc.returncode != 0:
        raise CrashsafeError(
            f"calibration run of {scraper.name} failed: {proc.stderr.decode()[-2000:]}"
        )
    log = shop.log(spawned, agent=agent)
    first = log[0][0] if log else spawned
    return Calibration(startup=first - spawned, crawl=max(ended - first, 0.05))
