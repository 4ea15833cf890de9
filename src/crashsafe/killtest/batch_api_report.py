"""Table, verdicts and JSON of ``killtest --mode batch-api``."""

from __future__ import annotations

import dataclasses
import sys
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from crashsafe.killtest.batch_api_mode import BatchApiKillOptions, BatchApiOutcome
from crashsafe.killtest.batch_mode import BATCH_SIZE, CALLS
from crashsafe.killtest.report import machine

Runs = list[dict[str, BatchApiOutcome]]


def tested(options: BatchApiKillOptions, runs: Runs) -> bool:
    """Whether any kill landed mid-job: with none, nothing was proven."""
    return not options.kills or any(run["crashsafe"].kills for run in runs)


def holds(options: BatchApiKillOptions, runs: Runs) -> bool:
    return tested(options, runs) and all(not run["crashsafe"].problems for run in runs)


def print_batch_api_report(options: BatchApiKillOptions, runs: Runs) -> None:
    console = Console(width=None if sys.stdout.isatty() else 140)
    chunks = -(-CALLS // options.chunk_requests)
    table = Table(
        title=f"Batch API kill test: {options.runs} runs × {options.kills} SIGKILLs at "
        f"seeded steps, 200 reviews, {BATCH_SIZE} per request, {CALLS} requests in "
        f"{chunks} chunks"
    )
    columns = ["run", "job", "stored", "distinct", "wrong", "missing", "batches"]
    columns += ["submitted twice", "items billed", "paid twice", "kills landed", "time"]
    for col in columns:
        table.add_column(col, justify="left" if col == "job" else "right")
    for n, run in enumerate(runs, 1):
        for job, o in run.items():
            style = ("red" if o.problems else "green") if job == "crashsafe" else ""
            table.add_row(
                str(n), job, str(o.rows), str(o.distinct), str(o.wrong), str(o.missing),
                str(o.batches_created), str(o.items_submitted_twice), str(o.items_billed),
                str(o.items_paid_twice), f"{len(o.kills)}/{options.kills}",
                f"{o.seconds:.1f} s", style=style,
            )  # fmt: skip
    console.print(table)
    naive = [run["naive"] for run in runs]
    console.print(
        f"naive:     {min(o.rows for o in naive)}–{max(o.rows for o in naive)} results "
        f"stored for 200 reviews, up to {max(o.items_submitted_twice for o in naive)} items "
        f"submitted twice and {max(o.items_paid_twice for o in naive)} paid twice",
        highlight=False,
    )
    broken = [(n, run["crashsafe"].problems) for n, run in enumerate(runs, 1)]
    broken = [(n, problems) for n, problems in broken if problems]
    if broken:
        why = "; ".join(f"run {n}: {', '.join(problems)}" for n, problems in broken)
        console.print(f"crashsafe: GUARANTEE BROKEN — {why}", highlight=False)
    elif not tested(options, runs):
        console.print("crashsafe: NOT TESTED — no kill landed mid-job", highlight=False)
    else:
        steps = sorted({k.partition(":")[0] for run in runs for k in run["crashsafe"].kills})
        console.print(
            "crashsafe: holds — every review stored exactly once, 0 wrong, 0 missing, no "
            f"chunk or item submitted twice, no item paid twice; killed at {', '.join(steps)}",
            highlight=False,
        )


def batch_api_json(options: BatchApiKillOptions, runs: Runs) -> dict[str, Any]:
    return {
        "mode": "batch-api",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "options": dataclasses.asdict(options),
        "runs": [{job: dataclasses.asdict(o) for job, o in run.items()} for run in runs],
        "holds": holds(options, runs),
        "tested": tested(options, runs),
    }
