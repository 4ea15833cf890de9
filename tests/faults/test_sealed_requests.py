"""A request's secrets are never stored in clear, and a restart still sends them exactly
(issue #24 item 3)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from crashsafe.demo.server import AppThread
from crashsafe.sealed import new_key
from tests.helpers import cli_env, run_cli

SECRETS = [
    "Bearer S3CRET-T0KEN",
    "K3Y-VALUE",
    "C00KIE-VALUE",
    "PA55W0RD",
    "L4TIN-PW",
    "APIKEY-V",
    "SUBKEY-V",
]
SPIDER = """
from crashsafe import Record, Request, Spider

class Secrets(Spider):
    name = "secrets"
    max_pages = 1  # the first run stops after the start page: the requests stay stored

    def parse(self, page):
        yield Request(page.urljoin("/api"), headers={"Authorization": "Bearer S3CRET-T0KEN",
                      "X-Api-Key": "K3Y-VALUE"}, cookies={"sid": "C00KIE-VALUE"},
                      callback=self.parse_api)
        yield Request(page.urljoin("/login"), method="POST", body="user=me&password=PA55W0RD",
                      headers={"Content-Type": "application/x-www-form-urlencoded"},
                      callback=self.parse_api)
        # names the first review missed: a latin-1 body (stored as base64), other headers
        yield Request(page.urljoin("/old-login"), method="POST",
                      body="user=m\xe9&pass=L4TIN-PW".encode("latin-1"),
                      headers={"apikey": "APIKEY-V", "Ocp-Apim-Subscription-Key": "SUBKEY-V"},
                      callback=self.parse_api)

    def parse_api(self, page):
        yield Record(key=page.url, data={"said": page.text})
"""


UP: dict[str, bool] = {"up": False}  # until then /api and /login answer 503: they wait


@pytest.fixture
def site() -> Iterator[tuple[str, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []
    UP["up"] = False

    async def handle(request: web.Request) -> web.Response:
        if request.path == "/robots.txt":
            return web.Response(status=404)
        if request.path != "/start" and not UP["up"]:
            return web.Response(status=503, headers={"Retry-After": "0"})
        body = (await request.read()).decode("latin-1")
        seen.append({"path": request.path, "auth": request.headers.get("Authorization", ""),
                     "key": request.headers.get("X-Api-Key", ""),
                     "cookie": request.headers.get("Cookie", ""), "body": body})  # fmt: skip
        return web.Response(text="<p>ok</p>", content_type="text/html")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    with AppThread(app) as thread:
        yield thread.url, seen


def stored_requests(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        return "\n".join(str(r[0]) for r in conn.execute("SELECT request FROM frontier"))


def test_secrets_are_sealed_at_rest_and_sent_exactly_after_a_restart(
    site: tuple[str, list[dict[str, str]]], tmp_path: Path
) -> None:
    url, seen = site
    spider = tmp_path / "secrets.py"
    spider.write_text(SPIDER)
    db = tmp_path / "s.db"
    args = ["crawl", str(spider), "--db", f"sqlite:///{db}", "--start-url", f"{url}/start",
            "--no-progress", "--concurrency", "1", "--warc", str(tmp_path / "warc")]  # fmt: skip
    first = run_cli(*args)
    assert first.returncode == 0, first.stderr
    assert seen[0]["path"] == "/start"  # the two requests wait in the store (503 for now)
    at_rest = stored_requests(db)
    assert "$sealed" in at_rest
    for secret in SECRETS:
        assert secret not in at_rest, secret
    # nor a plain hash of a login body in its key, to test password guesses against
    import hashlib

    with sqlite3.connect(db) as conn:
        keys = [str(r[0]) for r in conn.execute("SELECT url FROM frontier")]
    plain = hashlib.sha256(b"user=me&password=PA55W0RD").hexdigest()[:16]
    assert any(k.startswith(f"{url}/login#POST:") for k in keys), keys
    assert not any(plain in k for k in keys), keys
    assert (tmp_path / "s.db.key").exists()  # the key, beside the database (0600)
    assert oct((tmp_path / "s.db.key").stat().st_mode & 0o777) == "0o600"
    UP["up"] = True
    seen.clear()
    rest = run_cli(*args, "-s", "max_pages=none")
    assert rest.returncode == 0, rest.stderr
    sent = {s["path"]: s for s in seen}  # as read back from the store: sent exactly
    assert sent["/api"]["auth"] == "Bearer S3CRET-T0KEN" and sent["/api"]["key"] == "K3Y-VALUE"
    assert "sid=C00KIE-VALUE" in sent["/api"]["cookie"]
    assert sent["/login"]["body"] == "user=me&password=PA55W0RD"
    assert sent["/old-login"]["body"] == "user=m\xe9&pass=L4TIN-PW"
    # The WARC archive keeps the exchanges, not the secrets: bodies with credential fields
    # and credential headers are [redacted] in its request records
    from warcio.archiveiterator import ArchiveIterator

    archived = b""
    for path in sorted((tmp_path / "warc").glob("*.warc.gz")):
        with path.open("rb") as stream:
            for record in ArchiveIterator(stream):
                if record.rec_type == "request":
                    archived += record.http_headers.to_bytes() + record.content_stream().read()
    assert archived.count(b"[redacted]") >= 6  # 2 bodies, 2 headers of /api, 2 of /old-login
    for secret in SECRETS:
        assert secret.encode() not in archived, secret


def test_a_stored_secret_without_its_key_fails_its_page_saying_so(
    site: tuple[str, list[dict[str, str]]], tmp_path: Path
) -> None:
    url, seen = site
    spider = tmp_path / "secrets.py"
    spider.write_text(SPIDER)
    db = tmp_path / "s.db"
    args = ["crawl", str(spider), "--db", f"sqlite:///{db}", "--start-url", f"{url}/start",
            "--no-progress", "--concurrency", "1"]  # fmt: skip
    assert run_cli(*args).returncode == 0
    (tmp_path / "s.db.key").unlink()  # lost, or another machine without it
    UP["up"] = True
    seen.clear()
    rest = run_cli(*args, "-s", "max_pages=none")
    assert "Traceback" not in rest.stderr
    failed = run_cli("failed", "--db", f"sqlite:///{db}").stdout
    assert failed.count("there is no key to open it: set CRASHSAFE_SECRET_KEY") == 3
    assert seen == []  # nothing sent without its secrets


def test_on_postgresql_a_secret_needs_the_key_from_the_environment(
    site: tuple[str, list[dict[str, str]]], tmp_path: Path, pg_url: str
) -> None:
    import subprocess

    from tests.helpers import CLI

    url, seen = site
    spider = tmp_path / "secrets.py"
    spider.write_text(SPIDER)
    args = [*CLI, "crawl", str(spider), "--db", pg_url, "--start-url", f"{url}/start",
            "--no-progress", "--concurrency", "1", "-s", "max_pages=none"]  # fmt: skip
    env = {k: v for k, v in cli_env().items() if k != "CRASHSAFE_SECRET_KEY"}
    UP["up"] = True
    refused = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert "set CRASHSAFE_SECRET_KEY on every worker" in refused.stderr + run_cli(
        "failed", "--db", pg_url).stdout  # fmt: skip
    run_cli("retry", "--db", pg_url)
    keyed = subprocess.run(args, env={**env, "CRASHSAFE_SECRET_KEY": new_key()},
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert keyed.returncode == 0, keyed.stderr
    assert {s["path"] for s in seen} == {"/start", "/api", "/login", "/old-login"}
