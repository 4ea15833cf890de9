"""The Scrapy habits still missing, and clear errors everywhere (issue #23 items 8-10)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from crashsafe.demo.server import AppThread
from tests.helpers import CLI, cli_env, run_cli

PAGE = "<html><body>{}</body></html>"


def habits_app() -> web.Application:
    hits: dict[str, int] = {}

    async def handle(request: web.Request) -> web.Response:
        path = request.path
        hits[path] = hits.get(path, 0) + 1
        if path == "/robots.txt":
            return web.Response(status=404)
        if path == "/hits":
            return web.json_response(hits)
        if path == "/":
            links = "".join(f'<a class="item" href="/item/{n}">item {n}</a>' for n in range(5))
            return web.Response(
                text=PAGE.format(links + '<a class="bad" href="/bad">bad</a>'
                                 '<a class="form" href="/form">form</a>'),
                content_type="text/html",
            )  # fmt: skip
        if path.startswith("/item/"):
            return web.Response(text=PAGE.format(f"<b>{path}</b>"), content_type="text/html")
        if path == "/bad":
            return web.json_response({"error": "token expired", "code": 4011}, status=400)
        if path == "/echo":  # a site that echoes what it was sent in its error
            return web.json_response({"you sent": dict(request.headers)}, status=401)
        if path == "/form":
            form = ('<form method="post" action="/search"><input name="q" value="lamp">'
                    '<input type="hidden" name="csrf" value="T0K3N">'
                    '<input type="submit" name="go" value="Search"></form>')  # fmt: skip
            return web.Response(text=PAGE.format(form), content_type="text/html")
        return web.Response(status=404)

    async def search(request: web.Request) -> web.Response:
        form = await request.post()
        return web.Response(text=PAGE.format(f"<i>{dict(form)}</i>"), content_type="text/html")

    app = web.Application()
    app.router.add_post("/search", search)
    app.router.add_get("/{tail:.*}", handle)
    return app


@pytest.fixture
def site() -> Iterator[str]:
    with AppThread(habits_app()) as thread:
        yield thread.url


HABITS = """
import json
from crashsafe import FormRequest, HttpError, Request, Spider

class Habits(Spider):
    name = "habits"
    item_key = "key"
    custom_settings = {"CONCURRENT_REQUESTS": 2, "RETRY_TIMES": 0}

    def parse(self, page):
        yield page.follow(page.css("a.form")[0], callback=self.parse_form)    # a Selector
        yield page.follow(page.css("a.bad"), errback=self.failed)            # a SelectorList of one
        yield from page.follow_all(page.css("a.item"), callback=self.parse_item)

    def parse_item(self, page):
        yield {"key": page.url.rsplit("/", 1)[1], "mine": self.mine}

    def parse_form(self, page):
        yield FormRequest.from_response(page, formdata={"q": "mug"}, callback=self.parse_result)

    def parse_result(self, page):
        yield {"key": "search", "sent": page.css("i::text").get()}

    def failed(self, failure):
        assert failure.check(HttpError) and failure.value.response.status == 400
        yield {"key": "bad", "status": failure.value.response.status,
               "said": json.loads(failure.value.response.text)["error"]}
"""


def test_the_scrapy_habits_selectors_arguments_errbacks_forms(site: str, tmp_path: Path) -> None:
    spider = tmp_path / "habits.py"
    spider.write_text(HABITS)
    db = f"sqlite:///{tmp_path / 'h.db'}"
    result = run_cli("crawl", str(spider), "--db", db, "--start-url", f"{site}/",
                     "--no-progress", "-a", "mine=yes")  # fmt: skip
    assert result.returncode == 0, result.stderr
    items = {
        r["key"]: r for r in map(json.loads, run_cli("export", "--db", db).stdout.split("\n")[:-1])
    }
    assert {items[str(n)]["mine"] for n in range(5)} == {"yes"}  # -a mine=yes
    assert items["bad"] == {"key": "bad", "status": 400, "said": "token expired"}  # errback
    sent = items["search"]["sent"]
    assert "'q': 'mug'" in sent and "'csrf': 'T0K3N'" in sent and "'go': 'Search'" in sent
    [row] = json.loads(run_cli("status", "--db", db, "--json").stdout)
    assert row["failed"] == 0  # the errback handled the 400: done, not dead


def test_a_page_limit_as_closespider_pagecount_and_a_spider_found_by_name(
    site: str, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    (project / "shop" / "spiders").mkdir(parents=True)
    (project / "shop" / "spiders" / "habits.py").write_text(HABITS)
    db = f"sqlite:///{tmp_path / 'n.db'}"
    args = [*CLI, "crawl", "habits", "--db", db, "--start-url", f"{site}/", "--no-progress",
            "-a", "mine=no", "-s", "CLOSESPIDER_PAGECOUNT=3"]  # fmt: skip
    first = subprocess.run(args, cwd=project, capture_output=True, text=True, env=cli_env(),
                           timeout=120)  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert "Stopped at max_pages=3 (this run's own limit)" in first.stderr
    [row] = json.loads(run_cli("status", "--db", db, "--json").stdout)
    assert 3 <= row["done"] < 9 and row["pending"] > 0  # (pages in flight finish too)
    rest = subprocess.run(args[:-2], cwd=project, capture_output=True, text=True, env=cli_env(),
                          timeout=120)  # fmt: skip
    assert rest.returncode == 0, rest.stderr
    [row] = json.loads(run_cli("status", "--db", db, "--json").stdout)
    assert (row["done"], row["pending"]) == (9, 0)
    unknown = subprocess.run([*CLI, "crawl", "nosuch", "--db", db], cwd=project,
                             capture_output=True, text=True, env=cli_env())  # fmt: skip
    assert unknown.returncode == 1 and "no spider named 'nosuch'" in unknown.stderr


def test_parse_behaves_as_the_crawl_would(site: str, tmp_path: Path) -> None:
    spider = tmp_path / "p.py"
    spider.write_text(
        "from crashsafe import Record, Spider\n"
        "class P(Spider):\n"
        "    name = 'p'\n"
        "    def parse(self, page):\n"
        "        yield Record(key=page.css('b::text').get(), data={})\n"
        "    def boom(self, page):\n"
        "        return {}['missing']\n"
    )
    gone = run_cli("parse", f"{site}/nothing-here", "--spider", str(spider))
    assert (
        gone.returncode == 0 and "the crawl would mark this page done with no record" in gone.stderr
    )
    assert '"record"' not in gone.stdout  # the callback never ran
    empty = run_cli("parse", f"{site}/", "--spider", str(spider))
    assert (
        empty.returncode == 1
        and "the crawl would fail this page: record with an empty key" in empty.stderr
    )
    boom = run_cli("parse", f"{site}/", "--spider", str(spider), "-c", "boom")
    assert boom.returncode == 1 and "KeyError: 'missing'" in boom.stderr
    assert str(spider) in boom.stderr and "crashsafe/crawl/" not in boom.stderr  # its frames only


def test_clear_errors_for_settings_ports_and_failed_bodies(site: str, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'e.db'}"
    base = ["crawl", "crashsafe.demo.spider:DemoShop", "--db", db, "--no-progress"]
    typo = run_cli(*base, "-s", "CONCURENT_REQUESTS=3", "--start-url", f"{site}/")
    assert typo.returncode == 1
    assert "did you mean concurrency (Scrapy's CONCURRENT_REQUESTS)?" in typo.stderr
    spider = tmp_path / "ports.py"
    spider.write_text("from crashsafe.demo.spider import DemoShop\n"
                      "class Ports(DemoShop):\n    name = 'ports'\n"
                      "    allowed_domains = ['127.0.0.1']\n")  # fmt: skip
    port = site.rsplit(":", 1)[1]
    ports = run_cli("crawl", str(spider), "--db", db, "--start-url", f"{site}/")
    assert ports.returncode == 1
    assert f"the host 127.0.0.1 is allowed, but not port {port}" in ports.stderr
    assert f"add '127.0.0.1:{port}' to allowed_domains" in ports.stderr
    bad = run_cli(*base, "--start-url", f"{site}/bad", "-s", "RETRY_TIMES=0")
    assert bad.returncode == 1, bad.stderr  # nothing crawled, one URL failed
    failed = run_cli("failed", "--db", db).stdout
    body = '; body: {"error": "token expired", "code": 4011}'
    assert f"HTTP 400 (add it to handle_statuses to parse such pages){body}" in failed
    grouped = run_cli("failed", "--db", db, "--group").stdout
    assert "body:" not in grouped  # groups by the error, not by each page's body


def test_a_requests_secrets_echoed_in_an_error_body_are_not_stored(
    site: str, tmp_path: Path
) -> None:
    # "Never stored in clear: a request's secrets" (docs/security.md): an error body that
    # echoes the request's headers put them in the dead letter (found by a review).
    spider = tmp_path / "echo.py"
    spider.write_text(
        "from crashsafe import Request, Spider\n"
        "class Echo(Spider):\n    name = 'echo'\n"
        "    custom_settings = {'RETRY_TIMES': 0, 'http_user': 'me', 'http_pass': 'PASSW0RD-1'}\n"
        "    def start_requests(self):\n"
        f"        yield Request('{site}/echo', headers={{'Authorization': 'Bearer SEKRET-AUTH-123',"
        " 'X-Api-Key': 'APIKEY-456'}, cookies={'sid': 'COOKIE-789'})\n"
        "    def parse(self, page):\n        pass\n"
    )
    db = f"sqlite:///{tmp_path / 'echo.db'}"
    ran = run_cli("crawl", str(spider), "--db", db, "--no-progress")
    assert ran.returncode == 1, ran.stderr
    failed = run_cli("failed", "--db", db).stdout
    assert "HTTP 401" in failed and "[redacted]" in failed
    for secret in ("SEKRET-AUTH-123", "APIKEY-456", "COOKIE-789"):
        assert secret not in failed and secret not in ran.stderr
    with sqlite3.connect(tmp_path / "echo.db") as con:
        stored = " ".join(str(row) for row in con.execute("SELECT * FROM frontier"))
    assert "SEKRET" not in stored and "APIKEY" not in stored and "COOKIE-7" not in stored


def test_a_read_only_place_is_one_line_for_databases_outputs_and_checkpoints(
    read_only_disk: Path, tmp_path: Path, site: str
) -> None:
    ro = read_only_disk
    writable = f"sqlite:///{tmp_path / 'w.db'}"
    crawl = ["crawl", "crashsafe.demo.spider:DemoShop", "--start-url", f"{site}/", "--no-progress"]
    task = str(Path(__file__).resolve().parents[2] / "examples" / "word_count.py") + ":count_words"
    inputs = tmp_path / "in.jsonl"
    inputs.write_text('{"id": "1", "text": "a b"}\n')
    new, out = ro / "new.db", ro / "out.jsonl"
    cases = [
        ([*crawl, "--db", f"sqlite:///{new}"], f"cannot create database {new}"),
        ([*crawl, "--db", writable, "-o", str(out)], f"cannot write {out}"),
        (["export", "--db", writable, "-o", str(ro / "x.csv")], f"cannot write {ro / 'x.csv'}"),
        (["batch", "run", str(inputs), "--checkpoint", str(ro / "cp.jsonl"), "--task", task],
         f"cannot write {ro / 'cp.jsonl'}"),
    ]  # fmt: skip
    run_cli(*crawl, "--db", writable)  # (so that export has a database to read)
    for args, said in cases:
        result = run_cli(*args)
        assert result.returncode == 1, (args, result.stderr)
        assert "Traceback" not in result.stderr, result.stderr
        [line] = result.stderr.strip().splitlines()
        assert said in line and ("read-only" in line or "cannot be written" in line), line
    # reading a database on a read-only file system works
    status = run_cli("status", "--db", f"sqlite:///{ro / 'shop.db'}")
    assert status.returncode == 0, status.stderr


def test_shell_binds_the_page_as_response_too(site: str) -> None:
    typed = "print(response.css('b::text').get(), page is response)\n"
    shell = subprocess.run([*CLI, "shell", f"{site}/item/7"], input=typed,
                           capture_output=True, text=True, env=cli_env(), timeout=60)  # fmt: skip
    assert "/item/7 True" in shell.stdout, shell.stdout + shell.stderr
