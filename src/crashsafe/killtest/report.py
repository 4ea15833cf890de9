"""The kill test's table, verdicts and JSON."""

from __future__ import annotations

import dataclasses
import os
import platform
import sys
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from crashsafe.killtest import KillTestResult
from crashsafe.killtest.runner import Outcome

FOUNDING = {
    "naive": {"rows": "1 286–2 165", "requests": "1 361–2 283", "seconds": "9.2–10.8"},
    "crashsafe": {"rows": "500", "requests": "525–528", "seconds": "6.8–8.3"},
}


def machine() -> dict[str, Any]:
    """Where a kill test ran, for its JSON figures."""
    return {"platform": platform.platform(), "python": sys.version.split()[0],
            "cpus": os.cpu_count()}  # fmt: skip


def table(result: KillTestResult) -> Table:
    o = result.options
    title = (
        f"kill test{' (Scrapy)' if o.scraper == 'scrapy' else ''}: "
        f"{o.runs} runs × {o.kills} {o.sig.name}s"
        + (f" × {o.workers} workers" if o.workers > 1 else "")
        + f", {result.products} products, concurrency {o.concurrency}"
        + (f" + {o.lease_ahead} leased ahead" if o.lease_ahead else "")
    )
    t = Table(title=title)
    for col in ("run", "scraper", "rows", "distinct", "wrong", "missing", "requests"):
        t.add_column(col, justify="left" if col == "scraper" else "right")
    for col in ("repeated", "kills landed", "time"):
        t.add_column(col, justify="right")
    for i, run in enumerate(result.runs, 1):
        for name, out in run.items():
            bad = name == "crashsafe" and bool(result.violations(out))
            style = "red" if bad else ("green" if name == "crashsafe" else "")
            t.add_row(
                str(i),
                result.label(name),
                f"{out.rows:,}",
                f"{out.distinct:,}",
                str(out.wrong),
                str(out.missing),
                f"{out.requests:,}",
                f"{out.repeated:,}",
                f"{out.kills_landed}/{o.kills * o.workers}",
                f"{out.seconds:.1f} s",
                style=style,
            )
    return t


def effects_table(result: KillTestResult) -> Table:
    """``--effects``: crashsafe's files, WARC archive and webhooks, per run."""
    t = Table(title="side effects (crashsafe): files, WARC, webhooks")
    cols = ["run", "files / distinct contents", "temporaries left", "records w/o their file"]
    cols += ["WARC files", "responses archived", "events", "processed once"]
    cols += ["processed twice", "webhooks received", "dispatcher kills"]
    for col in cols:
        t.add_column(col, justify="right")
    for i, run in enumerate(result.runs, 1):
        e = run["crashsafe"].effects
        if e is None:
            continue
        t.add_row(
            str(i), f"{e.files}/{e.files_expected}", str(e.temporaries),
            str(e.records_without_file), f"{e.warc_files} ({len(e.warc_unreadable)} bad)",
            f"{e.warc_responses:,}", f"{e.events:,}", f"{e.processed:,}",
            str(e.processed_twice), f"{e.webhooks:,}", str(e.dispatcher_kills),
            style="red" if e.problems() else "green",
        )  # fmt: skip
    return t


def _span(values: list[float], fmt: str = "{:,.0f}") -> str:
    low, high = min(values), max(values)
    return fmt.format(low) if low == high else f"{fmt.format(low)}–{fmt.format(high)}"


def verdicts(result: KillTestResult) -> list[str]:
    lines = []
    naive = [run["naive"] for run in result.runs]
    safe = [run["crashsafe"] for run in result.runs]
    n = result.products
    dup_runs = sum(1 for out in naive if out.duplicates or out.wrong or out.missing)
    peer, subject = f"{result.label('naive')}:", f"{result.label('crashsafe')}:"
    width = max(len(peer), len(subject)) + 1
    peer, subject = peer.ljust(width), subject.ljust(width)
    lines.append(
        f"{peer}{_span([o.rows for o in naive])} rows for {n} products "
        f"(wrong or duplicated in {dup_runs}/{len(naive)} runs), "
        f"{_span([o.requests for o in naive])} requests "
        f"(up to {max(o.requests / o.minimum for o in naive):.1f}× the minimum), "
        f"{_span([o.seconds for o in naive], '{:.1f}')} s"
    )
    bad = [(i, result.violations(o)) for i, o in enumerate(safe, 1) if result.violations(o)]
    if not result.tested:
        lines.append(
            f"{subject}NOT TESTED — no kill landed mid-crawl (every crawl finished before "
            "its kill), so nothing was proven; use a larger shop (--listings) or more "
            "--latency-ms"
        )
    elif bad:
        why = "; ".join(f"run {i}: {', '.join(v)}" for i, v in bad)
        lines.append(f"{subject}GUARANTEE BROKEN — {why}")
    else:
        worst = max(safe, key=lambda o: o.repeated)
        lines.append(
            f"{subject}holds — exactly {n} correct rows in every run, 0 wrong, 0 missing; "
            f"{_span([o.requests for o in safe])} requests, at most {worst.repeated} repeated "
            f"for {worst.kills_landed} kills (bound {result.bound(worst)}), "
            f"{_span([o.seconds for o in safe], '{:.1f}')} s"
        )
        if result.options.render:
            lines.append(
                f"{' ' * width}rendered in Chromium — no browser process outlived its crawl "
                f"after any of the {sum(o.kills_landed for o in safe)} kills or final runs; "
                f"{result.label('naive')} reads the HTML only (no prices: wrong rows)"
            )
        effects = [o.effects for o in safe if o.effects is not None]
        if effects:
            lines.append(
                f"{' ' * width}side effects hold — one file per distinct content, every WARC "
                f"file read whole, every (record, version) processed once by the receiver "
                f"({_span([e.events for e in effects])} events, "
                f"{sum(e.dispatcher_kills for e in effects)} dispatcher kills, "
                f"{sum(e.webhooks - e.processed for e in effects)} repeats dropped)"
            )
    return lines


def founding_lines() -> list[str]:
    f = FOUNDING
    return [
        "founding experiment (sequential, 10 kills, 5 runs): "
        f"naive {f['naive']['rows']} rows, {f['naive']['requests']} requests, "
        f"{f['naive']['seconds']} s; idempotent exactly {f['crashsafe']['rows']} rows, "
        f"{f['crashsafe']['requests']} requests, {f['crashsafe']['seconds']} s"
    ]


def to_json(result: KillTestResult) -> dict[str, Any]:
    o = result.options

    def outcome(out: Outcome) -> dict[str, Any]:
        data = dataclasses.asdict(out)
        data["duplicates"] = out.duplicates
        if out.scraper == "crashsafe":
            data["bound"] = result.bound(out)
            data["violations"] = result.violations(out)
        return data

    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "options": {
            "runs": o.runs,
            "kills": o.kills,
            "kill_window": list(o.kill_window),
            "seed": o.seed,
            "concurrency": o.concurrency,
            "lease_ahead": o.lease_ahead,
            "workers": o.workers,
            "scraper": o.scraper,
            "effects": o.effects,
            "render": o.render,
            "labels": {role: result.label(role) for role in ("naive", "crashsafe")},
            "signal": o.sig.name,
            "shop": dataclasses.asdict(o.shop),
        },
        "calibration": dataclasses.asdict(result.calibration),
        "products": result.products,
        "pages": o.shop.pages,
        "runs": [{name: outcome(out) for name, out in run.items()} for run in result.runs],
        "holds": result.holds,
        "tested": result.tested,
        "founding": FOUNDING,
    }


def print_report(result: KillTestResult, console: Console | None = None) -> None:
    console = console or Console(width=None if sys.stdout.isatty() else 140)
    console.print(table(result))
    if result.options.effects:
        console.print(effects_table(result))
    founding = founding_lines() if result.options.scraper == "crashsafe" else []
    for line in founding + verdicts(result):
        console.print(line, highlight=False)
