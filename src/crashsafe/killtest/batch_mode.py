"""``crashsafe killtest --mode batch``: SIGKILL an LLM classification job again and again.

The local LLM server runs as its own process and counts every item it bills. A naive job
(same calls and concurrency, but no checkpoint: it starts from the first item each time
and appends results) and ``crashsafe batch classify`` are killed at the same seeded
moments, restarted, then allowed to finish; then we count items stored, items stored
twice, wrong labels, items paid twice and tokens.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

from crashsafe.batch.checkpoint import iter_rows
from crashsafe.batch.items import read_items
from crashsafe.batch.testserver import label_for
from crashsafe.demo.process import ServiceProcess
from crashsafe.errors import CrashsafeError
from crashsafe.killtest.runner import request_schedule, stop_process

LABELS = ["positive", "negative", "neutral"]
BATCH_SIZE = 10
CALLS = 20  # an uninterrupted job's calls: 200 reviews, BATCH_SIZE per call
SPREAD = 3.0  # kills span SPREAD x 0.6 uninterrupted jobs (0.6: mean of the default window)


class LLMServerProcess(ServiceProcess):
    name = "LLM test server"

    def __init__(self, latency_ms: float = 0.0, *extra: str) -> None:
        super().__init__(["batch", "llm-server", "--latency-ms", str(latency_ms), *extra])
        self.base_url = f"{self.url}/v1"


@dataclass(frozen=True, slots=True)
class BatchKillOptions:
    runs: int = 5
    kills: int = 10
    kill_window: tuple[float, float] = (0.2, 1.0)
    seed: int = 0
    concurrency: int = 4
    latency_ms: float = 300.0
    sig: signal.Signals = signal.SIGKILL


@dataclass(slots=True)
class BatchOutcome:
    job: str
    rows: int = 0  # results stored (lines for naive, ids written for crashsafe)
    distinct: int = 0
    wrong: int = 0
    missing: int = 0
    calls: int = 0
    items_billed: int = 0
    paid_twice: int = 0
    tokens: int = 0
    kills_landed: int = 0
    seconds: float = 0.0
    final_exit: int = 0
    problems: list[str] = field(default_factory=list)


def sample_path() -> Path:
    return Path(str(files("crashsafe.batch").joinpath("data").joinpath("reviews.jsonl")))


def _commands(job: str, workdir: Path, base_url: str, concurrency: int) -> list[str]:
    if job == "naive":
        return [
            sys.executable, "-m", "crashsafe.demo.naive_batch", str(sample_path()),
            str(workdir / "naive.jsonl"), base_url, ",".join(LABELS), str(concurrency),
        ]  # fmt: skip
    return [
        sys.executable, "-m", "crashsafe", "batch", "classify", str(sample_path()),
        "--checkpoint", str(workdir / "results.jsonl"), "--labels", ",".join(LABELS),
        "--base-url", base_url, "--concurrency", str(concurrency),
        "--batch-size", str(BATCH_SIZE),
    ]  # fmt: skip


def _stored(job: str, workdir: Path) -> list[tuple[str, str]]:
    """Every (id, label) the job wrote, each occurrence counted."""
    if job == "crashsafe":
        return [
            (item_id, result.get("label", "") if isinstance(result, dict) else "")
            for item_id, result, _ in iter_rows([workdir / "results.jsonl"])
        ]
    path = workdir / "naive.jsonl"
    rows = []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
                rows.append((str(entry["id"]), str(entry["label"])))
            except (ValueError, KeyError, TypeError):
                continue  # a line torn by a kill
    return rows


def _wait_calls(server: LLMServerProcess, proc: subprocess.Popen[bytes], target: int) -> bool:
    """Wait until the server has seen ``target`` calls in all; False if the job ended
    first (or made no call in 60 s)."""
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        if server.stats()["requests"] >= target:
            return True
        time.sleep(0.01)
    return False


def run_job(
    job: str,
    server: LLMServerProcess,
    workdir: Path,
    kill_after: list[int],
    options: BatchKillOptions,
) -> BatchOutcome:
    """Run ``job`` killed after ``kill_after[k]`` of its own calls in its k-th start (a
    call in flight then: the server takes ``latency_ms`` to answer), then to the end."""
    workdir.mkdir(parents=True, exist_ok=True)
    server.reset()
    cmd = _commands(job, workdir, server.base_url, options.concurrency)
    outcome = BatchOutcome(job)
    started = time.monotonic()
    for calls in kill_after:
        before = server.stats()["requests"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not _wait_calls(server, proc, before + calls):
            proc.kill()  # it finished first (or hung): the remaining kills are moot
            proc.wait()
            break
        stop_process(proc, options.sig)
        outcome.kills_landed += 1
    final = subprocess.run(cmd, capture_output=True, timeout=900)
    outcome.final_exit = final.returncode
    outcome.seconds = time.monotonic() - started
    texts = {item.id: item.text for item in read_items(sample_path()).items}
    rows = _stored(job, workdir)
    counts = Counter(i for i, _ in rows if i in texts)
    outcome.rows = len(rows)
    outcome.distinct = len(counts)
    outcome.missing = len(texts) - len(counts)
    outcome.wrong = sum(
        1 for i, label in rows if i not in texts or label != label_for(texts[i], LABELS)
    )
    stats = server.stats()
    outcome.calls = stats["statuses"].get("200", 0)
    outcome.items_billed = stats["items_billed"]
    outcome.paid_twice = stats["items_paid_twice"]
    outcome.tokens = sum(stats["tokens"].values())
    if job == "crashsafe":
        bound = options.concurrency * BATCH_SIZE * outcome.kills_landed
        checks = [
            (
                outcome.rows != outcome.distinct,
                f"{outcome.rows - outcome.distinct} items stored twice",
            ),
            (outcome.missing > 0, f"{outcome.missing} items missing"),
            (outcome.wrong > 0, f"{outcome.wrong} wrong labels"),
            (outcome.paid_twice > bound, f"{outcome.paid_twice} items paid twice > bound {bound}"),
            (outcome.final_exit != 0, f"final run exited {outcome.final_exit}"),
        ]
        outcome.problems = [message for failed, message in checks if failed]
    return outcome


def calibrate(server: LLMServerProcess, workdir: Path, options: BatchKillOptions) -> float:
    """Seconds from the first call to the end of one uninterrupted crashsafe run."""
    workdir.mkdir(parents=True, exist_ok=True)
    server.reset()
    proc = subprocess.Popen(
        _commands("crashsafe", workdir, server.base_url, options.concurrency),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    if not _wait_calls(server, proc, 1):
        raise CrashsafeError("calibration: the batch job made no call")
    first = time.monotonic()
    _, err = proc.communicate(timeout=900)
    if proc.returncode != 0:
        raise CrashsafeError(f"calibration run failed: {err.decode()[-2000:]}")
    return max(time.monotonic() - first, 0.05)


def run_batch_killtest(
    options: BatchKillOptions,
    *,
    workdir: Path | None = None,
    on_progress: Callable[[str], None] = lambda _msg: None,
) -> tuple[float, list[dict[str, BatchOutcome]]]:
    runs: list[dict[str, BatchOutcome]] = []
    with tempfile.TemporaryDirectory(prefix="crashsafe-killtest-batch-") as tmp:
        root = workdir or Path(tmp)
        with LLMServerProcess(options.latency_ms) as server:
            crawl = calibrate(server, root / "calibration", options)
            on_progress(f"calibration: crashsafe classifies 200 reviews in {crawl:.2f} s")
            # Kills follow the job's own calls, not seconds (timed kills found the job
            # done on a busy machine, and proved nothing): the k-th start is killed after a
            # seeded number of its calls, a call then in flight. A kill loses the calls in
            # flight, so kills are spread over SPREAD uninterrupted jobs' worth of calls;
            # the last ones may find the job done (the table counts those that landed).
            for run in range(options.runs):
                [kill_after] = request_schedule(
                    kills=options.kills,
                    workers=1,
                    window=options.kill_window,
                    pages=round(SPREAD * CALLS),
                    seed=options.seed * 1000 + run,
                )
                outcomes = {}
                for job in ("naive", "crashsafe"):
                    out = run_job(job, server, root / f"run{run + 1}-{job}", kill_after, options)
                    outcomes[job] = out
                    on_progress(
                        f"run {run + 1}/{options.runs} {job}: {out.rows} stored, "
                        f"{out.paid_twice} items paid twice, {out.kills_landed} kills landed"
                    )
                runs.append(outcomes)
    return crawl, runs
