"""Table, verdicts and JSON of ``killtest --mode batch``."""

from __future__ import annotations

import dataclasses
import sys
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from crashsafe.killtest.batch_mode import BATCH_SIZE, BatchKillOptions, BatchOutcome
from crashsafe.killtest.report import machine


def tested(options: BatchKillOptions, runs: list[dict[str, BatchOutcome]]) -> bool:
    """Whether any kill landed mid-job: with none, nothing was proven."""
    return not options.kills or any(run["crashsafe"].kills_landed for run in runs)


def holds(options: BatchKillOptions, runs: list[dict[str, BatchOutcome]]) -> bool:
    return tested(options, runs) and all(not run["crashsafe"].problems for run in runs)


def print_batch_report(options: BatchKillOptions, runs: list[dict[str, BatchOutcome]]) -> None:
    console = Console(width=None if sys.stdout.isatty() else 140)
    table = Table(
        title=f"batch kill test: {options.runs} runs × {options.kills} {options.sig.name}s, "
        f"200 reviews, {BATCH_SIZE} per call, {options.concurrency} calls in flight"
    )
    columns = ["run", "job", "stored", "distinct", "wrong", "missing", "calls"]
    columns += ["items billed", "paid twice", "tokens", "kills landed", "time"]
    for col in columns:
        table.add_column(col, justify="left" if col == "job" else "right")
    for n, run in enumerate(runs, 1):
        for job, o in run.items():
            style = ("red" if o.problems else "green") if job == "crashsafe" else ""
            table.add_row(
                str(n), job, str(o.rows), str(o.distinct), str(o.wrong), str(o.missing),
                str(o.calls), str(o.items_billed), str(o.paid_twice), f"{o.tokens:,}",
                f"{o.kills_landed}/{options.kills}", f"{o.seconds:.1f} s", style=style,
            )  # fmt: skip
    console.print(table)
    naive = [run["naive"] for run in runs]
    safe = [run["crashsafe"] for run in runs]
    console.print(
        f"naive:     {min(o.rows for o in naive)}–{max(o.rows for o in naive)} results "
        f"stored for 200 reviews, up to {max(o.paid_twice for o in naive)} items paid twice",
        highlight=False,
    )
    broken = [(n, o.problems) for n, o in enumerate(safe, 1) if o.problems]
    if broken:
        why = "; ".join(f"run {n}: {', '.join(problems)}" for n, problems in broken)
        console.print(f"crashsafe: GUARANTEE BROKEN — {why}", highlight=False)
    elif not tested(options, runs):
        console.print(
            "crashsafe: NOT TESTED — no kill landed mid-job (every job finished before its "
            "kill), so nothing was proven; use more --latency-ms or an earlier --kill-window",
            highlight=False,
        )
    else:
        worst = max(safe, key=lambda o: o.paid_twice)
        bound = options.concurrency * BATCH_SIZE * worst.kills_landed
        console.print(
            "crashsafe: holds — every review stored exactly once, 0 wrong, 0 missing; at most "
            f"{worst.paid_twice} items paid twice for {worst.kills_landed} kills "
            f"(bound {bound}: the batches in flight)",
            highlight=False,
        )


def batch_json(
    options: BatchKillOptions, calibration: float, runs: list[dict[str, BatchOutcome]]
) -> dict[str, Any]:
    return {
        "mode": "batch",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "options": {**dataclasses.asdict(options), "sig": options.sig.name},
        "calibration_seconds": calibration,
        "runs": [{job: dataclasses.asdict(o) for job, o in run.items()} for run in runs],
        "holds": holds(options, runs),
        "tested": tested(options, runs),
    }
