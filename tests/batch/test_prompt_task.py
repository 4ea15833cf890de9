"""An LLM task of one's own (a PromptTask, examples/llm_task.py) through `batch run`,
synchronously and through both providers' Batch APIs (#26: "the same for any task")."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from crashsafe.batch.checkpoint import scan
from crashsafe.batch.testserver import LLMServerOptions, LLMServerThread
from tests.batch.test_batch_api import answers
from tests.helpers import CLI, cli_env

ROOT = Path(__file__).resolve().parents[2]

TASK = f"{ROOT / 'examples' / 'llm_task.py'}:Urgency"
MESSAGES = ["my card was charged twice", "how do I change my avatar", "the site is down"]


def messages(tmp_path: Path, n: int = 23) -> Path:
    path = tmp_path / "messages.jsonl"
    path.write_text("".join(json.dumps({"id": f"m{i}", "text": f"{MESSAGES[i % 3]} (#{i})"})
                            + "\n" for i in range(n)))  # fmt: skip
    return path


def run(server: LLMServerThread, src: Path, cp: Path, *extra: str,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    cmd = [*CLI, "batch", "run", str(src), "--task", TASK, "--checkpoint", str(cp),
           "--base-url", server.base_url, "--model", "test", "--batch-size", "5",
           "--no-progress", "--price-in", "1", "--price-out", "2", *extra]  # fmt: skip
    environ = {**cli_env(), "OPENAI_API_KEY": "", **(env or {})}
    return subprocess.run(cmd, env=environ, text=True, capture_output=True, timeout=120)


VIA = ["--via", "batch-api", "--poll-seconds", "0.05", "--chunk-requests", "2"]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_task_of_ones_own_goes_through_the_batch_api(provider: str, tmp_path: Path) -> None:
    src = messages(tmp_path)
    with LLMServerThread(LLMServerOptions(batch_seconds=0.2)) as server:
        sync = run(server, src, tmp_path / "sync.jsonl")
        killed = run(server, src, tmp_path / "api.jsonl", *VIA, "--provider", provider,
                     env={"CRASHSAFE_KILL_AT": "polled"})  # fmt: skip
        via = run(server, src, tmp_path / "api.jsonl", *VIA, "--provider", provider)
        stats = server.server.snapshot()
    assert sync.returncode == 0, sync.stderr
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert via.returncode == 0, via.stderr
    got = answers(tmp_path / "api.jsonl")
    assert got == answers(tmp_path / "sync.jsonl") and len(got) == 23
    assert {r["urgency"] for r in got.values()} <= {"urgent", "normal", "later"}
    assert all(r["level"] in (1, 2, 3) for r in got.values())
    assert stats["items_submitted_twice"] == 0 and stats["items_paid_twice"] == 23  # sync+api
    [job] = scan(tmp_path / "api.jsonl").jobs
    assert job["task"] == "urgency" and job["model"] == "test" and "prompt" in job


def test_a_python_function_cannot_be_sent_to_a_batch_api(tmp_path: Path) -> None:
    src = messages(tmp_path, n=3)
    with LLMServerThread() as server:
        cmd = [*CLI, "batch", "run", str(src), "--task",
               f"{ROOT / 'examples' / 'word_count.py'}:count_words", "--checkpoint",
               str(tmp_path / "out.jsonl"), "--via", "batch-api",
               "--base-url", server.base_url]  # fmt: skip
        refused = subprocess.run(cmd, env=cli_env(), text=True, capture_output=True, timeout=60)
    assert refused.returncode != 0
    assert "--base-url, --via: for an LLM task" in refused.stderr
    assert "PromptTask" in refused.stderr and "Traceback" not in refused.stderr


BAD_TASKS = """
import json
from crashsafe.batch import PromptTask
from examples_llm_task import Urgency

class WrongCount(Urgency):
    def answers(self, text, items):
        return super().answers(text, items)[:-1]

class Raises(Urgency):
    def answers(self, text, items):
        return [json.loads(text)["no such key"]]

class NotJson(Urgency):
    def answers(self, text, items):
        return [object() for _ in items]

class NoSystemPrompt(PromptTask):
    name = "nothing"
"""


def bad_tasks(tmp_path: Path) -> Path:
    (tmp_path / "examples_llm_task.py").write_text((ROOT / "examples" / "llm_task.py").read_text())
    path = tmp_path / "bad.py"
    path.write_text(BAD_TASKS)
    return path


@pytest.mark.parametrize("via", [[], VIA])
@pytest.mark.parametrize("name", ["WrongCount", "Raises", "NotJson"])
def test_a_task_whose_answers_are_wrong_fails_its_requests_not_the_run(
    name: str, via: list[str], tmp_path: Path
) -> None:
    src, cp, tasks = messages(tmp_path, n=10), tmp_path / "out.jsonl", bad_tasks(tmp_path)
    env = {"PYTHONPATH": str(tmp_path)}
    with LLMServerThread(LLMServerOptions(batch_seconds=0.1)) as server:
        cmd = [*CLI, "batch", "run", str(src), "--task", f"{tasks}:{name}", "--checkpoint",
               str(cp), "--base-url", server.base_url, "--model", "test", "--batch-size", "5",
               "--no-progress", "--price-in", "1", "--price-out", "2", "--max-attempts", "1",
               *via]  # fmt: skip
        first = subprocess.run(cmd, env={**cli_env(), "OPENAI_API_KEY": "", **env}, text=True,
                               capture_output=True, timeout=120)  # fmt: skip
        again = subprocess.run(cmd, env={**cli_env(), "OPENAI_API_KEY": "", **env}, text=True,
                               capture_output=True, timeout=120)  # fmt: skip
    for run in (first, again):
        assert run.returncode == 4, run.stderr  # the dead letter's exit status
        assert "Traceback" not in run.stderr
    found = scan(cp)
    assert found.corrupt == 0 and not found.lines  # nothing half-written, nothing stored
    dead = [json.loads(line) for line in (tmp_path / "out.failed.jsonl").read_text().splitlines()]
    assert dead and all(line["cost"] > 0 for line in dead)  # what they cost is counted


def test_a_task_that_cannot_be_made_says_so_in_one_line(tmp_path: Path) -> None:
    src, tasks = messages(tmp_path, n=3), bad_tasks(tmp_path)
    with LLMServerThread() as server:
        cmd = [*CLI, "batch", "run", str(src), "--task", f"{tasks}:NoSystemPrompt",
               "--checkpoint", str(tmp_path / "out.jsonl"),
               "--base-url", server.base_url]  # fmt: skip
        refused = subprocess.run(cmd, env={**cli_env(), "PYTHONPATH": str(tmp_path)},
                                 text=True, capture_output=True, timeout=60)  # fmt: skip
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "the task cannot be made" in refused.stderr and "system_prompt" in refused.stderr


def test_a_synchronous_run_waits_for_the_chunks_still_at_the_provider(tmp_path: Path) -> None:
    src, cp = messages(tmp_path), tmp_path / "out.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=0.2)) as server:
        killed = run(server, src, cp, *VIA, env={"CRASHSAFE_KILL_AT": "polled"})
        assert killed.returncode == -signal.SIGKILL
        sync = run(server, src, cp)
        collected = run(server, src, cp, *VIA)
        stats = server.server.snapshot()
    assert sync.returncode != 0 and "still at the provider" in sync.stderr
    assert collected.returncode == 0, collected.stderr
    assert len(answers(cp)) == 23 and stats["items_paid_twice"] == 0
