"""status: what a database's crawls hold and do, computed from stored rows.

Compact by default (one block per crawl, fit for an 80-column terminal); ``--wide``
gives the full tables; ``--json`` everything, for machines.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import TYPE_CHECKING, Any

import click

from crashsafe.cli.common import crawl_names
from crashsafe.cli.crawl_cmds import waiting_line
from crashsafe.cli.options import clock_time, db_option, iso_time, open_db
from crashsafe.crawl.passes import figures_line
from crashsafe.store import (
    Control,
    CrawlStats,
    EffectStats,
    PassFigures,
    Waiting,
    WorkerInfo,
    masked,
)
from crashsafe.text import printable

PASSES_SHOWN = 5  # passes listed in the compact view (--json: the last 20)

if TYPE_CHECKING:
    from rich.table import Table


def stats_table(rows: list[CrawlStats]) -> Table:
    from rich.table import Table

    table = Table(title="crawls")
    cols = ["crawl", "pending", "leased", "done", "failed", "records", "lease grants"]
    cols += ["requests", "retries", "repeated", "stale commits refused", "links skipped"]
    cols += ["links cut", "links offsite"]
    cols += ["requests/record"]
    for col in cols:
        table.add_column(col, justify="left" if col == "crawl" else "right")
    for s in rows:
        rpr = f"{s.requests_per_record:.3f}" if s.requests_per_record is not None else "-"
        table.add_row(
            s.crawl,
            *(f"{v:,}" for v in (s.pending, s.leased, s.done, s.failed, s.records)),
            *(f"{v:,}" for v in (s.lease_grants, s.requests, s.retries, s.repeated)),
            *(f"{v:,}" for v in (s.stale, s.links_skipped, s.links_cut, s.links_offsite)),
            rpr,
        )
    return table


def workers_table(workers: list[WorkerInfo]) -> Table:
    from rich.table import Table

    table = Table(title="workers")
    for col in ["crawl", "host", "pid", "started", "alive", "leases held", "pages committed"]:
        table.add_column(col, justify="right" if col in {"pid", "leases held"} else "left")
    for w in workers:
        alive = "yes" if w.alive else "no (dead: its leases come back at the next claim)"
        table.add_row(
            w.crawl, printable(w.host), str(w.pid), iso_time(w.started_at), alive,
            f"{w.leases:,}", f"{w.pages:,}",
        )  # fmt: skip
    return table


def effects_table(rows: list[EffectStats]) -> Table:
    from rich.table import Table

    table = Table(title="passes, versions, files and webhooks")
    cols = ["crawl", "passes", "last pass began", "versions", "changed records"]
    cols += ["changed in last pass", "gone", "files", "events"]
    cols += ["deliveries pending", "delivered", "failed"]
    for col in cols:
        table.add_column(col, justify="left" if col in {"crawl", "last pass began"} else "right")
    for e in rows:
        d = e.deliveries
        began = "-" if e.last_pass_at is None else iso_time(e.last_pass_at)
        table.add_row(
            e.crawl, f"{e.passes:,}", began,
            *(f"{v:,}" for v in (e.versions, e.records_changed, e.changed_last_pass, e.gone)),
            f"{e.files:,} ({e.file_bytes:,} B)", f"{e.events:,}",
            *(f"{v:,}" for v in (d.get("pending", 0) + d.get("leased", 0),
                                  d.get("delivered", 0), d.get("failed", 0))),
        )  # fmt: skip
    return table


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}"


def compact(
    s: CrawlStats,
    e: EffectStats,
    waiting: list[Waiting],
    workers: list[WorkerInfo],
    control: Control | None = None,
    rendered: dict[str, tuple[int, int]] | None = None,
    revisits: dict[str, tuple[int, int]] | None = None,
    passes: list[PassFigures] | None = None,
) -> str:
    """One crawl as a block of short lines (what an 80-column terminal shows whole)."""
    lines = [s.crawl]
    if control is not None and control.paused:
        lines.append(printable(f"  PAUSED    by {control.paused_by} at "
                               f"{clock_time(control.paused_since or 0)}: "
                               "`crashsafe resume` lets its workers lease again"))  # fmt: skip
    for o in control.origins if control is not None else ():
        lines.append(printable(f"  paused    {o.origin} by {o.by} at {clock_time(o.since)}"))
    pages = f"{s.known:,} known: {s.done:,} done, {s.pending:,} pending, {s.leased:,} leased"
    retired = f" ({e.retired:,} retired: gone three visits in a row)" if e.retired else ""
    lines.append(f"  pages     {pages}, {s.failed:,} failed{retired}")
    rpr = "" if s.requests_per_record is None else f", {s.requests_per_record:.2f} per record"
    lines.append(f"  records   {s.records:,} ({e.versions:,} versions, {e.gone:,} gone){rpr}")
    repeats = f"{s.retries:,} retries, {s.repeated:,} repeated after crashes"
    if s.stale:
        repeats += f", {s.stale:,} stale commits refused"
    lines.append(f"  requests  {s.requests:,} ({repeats})")
    links = [
        f"{n:,} {what}"
        for n, what in (
            (s.links_skipped, "malformed or unsupported, skipped"),
            (s.links_cut, "beyond max_links_per_page, not followed"),
            (s.links_offsite, "outside the allow-list, not followed"),
        )
        if n
    ]
    if links:
        lines.append(f"  links     {'; '.join(links)}")
    if e.passes > 1 and e.last_pass_at is not None:
        lines.append(
            f"  passes    {e.passes:,}, the last begun {iso_time(e.last_pass_at)}: "
            f"{e.changed_last_pass:,} changed since"
        )
        if revisits:
            lines.append(f"  revisits  {revisits_line(revisits)}")
        for f in (passes or [])[:PASSES_SHOWN]:  # the last ones ended, the last first
            lines.append(printable(f"    {figures_line(f)} (ended {clock_time(f.finished_at)})"))
    if e.files:
        lines.append(f"  files     {e.files:,} ({e.file_bytes:,} bytes)")
    if rendered:
        fetched = sum(h for h, _ in rendered.values())
        browser = sum(b for _, b in rendered.values())
        lines.append(f"  rendered  auto: {browser:,} pages needed the browser, {fetched:,} did "
                     f"not ({len(rendered):,} URL patterns)")  # fmt: skip
    d = e.deliveries
    if d:
        pending = d.get("pending", 0) + d.get("leased", 0)
        lines.append(
            f"  webhooks  {e.events:,} events: {pending:,} pending, "
            f"{d.get('delivered', 0):,} delivered, {d.get('failed', 0):,} failed"
        )
    for held in waiting:
        if held.pages:
            lines.append(f"  waiting   {waiting_line(held)}")
    mine = [w for w in workers if w.crawl == s.crawl]
    if mine:
        alive = sum(1 for w in mine if w.alive)
        lines.append(f"  workers   {alive} alive, {len(mine) - alive} dead")
        for w in mine:
            state = "alive" if w.alive else "dead (its leases come back at the next claim)"
            lines.append(
                printable(f"    {w.host} pid {w.pid}: {state}, {w.leases:,} leases, "
                          f"{w.pages:,} pages committed")
            )  # fmt: skip
    return "\n".join(lines)


def revisits_line(revisits: dict[str, tuple[int, int]]) -> str:
    """``180 pages fetched: 120 not modified (304), 50 unchanged, 10 parsed; 81,920
    bytes``: the last pass's fetches (crawl/revisits.py)."""
    count = {how: n for how, (n, _) in revisits.items()}
    total = sum(count.values())
    size = sum(b for _, b in revisits.values())
    return (
        f"{total:,} pages fetched in the last pass: {count.get('not-modified', 0):,} not "
        f"modified (304), {count.get('unchanged', 0):,} unchanged, "
        f"{count.get('fetched', 0):,} parsed; {size:,} body bytes"
    )


def as_json(
    s: CrawlStats,
    e: EffectStats,
    waiting: list[Waiting],
    workers: list[WorkerInfo],
    control: Control | None = None,
    rendered: dict[str, tuple[int, int]] | None = None,
    revisits: dict[str, tuple[int, int]] | None = None,
    passes: list[PassFigures] | None = None,
) -> dict[str, Any]:
    item: dict[str, Any] = {k: getattr(s, k) for k in s.__dataclass_fields__}
    if control is not None:
        item["paused"] = (
            None
            if not control.paused
            else {"by": control.paused_by, "since": iso_time(control.paused_since or 0)}
        )
        item["paused_origins"] = [
            {"origin": o.origin, "by": o.by, "since": iso_time(o.since)} for o in control.origins
        ]
    item["effects"] = dataclasses.asdict(e)
    if e.last_pass_at is not None:  # ISO, as every other time in the output
        item["effects"]["last_pass_at"] = iso_time(e.last_pass_at)
    item["known"], item["requests_per_record"] = s.known, s.requests_per_record
    item["last_pass_fetches"] = {
        how: {"pages": n, "bytes": size} for how, (n, size) in (revisits or {}).items()
    }
    item["passes"] = [  # the last 20 that ended, the last first
        {"pass": f.number, **dataclasses.asdict(f), "parsed": f.parsed,
         "started_at": iso_time(f.started_at), "finished_at": iso_time(f.finished_at)}
        for f in passes or ()
    ]  # fmt: skip
    for one in item["passes"]:
        del one["number"]
    item["render_patterns"] = {
        pattern: {"fetched": h, "browser": b} for pattern, (h, b) in (rendered or {}).items()
    }
    item["waiting"] = [
        {**dataclasses.asdict(w), "since": iso_time(w.since),
         "next_try": None if w.next_try is None else iso_time(w.next_try)}
        for w in waiting if w.pages
    ]  # fmt: skip
    item["workers"] = [
        {
            **dataclasses.asdict(w),
            "started_at": iso_time(w.started_at),
            "last_seen": None if w.last_seen is None else iso_time(w.last_seen),
        }
        for w in workers
        if w.crawl == s.crawl
    ]
    return item


@click.command()
@db_option()
@click.option("--crawl", "crawl_name", help="Only this crawl.")
@click.option("--json", "json_out", is_flag=True, help="Machine-readable output.")
@click.option("--wide", is_flag=True, help="Full tables (wider than 80 columns).")
def status(db_url: str, crawl_name: str | None, json_out: bool, wide: bool) -> None:
    """Per crawl: URLs by state, records, requests and repeats; passes, record versions,
    gone records, files and webhook deliveries; what the crawl waits for (origins whose
    robots.txt cannot be reached); and the workers: alive, or dead while still holding
    leases."""
    store = open_db(db_url, readonly=True)
    try:
        names = crawl_names(store, crawl_name)
        rows = [store.stats(name) for name in names]
        effects = [store.effect_stats(name) for name in names]
        waiting = [store.waiting(name) for name in names]
        workers = store.workers(crawl_name)
        controls = [store.control(name) for name in names]
        rendered = [store.render_patterns(name) for name in names]
        revisits = [store.pass_revisits(name) for name in names]
        passes = [store.pass_figures(name) for name in names]
    finally:
        store.close()
    each = list(zip(rows, effects, waiting, controls, rendered, revisits, passes, strict=True))
    if json_out:
        out = [as_json(s, e, w, workers, c, r, v, p) for s, e, w, c, r, v, p in each]
        click.echo(json.dumps(out, indent=2))
    elif not rows:
        click.echo(f"no crawls in {masked(db_url)}")
    elif not wide:
        click.echo("\n\n".join(compact(s, e, w, workers, c, r, v, p)
                                 for s, e, w, c, r, v, p in each))  # fmt: skip
    else:
        # Piped output keeps whole column names instead of the 80-column default.
        from rich.console import Console

        console = Console(width=None if sys.stdout.isatty() else 160)
        console.print(stats_table(rows))
        console.print(effects_table(effects))
        if workers:
            console.print(workers_table(workers))
        for name, ws in zip(names, waiting, strict=True):
            for w in ws:
                if w.pages:
                    console.print(f"{name} waiting: {waiting_line(w)}", markup=False)
