"""OpenTelemetry (#27 item 4): a span per page, with fetch, parse and commit inside it, and
a span per batch call; none unless the OTEL_* environment asks for them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from crashsafe import tracing
from crashsafe.crawl.engine import Crawler
from crashsafe.demo.shop import ShopThread
from crashsafe.demo.spider import DemoShop
from crashsafe.errors import ConfigError
from crashsafe.store import open_store
from tests.helpers import cli_env

pytest.importorskip("opentelemetry.sdk", reason="the otel extra: pip install -e '.[dev]'")
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)


def test_a_span_per_page_with_fetch_parse_and_commit_inside(
    shop: Callable[..., ShopThread], tmp_path: Path
) -> None:
    site = shop(listings=2, per_listing=5)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    store = open_store(f"sqlite:///{tmp_path / 'traced.db'}")
    try:
        crawler = Crawler(
            DemoShop(), store, start_urls=[f"{site.url}/list/0"], store_process=False,
            handle_signals=False, tracer=provider.get_tracer("test"),
        )  # fmt: skip
        result = asyncio.run(crawler.run())
    finally:
        store.close()
    spans = exporter.get_finished_spans()
    pages = [s for s in spans if s.name == "crawl.page"]
    assert len(pages) == result.stats.done == 12
    by_parent: dict[int, list[str]] = {}
    for s in spans:
        if s.parent is not None:
            by_parent.setdefault(s.parent.span_id, []).append(s.name)
    for page in pages:
        assert sorted(by_parent[page.context.span_id]) == ["crawl.commit", "crawl.fetch",
                                                           "crawl.parse"]  # fmt: skip
        attrs = page.attributes or {}
        assert attrs["url.full"].startswith(site.url) and attrs["crashsafe.attempt"] == 1
        assert attrs["http.response.status_code"] == 200 and attrs["crashsafe.outcome"] == "done"
    fetches = [s for s in spans if s.name == "crawl.fetch"]
    assert all((s.attributes or {})["http.response.body.size"] > 0 for s in fetches)
    records = sum((p.attributes or {})["crashsafe.records"] for p in pages)
    assert records == result.stats.records == 10


def test_no_traces_unless_the_environment_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing, "_configured", None)
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
                 "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    assert tracing.tracer_from_env() is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert tracing.tracer_from_env() is None
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    with pytest.raises(ConfigError, match="knows otlp, console and none"):
        tracing.tracer_from_env()
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    assert tracing.tracer_from_env() is not None


def test_a_batch_job_traces_each_call(tmp_path: Path) -> None:
    import subprocess
    import sys

    env = {**cli_env(), "OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "reviews"}
    out = subprocess.run(
        [sys.executable, "-m", "crashsafe", "batch", "demo", "--dir", str(tmp_path / "job")],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    calls = out.stdout.count('"name": "batch.call"')
    assert calls >= 20  # 20 batches of 10, and the calls the stand-in refused (429) too
    assert '"gen_ai.usage.input_tokens"' in out.stdout and '"service.name": "reviews"' in out.stdout
    assert out.stdout.count('"gen_ai.request.model": "test"') == calls  # the demo's model


def test_a_batch_api_job_traces_its_provider_calls_and_answers(tmp_path: Path) -> None:
    from crashsafe.batch.testserver import LLMServerOptions, LLMServerThread
    from tests.batch.test_batch_api import BATCH_API, classify, reviews

    src = reviews(tmp_path)  # 47 items, 5 a request: 10 requests, 3 a provider batch
    env = {"OTEL_TRACES_EXPORTER": "console"}
    with LLMServerThread(LLMServerOptions(batch_seconds=0.2)) as server:
        done = classify(server, src, tmp_path / "api.jsonl", *BATCH_API, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count('"name": "batch.answer"') == 10
    assert done.stdout.count('"crashsafe.call": "upload"') == 4  # one a provider batch
    assert done.stdout.count('"crashsafe.call": "create a batch"') == 4
    assert done.stdout.count('"name": "batch.provider_call"') >= 4 * 3  # and polls, downloads
