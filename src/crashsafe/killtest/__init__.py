"""``crashsafe killtest``: the crash experiment as a command.

Starts the demo shop as its own process, then for each run and each scraper (the naive
anti-pattern and ``crashsafe crawl``) kills the scraper at the same seeded moments, restarts
it each time, lets it finish, and checks what it stored against the shop's catalogue and
what it requested against the shop's own count.
"""

from __future__ import annotations

import signal
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from crashsafe.demo.process import ShopProcess
from crashsafe.demo.shop import ShopOptions
from crashsafe.errors import ConfigError
from crashsafe.killtest.effects_check import check_effects
from crashsafe.killtest.runner import (
    Calibration,
    Outcome,
    calibrate,
    request_schedule,
    run_one,
)
from crashsafe.killtest.scrapers import CrashsafeScraper, NaiveScraper, Scraper, ScrapyScraper

__all__ = ["KillTestOptions", "KillTestResult", "run_killtest"]


@dataclass(frozen=True, slots=True)
class KillTestOptions:
    runs: int = 5
    kills: int = 10
    kill_window: tuple[float, float] = (0.2, 1.0)
    seed: int = 0
    concurrency: int = 4
    lease_ahead: int = 0
    workers: int = 1
    sig: signal.Signals = signal.SIGKILL
    shop: ShopOptions = field(default_factory=lambda: ShopOptions(latency_ms=10.0))
    db: str | None = None  # a PostgreSQL database for crashsafe (default: SQLite files)
    scraper: str = "crashsafe"  # or "scrapy": Scrapy under the adapter vs Scrapy + JOBDIR
    effects: bool = False  # crashsafe downloads, archives, and its outbox is delivered
    render: bool = False  # JavaScript product pages, rendered in Chromium by crashsafe

    def __post_init__(self) -> None:
        low, high = self.kill_window
        if not 0 <= low <= high:
            raise ConfigError(f"--kill-window {low}:{high}: need 0 <= A <= B")
        if self.runs < 1 or self.kills < 0 or self.workers < 1 or self.concurrency < 1:
            raise ConfigError("--runs, --workers and --concurrency must be >= 1, --kills >= 0")
        if self.lease_ahead < 0:
            raise ConfigError("--lease-ahead must be >= 0")
        if self.scraper not in ("crashsafe", "scrapy"):
            raise ConfigError(f"--scraper {self.scraper!r}: use crashsafe or scrapy")
        if self.render and (self.scraper == "scrapy" or self.effects):
            raise ConfigError("--render is for crashsafe's own crawl: leave out --scraper "
                              "and --effects")  # fmt: skip
        if self.effects and self.scraper == "scrapy":
            raise ConfigError("--effects is for crashsafe's own crawl: leave out --scraper")
        if self.scraper == "scrapy" and (self.workers > 1 or self.db or self.lease_ahead):
            raise ConfigError("--scraper scrapy runs one process on SQLite: leave out "
                              "--workers, --db and --lease-ahead")  # fmt: skip


@dataclass(slots=True)
class KillTestResult:
    options: KillTestOptions
    calibration: Calibration
    runs: list[dict[str, Outcome]] = field(default_factory=list)

    @property
    def products(self) -> int:
        return self.options.shop.products

    def bound(self, outcome: Outcome) -> int:
        """Most repeated requests crashsafe may make: the pages a worker may hold between
        lease and commit (``concurrency + lease_ahead``; under the Scrapy adapter, the
        requests in flight and a batch leased ahead: ``2 × concurrency``), for each kill."""
        o = self.options
        held = 2 * o.concurrency if o.scraper == "scrapy" else o.concurrency + o.lease_ahead
        if o.effects:  # a page held at a kill may have fetched its picture too
            held *= 2
        return held * outcome.kills_landed

    def label(self, role: str) -> str:
        """What the table calls the scraper in ``role`` (naive or crashsafe)."""
        if self.options.scraper == "scrapy":
            return {"naive": "scrapy JOBDIR", "crashsafe": "scrapy + crashsafe"}[role]
        return role

    def violations(self, outcome: Outcome) -> list[str]:
        """Why crashsafe's ``outcome`` breaks the guarantee (empty: it holds)."""
        problems = []
        if outcome.duplicates:
            problems.append(f"{outcome.duplicates} duplicate rows")
        if outcome.missing:
            problems.append(f"{outcome.missing} products missing")
        if outcome.wrong:
            problems.append(f"{outcome.wrong} wrong values")
        if outcome.repeated > self.bound(outcome):
            problems.append(f"{outcome.repeated} repeated requests > bound {self.bound(outcome)}")
        if outcome.effects is not None:
            problems += outcome.effects.problems()
        if outcome.browsers_left:
            problems.append(f"Chromium left running after {outcome.browsers_left} kill(s)")
        if any(code != 0 for code in outcome.final_exit):
            said = "; ".join(dict.fromkeys(outcome.final_errors))  # each message once
            problems.append(
                f"final run exited {outcome.final_exit}" + (f": {said}" if said else "")
            )
        return problems

    @property
    def tested(self) -> bool:
        """Whether any kill landed mid-crawl: with none, nothing was proven."""
        return not self.options.kills or any(r["crashsafe"].kills_landed for r in self.runs)

    @property
    def holds(self) -> bool:
        return self.tested and all(not self.violations(run["crashsafe"]) for run in self.runs)


def run_killtest(
    options: KillTestOptions,
    *,
    workdir: Path | None = None,
    on_progress: Callable[[str], None] = lambda _msg: None,
) -> KillTestResult:
    """Run the whole experiment; ``on_progress`` receives one line per step."""
    # A lease lost with its worker counts an attempt (it may have fetched: a page that
    # kills its worker every time must end in the dead letter). Here the kills are the
    # experiment's, not the pages', and a URL in flight at many of them would be sent to
    # the dead letter by them alone (seen: 5 attempts spent on one product, 1 run in 7
    # with 4 workers x 10 kills). Each landed kill charges a URL once at most, so this
    # budget cannot be spent by kills and the shop's failing first requests together.
    attempts = options.kills * options.workers + options.shop.error_attempts + 1
    crashsafe: Scraper = CrashsafeScraper(
        concurrency=options.concurrency, lease_ahead=options.lease_ahead, db=options.db,
        max_attempts=max(5, attempts), effects=options.effects, render=options.render,
    )  # fmt: skip
    scrapers: list[Scraper] = [NaiveScraper(), crashsafe]
    if options.scraper == "scrapy":  # the same kills for Scrapy, with and without crashsafe
        crashsafe = ScrapyScraper("crashsafe", adapter=True, concurrency=options.concurrency)
        scrapers = [ScrapyScraper("naive", concurrency=options.concurrency), crashsafe]
    with tempfile.TemporaryDirectory(prefix="crashsafe-killtest-") as tmp:
        root = workdir or Path(tmp)
        try:
            return _run_all(options, scrapers, crashsafe, root, on_progress)
        finally:
            if workdir is None:  # --keep keeps the PostgreSQL schemas too
                for folder in sorted(root.iterdir()):
                    if folder.name == "calibration" or folder.name.endswith(crashsafe.name):
                        crashsafe.cleanup(folder)


def _run_all(
    options: KillTestOptions,
    scrapers: list[Scraper],
    crashsafe: Scraper,
    root: Path,
    on_progress: Callable[[str], None],
) -> KillTestResult:
    with ShopProcess(options.shop) as shop:
        catalogue = shop.catalogue()
        on_progress(f"demo shop at {shop.url}: {options.shop.pages} pages")
        cal = calibrate(crashsafe, shop, root / "calibration")
        on_progress(
            f"calibration: crashsafe starts in {cal.startup:.2f} s and crawls in "
            f"{cal.crawl:.2f} s uninterrupted"
        )
        result = KillTestResult(options, cal)
        for run in range(options.runs):
            schedule = request_schedule(
                kills=options.kills,
                workers=options.workers,
                window=options.kill_window,
                pages=options.shop.pages,
                seed=options.seed * 1000 + run,
            )
            outcomes = {}
            for scraper in scrapers:
                out = run_one(
                    scraper,
                    shop,
                    root / f"run{run + 1}-{scraper.name}",
                    schedule,
                    catalogue,
                    sig=options.sig,
                    tag=f"-r{run + 1}",
                    browsers=options.render and scraper is crashsafe,
                )
                outcomes[scraper.name] = out
                if options.effects and scraper is crashsafe:
                    assert isinstance(crashsafe, CrashsafeScraper)
                    folder = root / f"run{run + 1}-{scraper.name}"
                    out.effects = check_effects(
                        folder, crashsafe.db_url(folder), shop.url, options.shop,
                        kills=options.kills, seed=options.seed * 1000 + run,
                    )  # fmt: skip
                on_progress(
                    f"run {run + 1}/{options.runs} {scraper.name}: {out.rows} rows, "
                    f"{out.requests} requests, {out.kills_landed} kills landed, "
                    f"{out.seconds:.1f} s"
                )
            result.runs.append(outcomes)
    return result
