"""The Scrapy adapter's address guard (#24 item 6): a start page on 127.0.0.1 links to a
canary on another loopback address (by literal, by a name mapped to it, by IPv4-mapped
IPv6), to another port of its own host, and redirects there. OffsiteMiddleware lets all
of it through (the spider has no allowed_domains); the guard refuses every one, at once
and saying why, and the canary receives nothing. Without the guard, it would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from crashsafe.demo.server import AppThread
from crashsafe.store import open_store
from tests.faults.proxy import forward_proxy
from tests.faults.test_security import Counting
from tests.helpers import cli_env, run_cli

pytest.importorskip("scrapy", reason="the Scrapy adapter needs crashsafe[scrapy]")

ROOT = Path(__file__).parents[2]
SPIDER = str(Path(__file__).with_name("guard_spider.py"))


def adapter(db_url: str) -> list[str]:
    from scrapy.settings import default_settings

    from crashsafe.contrib.scrapy import SETTINGS

    resolver = ("TWISTED_DNS_RESOLVER" if hasattr(default_settings, "TWISTED_DNS_RESOLVER")
                else "DNS_RESOLVER")  # fmt: skip
    return [
        "-s", f"SCHEDULER={SETTINGS['SCHEDULER']}",
        "-s", f"SPIDER_MIDDLEWARES={json.dumps(SETTINGS['SPIDER_MIDDLEWARES'])}",
        "-s", f"DOWNLOADER_MIDDLEWARES={json.dumps(SETTINGS['DOWNLOADER_MIDDLEWARES'])}",
        "-s", "CRASHSAFE_ITEM_KEY=sku", "-s", f"CRASHSAFE_DB={db_url}",
        "-s", f"{resolver}=tests.scrapy_adapter.guard_spider.MapToCanary",
        "-s", "LOG_LEVEL=INFO",
    ]  # fmt: skip


def crawl(start: str, targets: list[str], db_url: str, *extra: str,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    cmd = [sys.executable, "-m", "scrapy", "runspider", SPIDER, "-a", f"start={start}",
           "-a", f"targets={','.join(targets)}", *adapter(db_url), *extra]  # fmt: skip
    environ = {**cli_env(), "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(cmd, env=environ, text=True, capture_output=True, timeout=180, cwd=ROOT)


def outcomes(db_url: str) -> tuple[set[str], dict[str, str]]:
    store = open_store(db_url, create=False, readonly=True)
    try:
        records = {r.key for r in store.iter_records()}
        failed = {f.url: f.error or "" for f in store.failed()}
    finally:
        store.close()
    return records, failed


@pytest.mark.parametrize("guard", ["on", "off"])
def test_special_addresses_are_refused_by_literal_name_mapped_address_and_redirect(
    guard: str, tmp_path: Path
) -> None:
    canary, other_port = Counting(), Counting()
    local = tmp_path / "local.txt"
    local.write_text("a local secret")
    with (
        AppThread(canary.app(), host="127.0.0.2") as internal,
        AppThread(other_port.app()) as other,
    ):
        c = internal.port
        site = Counting(redirects={"/hop": f"http://127.0.0.2:{c}/redirected"})
        with AppThread(site.app()) as me:
            targets = [
                f"http://127.0.0.2:{c}/literal",
                f"http://internal.test:{c}/name",  # mapped to 127.0.0.2
                f"http://[::ffff:127.0.0.2]:{c}/mapped",
                f"{other.url}/other-port",  # the start URL's host, another port
                f"{me.url}/hop",  # redirected to the canary
                f"{me.url}/fine",
                f"file://{local}",  # a local file (Scrapy reads it, as it reads ftp://)
            ]
            db = f"sqlite:///{tmp_path / 'g.db'}"
            off = ["-s", "CRASHSAFE_ADDRESS_GUARD=False"] if guard == "off" else []
            done = crawl(f"{me.url}/start", targets, db, *off)
    assert done.returncode == 0, done.stderr
    records, failed = outcomes(db)
    if guard == "off":  # the test can fail: without the guard, Scrapy reaches the canary
        assert canary.hits and other_port.hits and f"file://{local}" in records, records
        return
    assert sum(canary.hits.values()) == 0 and sum(other_port.hits.values()) == 0
    assert records == {"start", f"{me.url}/fine"}
    refused = {url: error for url, error in failed.items()}
    [local_key] = [url for url in refused if url.startswith("file:")]
    assert "file: URLs are refused" in refused.pop(local_key)
    assert len(refused) == 5, refused
    assert all("loopback address: refused" in e for e in refused.values()), refused
    assert "e.g. -s CRASHSAFE_ALLOWED_ADDRESSES=loopback)" in next(iter(refused.values()))
    assert "Traceback" not in done.stderr
    [row] = json.loads(run_cli("status", "--db", db, "--json").stdout)
    assert (row["failed"], row["pending"], row["leased"]) == (6, 0, 0)
    # requests: /start, /fine, and /hop's first hop; the five refused before any request
    # count none (the redirect refused at its second hop counts the first)
    assert (row["requests"], row["outcomes"]["refused"]) == (3, 5), row["outcomes"]


def test_an_errback_that_sends_a_refused_request_again_is_refused_again(
    tmp_path: Path,
) -> None:
    """The copy of a page's request an errback makes is a request of its own: it must not
    be taken for a start URL, whose host and port the guard lets through."""
    canary = Counting()
    with AppThread(canary.app(), host="127.0.0.2") as internal, AppThread(Counting().app()) as me:
        target = f"http://127.0.0.2:{internal.port}/literal"
        db = f"sqlite:///{tmp_path / 'r.db'}"
        done = crawl(f"{me.url}/start", [target], db, "-a", "replay=yes")
    assert done.returncode == 0, done.stderr
    assert sum(canary.hits.values()) == 0, canary.hits
    assert done.stderr.count(f"refused {target}") == 2  # the page, and its copy


def test_a_proxy_opens_nothing_and_carries_every_request(tmp_path: Path) -> None:
    canary = Counting()
    with forward_proxy() as proxy, AppThread(canary.app(), host="127.0.0.2") as internal:
        c = internal.port
        site = Counting()
        with AppThread(site.app()) as me:
            targets = [f"http://127.0.0.2:{c}/literal", f"http://internal.test:{c}/name",
                       f"http://[::ffff:127.0.0.2]:{c}/mapped", f"{me.url}/fine"]  # fmt: skip
            db = f"sqlite:///{tmp_path / 'p.db'}"
            proxied = {"http_proxy": f"http://u:p@127.0.0.1:{proxy.port}", "no_proxy": ""}
            done = crawl(f"{me.url}/start", targets, db, env=proxied)
    assert done.returncode == 0, done.stderr
    assert sum(canary.hits.values()) == 0
    assert sorted(proxy.log) == [f"GET {me.url}/fine", f"GET {me.url}/start"]
    records, failed = outcomes(db)
    assert records == {"start", f"{me.url}/fine"}
    assert len(failed) == 3 and all("loopback address: refused" in e for e in failed.values())
