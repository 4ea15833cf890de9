"""crashsafe batch: run, classify, report, demo, llm-server."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from crashsafe import aio
from crashsafe.batch.checkpoint import dead_letter_path
from crashsafe.batch.items import KeyBy, parse_shard, read_items
from crashsafe.batch.progress import BatchProgress
from crashsafe.batch.runner import BatchRunner, BatchSettings, BatchSummary, plural
from crashsafe.batch.task import Task, TaskCaller, load_task
from crashsafe.cli import exits
from crashsafe.cli.llm_options import llm_env, llm_options, pop_llm_options
from crashsafe.cli.options import fmt_seconds, log_options, serve_until_interrupted
from crashsafe.errors import ConfigError

F = TypeVar("F", bound=Callable[..., Any])
INTERRUPTED = "Interrupted: run the same command again to resume."
EXIT_SPEND_CAP = exits.SPEND_CAP


def run_options(f: F) -> F:
    options = [
        click.argument("input_path", metavar="INPUT", type=click.Path(dir_okay=False)),
        click.option("--checkpoint", required=True, type=click.Path(dir_okay=False),
                     help="JSON Lines checkpoint: appended to, never rewritten."),
        click.option("--batch-size", default=10, show_default=True, type=click.IntRange(1)),
        click.option("--concurrency", default=4, show_default=True, type=click.IntRange(1),
                     help="Batches in flight."),
        click.option("--id-field", default="id", show_default=True,
                     help="Field holding the item id; items without one are keyed by text."),
        click.option("--text-field", default="text", show_default=True),
        click.option("--key-by", type=click.Choice(["content", "position"]), default="content",
                     show_default=True, help="position: keep duplicate texts apart."),
        click.option("--shard", metavar="K/N", help="Only this machine's share of the ids."),
        click.option("--max-attempts", default=3, show_default=True, type=click.IntRange(1),
                     help="Tries of a failing batch in this run before the dead letter."),
        click.option("--no-progress", is_flag=True, help="No live progress line."),
        click.option("--grace-seconds", default=30.0, show_default=True,
                     type=click.FloatRange(min=0),
                     help="After Ctrl-C, time for the batches in flight to finish."),
        click.option("--keep-changed", is_flag=True,
                     help="Keep the answers of items whose text changed since they were "
                     "answered (by default they are asked again)."),
        click.option("--accept-changed", is_flag=True,
                     help="Go on with a checkpoint answered with other labels, model, "
                     "prompt or task, keeping its answers."),
    ]  # fmt: skip
    for option in reversed(options):
        f = option(f)
    return log_options(f)


def run_job(
    task: Task,
    *,
    job: dict[str, Any] | None = None,
    whole_rows: bool = False,
    batch_api: Any = None,
    **opts: Any,
) -> None:
    """Read the input, run the job, print the summary and exit with its status. With
    ``batch_api`` (BatchApiOptions), ``task`` (a Classifier) goes through the provider's
    Batch API."""
    shard = parse_shard(opts["shard"])
    key_by: KeyBy = opts["key_by"]
    inputs = read_items(
        Path(opts["input_path"]),
        id_field=opts["id_field"] or None,
        text_field=opts["text_field"],
        key_by=key_by,
        shard=shard,
    )
    if shard:
        click.echo(
            f"shard {shard[0]}/{shard[1]}: {len(inputs.items)} items "
            f"({inputs.skipped_by_shard} belong to other shards)",
            err=True,
        )
    elif not inputs.items:
        click.echo(f"{opts['input_path']} holds no items: nothing to do.", err=True)
        return
    settings = BatchSettings(
        batch_size=opts["batch_size"],
        concurrency=opts["concurrency"],
        max_attempts=opts["max_attempts"],
        price_in=opts.get("price_in") or 0.0,
        price_out=opts.get("price_out") or 0.0,
        max_spend=opts.get("max_spend"),
        max_spend_total=opts.get("max_spend_total"),
        keep_changed=opts.get("keep_changed", False),
        accept_changed=opts.get("accept_changed", False),
        backoff_base=opts.get("backoff_base", 1.0),
        stop_after=opts.get("stop_after"),
        grace_seconds=opts.get("grace_seconds", 30.0),
    )
    checkpoint = Path(opts["checkpoint"])
    if batch_api is None:
        refuse_while_at_provider(checkpoint)
    echo = lambda line: click.echo(line, err=True)  # noqa: E731
    runner: BatchRunner
    if batch_api is not None:
        from crashsafe.batch.batchapi.runner import BatchApiRunner

        runner = BatchApiRunner(
            task, inputs, checkpoint, settings, batch_api, echo=echo,  # type: ignore[arg-type]
            handle_signals=opts.get("handle_signals", True), whole_rows=whole_rows,
        )  # fmt: skip
        settings = runner.settings  # at batch prices
    else:
        runner = BatchRunner(
            TaskCaller(task, threads=settings.concurrency),
            inputs,
            checkpoint,
            settings,
            echo=echo,
            handle_signals=opts.get("handle_signals", True),
            job=job,
            whole_rows=whole_rows,
        )
    if not opts.get("no_progress") and sys.stderr.isatty():
        priced = bool(settings.price_in or settings.price_out)
        runner.progress = BatchProgress(runner.summary, priced=priced)
    summary = aio.run(runner.run())
    finish(summary, checkpoint, settings, exit_on_end=opts.get("exit_on_end", True))


def refuse_while_at_provider(checkpoint: Path) -> None:
    """A synchronous run must not ask again what chunks of a Batch API run still hold."""
    from crashsafe.batch.batchapi.ledger import Ledger, ledger_path, refuse_hard_links

    refuse_hard_links(checkpoint)  # (a Batch API run through another name: its ledger)
    path = ledger_path(checkpoint)
    if not path.exists():
        return
    ledger = Ledger(path)
    ledger.open()
    try:
        running = [c for c in ledger.chunks.values() if c.ended is None]
    finally:
        ledger.close()
    if running:
        items = sum(len(c.ids) for c in running)
        raise ConfigError(
            f"{plural(len(running), 'chunk')} of {plural(items, 'item')} still at the "
            f"provider ({path}): run with --via batch-api (or auto) to collect them first; "
            "asked synchronously now they would be paid twice"
        )


def finish(
    summary: BatchSummary, checkpoint: Path, settings: BatchSettings, *, exit_on_end: bool
) -> int:
    usage = summary.usage
    tokens = ""
    if usage.get("prompt_tokens") or usage.get("completion_tokens"):
        tokens = (
            f"; tokens in {usage.get('prompt_tokens', 0):,}, "
            f"out {usage.get('completion_tokens', 0):,}"
        )
        if settings.price_in or settings.price_out:
            tokens += f", spent {summary.spent:.4f}"
    done = (
        f"{plural(summary.items_ok, 'item')} in {plural(summary.batches_ok, 'batch', 'batches')}"
        f", {plural(summary.batches_failed, 'batch', 'batches')} failed"
    )
    click.echo(f"done in {fmt_seconds(summary.elapsed)}: {done}{tokens}", err=True)
    code = 0
    if summary.interrupted:
        click.echo(INTERRUPTED, err=True)
        code = 130
    elif summary.batches_failed:
        click.echo(
            f"{summary.batches_failed} batch(es) failed and were not marked done: see "
            f"{dead_letter_path(checkpoint)}; run the same command again to retry them.",
            err=True,
        )
        code = exits.FAILED
    elif summary.stopped_by == "spend cap":
        total = settings.max_spend_total
        if total is not None and (
            settings.max_spend is None or total - summary.spent_before < settings.max_spend
        ):
            cap = (
                f"total spend cap {total} reached ({summary.spent_before:.4f} spent by earlier "
                "runs); raise --max-spend-total"
            )
        else:
            cap = f"spend cap {settings.max_spend} reached; raise --max-spend"
        click.echo(f"stopped: {cap} and run the same command again to continue.", err=True)
        code = EXIT_SPEND_CAP
    if exit_on_end and code == 130:
        # Interrupted: calls abandoned at the end of the grace period may still run on
        # task threads, and the interpreter would wait for them at exit. Nothing of them
        # can be written any more (the checkpoint is closed): leave now.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    if exit_on_end and code:
        sys.exit(code)
    return code


@click.group()
def batch() -> None:
    """Resumable batch jobs over a fixed input, with a JSON Lines checkpoint."""


@batch.command("run")
@run_options
@llm_options
@click.option(
    "--task",
    "task_target",
    required=True,
    metavar="MODULE:NAME",
    help="module:function or path/file.py:function (gets a list of items), or a "
    "crashsafe.batch.PromptTask class (an LLM task: takes the LLM options).",
)
def run_cmd(task_target: str, **opts: Any) -> None:
    """Run TASK over INPUT (JSONL, CSV or text lines), batch by batch, resumably.

    Kill it at any moment and run the same command again: finished batches are skipped,
    so nothing is paid twice except the batches that were in flight. A task that is a
    crashsafe.batch.PromptTask class asks an LLM (--base-url, --model), and can go
    through a provider's Batch API (--via batch-api).
    """
    from crashsafe.batch.llm import PromptTask

    llm = pop_llm_options(opts)
    target = load_task(task_target)
    if isinstance(target, type) and issubclass(target, PromptTask):
        url, chosen, key = llm_env(llm.base_url, llm.model)
        try:
            task = target(base_url=url, model=chosen, api_key=key)
            job = task.job()
            json.dumps(job)
        except Exception as exc:
            raise ConfigError(
                f"--task {task_target}: the task cannot be made ({type(exc).__name__}: {exc}); "
                "a PromptTask takes the endpoint's keyword arguments (base_url, model, "
                "api_key) on to PromptTask.__init__, and defines name, system_prompt() and "
                "answers() (docs/batch.md, Your own task)"
            ) from None
        batch_api = llm.batch_api(url, key)
        run_job(task, job=job, whole_rows=True, batch_api=batch_api, **opts)
        return
    given = [name for name, used in llm.given().items() if used]
    if given:
        what = "a class" if isinstance(target, type) else "a Python function"
        raise ConfigError(
            f"{', '.join(given)}: for an LLM task; {task_target} is {what}, not a "
            "crashsafe.batch.PromptTask, and no provider can run code: make it a PromptTask "
            "(docs/batch.md, Your own task)"
        )
    where, _, name = task_target.rpartition(":")
    # A file's task by its file name: the same task run from another folder is the same.
    named = f"{Path(where).name}:{name}" if where.endswith(".py") else task_target
    run_job(target, job={"task": named}, whole_rows=True, **opts)


@batch.command("classify")
@run_options
@click.option("--labels", required=True, help="Comma-separated labels, e.g. positive,negative.")
@llm_options
def classify_cmd(labels: str, **opts: Any) -> None:
    """Classify INPUT with an LLM into --labels; the API key comes from OPENAI_API_KEY.

    Invalid answers are re-asked, 429/5xx retried with one cooldown shared by all batches
    in flight, and the tokens of every attempt are counted. With --via batch-api the
    requests go through the provider's Batch API (docs/batch.md).
    """
    from crashsafe.batch.llm import Classifier

    names = [name.strip() for name in labels.split(",") if name.strip()]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"--labels: {', '.join(twice)} given twice; give each label once")
    if len(names) < 2:
        raise ConfigError("--labels: give at least two labels, e.g. positive,negative")
    llm = pop_llm_options(opts)
    url, chosen, key = llm_env(llm.base_url, llm.model)
    classifier = Classifier(labels=names, base_url=url, model=chosen, api_key=key)
    run_job(classifier, job=classifier.job(), batch_api=llm.batch_api(url, key), **opts)


@batch.command("report")
@click.argument("checkpoints", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "csv", "jsonl"]),
    help="Default: table; with --input, jsonl. Without --input, json gives the summary "
    "and the rows, jsonl and csv the rows (an id and its answer each).",
)
@click.option(
    "--price-in",
    type=float,
    default=0.0,
    help="Price per 1M prompt tokens, for lines that recorded no cost.",
)
@click.option("--price-out", type=float, default=0.0, help="The same, per 1M completion tokens.")
@click.option(
    "--input",
    "input_path",
    type=click.Path(dir_okay=False, exists=True),
    help="The job's input: write each of its rows with its answer's fields added.",
)
@click.option("--id-field", default="id", show_default=True, help="As the run's (with --input).")
@click.option("--text-field", default="text", show_default=True, help="As the run's.")
@click.option(
    "--key-by", type=click.Choice(["content", "position"]), default="content", show_default=True
)
def report_cmd(
    checkpoints: tuple[str, ...],
    fmt: str | None,
    price_in: float,
    price_out: float,
    input_path: str | None,
    id_field: str,
    text_field: str,
    key_by: KeyBy,
) -> None:
    """One row per id from one or more checkpoints (shards merge), aggregates recomputed;
    with --input, the input's rows joined to their answers."""
    from crashsafe.batch.report import build_report, joined, write_csv, write_json, write_jsonl

    report = build_report([Path(p) for p in checkpoints], price_in=price_in, price_out=price_out)
    if input_path is not None:
        from crashsafe.batch.items import every_item
        from crashsafe.exports import write_rows

        def items() -> Any:
            path = Path(input_path)
            return every_item(path, id_field=id_field or None, text_field=text_field, key_by=key_by)

        if fmt == "table":
            raise ConfigError("--input writes rows: choose --format jsonl, json or csv")
        written = write_rows(lambda: joined(report, items()), sys.stdout, fmt or "jsonl")
        waiting = sum(1 for item in items() if item.id not in report.rows)
        left = f", {plural(waiting, 'row')} without an answer yet" if waiting else ""
        click.echo(f"wrote {plural(written.rows, 'input row')}{left}", err=True)
        return
    if fmt == "json":
        write_json(report, sys.stdout)
    elif fmt == "csv":
        write_csv(report, sys.stdout)
    elif fmt == "jsonl":
        write_jsonl(report, sys.stdout)
    else:
        print_report(report)


def print_report(report: Any) -> None:
    s = report.summary()
    console = Console(width=None if sys.stdout.isatty() else 120)
    table = Table(title="batch report", show_header=False)
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row("items (one row per id)", f"{s['items']:,}")
    table.add_row("batches written", f"{s['batches']:,}")
    table.add_row("ids written twice (folded)", f"{s['duplicates_folded']:,}")
    if s["corrupt_lines"]:
        table.add_row("corrupt lines skipped", str(s["corrupt_lines"]))
    if s["failed_not_done"]:
        table.add_row("failed, not yet done", str(s["failed_not_done"]))
    for key, value in s["usage"].items():
        table.add_row(key.replace("_", " "), f"{value:,}")
    if s["cost"] is not None:
        what = "cost (as recorded)" if s["cost_recorded"] else "estimated cost"
        table.add_row(what, f"{s['cost']:.4f}")
        if s["items_batch_api"]:
            table.add_row(
                f"  of which at batch prices ({s['items_batch_api']:,} items)",
                f"{s['cost_batch_api']:.4f}",
            )
    for label, count in s["labels"].items():
        table.add_row(f"label {label}", f"{count:,}")
    console.print(table)


@batch.command("llm-server")
@click.option("--port", default=8800, show_default=True, type=click.IntRange(0, 65535))
@click.option("--latency-ms", default=0.0, type=click.FloatRange(0), show_default=True)
@click.option(
    "--rate-limit-every",
    default=0,
    type=click.IntRange(0),
    help="Answer every Nth request with 429 + Retry-After.",
)
@click.option("--retry-after", default=0.2, type=click.FloatRange(0), show_default=True)
@click.option(
    "--invalid-every",
    default=0,
    type=click.IntRange(0),
    help="Answer every Nth request with broken JSON.",
)
@click.option(
    "--error-every", default=0, type=click.IntRange(0), help="Answer every Nth request with 500."
)
@click.option("--batch-seconds", default=5.0, type=click.FloatRange(0), show_default=True,
              help="Batches API: a batch's time from creation to completion.")  # fmt: skip
@click.option("--expire-every", default=0, type=click.IntRange(0),
              help="Batches API: every Nth batch expires, half answered.")  # fmt: skip
@click.option("--line-error-every", default=0, type=click.IntRange(0),
              help="Batches API: every Nth request of a batch answers 500.")  # fmt: skip
def llm_server_cmd(port: int, **options: Any) -> None:
    """Serve a local OpenAI-compatible endpoint with deterministic labels until Ctrl-C:
    chat completions, and the Files and Batches endpoints (--via batch-api)."""
    from crashsafe.batch.testserver import LLMServer, LLMServerOptions

    serve_until_interrupted(
        LLMServer(LLMServerOptions(**options)).app(),
        port,
        announce=lambda bound: (
            f"LLM test server: --base-url http://127.0.0.1:{bound}/v1 "
            "(stats at /stats). Ctrl-C stops it."
        ),
        name="LLM test server",
    )


@batch.command("demo")
@click.option(
    "--dir",
    "folder",
    default="crashsafe-batch-demo",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Where the sample and checkpoint go.",
)
def demo_cmd(folder: str) -> None:
    """Classify 200 bundled reviews against a local LLM stand-in, with a crash and a resume.

    No network: the endpoint is crashsafe's own test server on 127.0.0.1.
    """
    from crashsafe.batch.llm import Classifier
    from crashsafe.batch.testserver import LLMServerOptions, LLMServerThread

    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    sample = root / "reviews.jsonl"
    shutil.copyfile(
        str(files("crashsafe.batch").joinpath("data").joinpath("reviews.jsonl")), sample
    )
    checkpoint = root / "results.jsonl"
    for stale in (checkpoint, dead_letter_path(checkpoint)):
        stale.unlink(missing_ok=True)
    labels = ["positive", "negative", "neutral"]
    options = LLMServerOptions(latency_ms=30, rate_limit_every=9, retry_after=0.3)
    with LLMServerThread(options) as server:
        common: dict[str, Any] = {
            "input_path": str(sample), "checkpoint": str(checkpoint), "batch_size": 10,
            "concurrency": 4, "id_field": "id", "text_field": "text", "key_by": "content",
            "shard": None, "max_attempts": 3, "price_in": 0.15, "price_out": 0.60,
            "handle_signals": True, "exit_on_end": False,
        }  # fmt: skip

        def classifier() -> Classifier:
            return Classifier(labels=labels, base_url=server.base_url, model="test",
                              api_key="local", backoff_base=0.1)  # fmt: skip

        click.echo(f"1) classifying {sample} (200 reviews) — we stop it half-way, as if it "
                   "had been killed", err=True)  # fmt: skip
        run_job(classifier(), stop_after=10, **common)
        click.echo("\n2) the same command again: it resumes and pays only for what is left",
                   err=True)  # fmt: skip
        run_job(classifier(), **common)
        stats = server.server.snapshot()
    from crashsafe.batch.report import build_report

    click.echo("\n3) crashsafe batch report " + str(checkpoint), err=True)
    print_report(build_report([checkpoint], price_in=0.15, price_out=0.60))
    click.echo(
        f"the endpoint was called {stats['requests']} times (429s included) and billed "
        f"{stats['items_billed']} items for 200 reviews: {stats['items_paid_twice']} paid twice"
    )
