"""What a user sees when the LLM endpoint misbehaves (#11 item 2): a visible line for each
kind of retry, and an endpoint that cannot be found stops the job at once."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path

import pytest
from aiohttp import web

from crashsafe.batch.items import Item
from crashsafe.batch.llm import Classifier
from crashsafe.batch.testserver import LLMServer
from crashsafe.demo.server import AppThread
from tests.helpers import CLI, cli_env

LABELS = "positive,negative,neutral"


def reviews(tmp_path: Path, n: int = 20) -> Path:
    src = tmp_path / "reviews.jsonl"
    src.write_text("".join(json.dumps({"text": f"review {k}: great"}) + "\n" for k in range(n)))
    return src


def classify(tmp_path: Path, base_url: str, *prefix: str) -> subprocess.CompletedProcess[str]:
    args = ["batch", "classify", str(reviews(tmp_path)), "--labels", LABELS,
            "--checkpoint", str(tmp_path / "out.jsonl"), "--base-url", base_url]  # fmt: skip
    return subprocess.run(
        [*prefix, *CLI, *args], capture_output=True, text=True, timeout=60, env=cli_env()
    )


def failing_first(server: LLMServer, status: int) -> None:
    """Make the first request to ``server`` answer ``status``, the others as usual."""
    answer = server.completions
    calls = 0

    async def completions(request: web.Request) -> web.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            return web.json_response({"error": {"message": "busy"}}, status=status)
        return await answer(request)

    server.completions = completions  # type: ignore[method-assign]


def test_a_5xx_then_a_200_shows_a_retrying_line(tmp_path: Path) -> None:
    server = LLMServer()
    failing_first(server, 503)
    with AppThread(server.app()) as thread:
        result = classify(tmp_path, f"{thread.url}/v1")
    assert result.returncode == 0, result.stderr
    retrying = [line for line in result.stderr.splitlines() if "retrying" in line]
    assert retrying, result.stderr
    assert f"{thread.url}/v1 answered HTTP 503; retrying in" in retrying[0]
    assert "20 items in 2 batches, 0 batches failed" in result.stderr


def test_a_call_that_times_out_shows_a_retrying_line(capsys: pytest.CaptureFixture[str]) -> None:
    server = LLMServer()
    answer = server.completions
    calls = 0
    retried = asyncio.Event()

    async def completions(request: web.Request) -> web.Response:
        nonlocal calls
        calls += 1
        if calls == 1:  # no answer until the client has given up on this call and retried
            await asyncio.wait_for(retried.wait(), 30)
        retried.set()
        return await answer(request)

    server.completions = completions  # type: ignore[method-assign]
    with AppThread(server.app()) as thread:
        task = Classifier(labels=LABELS.split(","), base_url=f"{thread.url}/v1", model="t",
                          api_key="k", backoff_base=0.01, timeout=1.0)  # fmt: skip

        async def once() -> list[object]:
            try:
                return list((await task([Item("a", "great")])).results)
            finally:
                await task.aclose()

        assert asyncio.run(once()) == [{"label": "positive"}]
    assert f"{thread.url}/v1 did not answer in time; retrying" in capsys.readouterr().err


@pytest.fixture
def no_network() -> list[str]:
    """A command prefix that runs a process in a network namespace of its own: no
    interface but a loopback that is down, so a name lookup fails at once, on this machine,
    and nothing goes out (``.invalid`` never resolves, but a resolver would still be asked)."""
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"a network namespace needs root: {probe.stderr.decode().strip()}")
    return ["unshare", "--net"]


def test_an_endpoint_whose_host_does_not_resolve_stops_the_job_at_once(
    tmp_path: Path, no_network: list[str]
) -> None:
    url = "http://no-such-host.invalid/v1"
    started = time.monotonic()
    result = classify(tmp_path, url, *no_network)
    assert time.monotonic() - started < 30  # not minutes of silent retries
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "retrying" not in result.stderr
    [error] = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert f"cannot reach {url}" in error and "name resolution" in error, error
    assert "check --base-url" in error
    assert (tmp_path / "out.jsonl").read_text() == ""  # nothing done, nothing paid
