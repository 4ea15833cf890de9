"""Scrapy's command-line habits: crawl -o/-O/-s, crashsafe parse, crashsafe shell."""

from __future__ import annotations

import csv
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from crashsafe.demo.shop import ShopThread
from tests.helpers import CLI, cli_env, run_cli
from tests.integration.test_cli import crawl_args

SPIDER = str(Path(__file__).resolve().parents[2] / "examples" / "shop.py")


def test_crawl_o_writes_the_records_at_the_end_and_again_whole(
    shop: Callable[..., ShopThread], db_url: str, tmp_path: Path
) -> None:
    site = shop(listings=2, per_listing=3)
    out = tmp_path / "out.csv"
    done = run_cli(*crawl_args(site, db_url, "-o", str(out), "-s", "concurrency=2"))
    assert done.returncode == 0, done.stderr
    assert "wrote 6 record(s)" in done.stderr
    rows = list(csv.DictReader(out.open()))
    assert sorted(r["_crashsafe_key"] for r in rows) == sorted(get_skus(site))
    # -o again (a cron line run as it is): the file written again, whole, from the store
    again = run_cli(*crawl_args(site, db_url, "-o", str(out)))
    assert again.returncode == 0, again.stderr
    assert len(list(csv.DictReader(out.open()))) == 6
    as_json = tmp_path / "out.json"
    replaced = run_cli(*crawl_args(site, db_url, "-O", str(as_json)))
    assert replaced.returncode == 0, replaced.stderr
    assert len(json.loads(as_json.read_text())) == 6


def get_skus(site: ShopThread) -> list[str]:
    from tests.helpers import get_json

    return list(get_json(f"{site.url}/catalogue"))


def test_crawl_o_with_an_unknown_extension_or_both_options_is_one_line(
    shop: Callable[..., ShopThread], db_url: str, tmp_path: Path
) -> None:
    site = shop(listings=1, per_listing=1)
    for extra in (["-o", str(tmp_path / "x.xml")], ["-o", "a.csv", "-O", "b.csv"]):
        bad = run_cli(*crawl_args(site, db_url, *extra))
        assert bad.returncode == 1 and "Traceback" not in bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert get_skus(site)  # (the shop is there; nothing was crawled)


def test_parse_prints_what_a_callback_yields(shop: Callable[..., ShopThread]) -> None:
    site = shop(listings=1, per_listing=2)
    listing = run_cli("parse", f"{site.url}/list/0", "--spider", SPIDER)
    assert listing.returncode == 0, listing.stderr
    lines = [json.loads(line) for line in listing.stdout.splitlines()]
    assert all("request" in line for line in lines) and len(lines) == 2
    product = run_cli("parse", lines[0]["request"]["url"], "--spider", SPIDER, "-c", "parse")
    [record] = [json.loads(line) for line in product.stdout.splitlines()]
    assert set(record["record"]) == {"key", "data"} and record["record"]["key"] in get_skus(site)
    assert "parse yielded 1 record(s)" in product.stderr


def test_parse_with_a_missing_callback_or_bad_meta_is_one_line(
    shop: Callable[..., ShopThread],
) -> None:
    site = shop(listings=1, per_listing=1)
    for extra in (["-c", "nope"], ["--meta", "{not json"]):
        bad = run_cli("parse", f"{site.url}/list/0", "--spider", SPIDER, *extra)
        assert bad.returncode == 1, bad.stderr
        assert "Traceback" not in bad.stderr
        assert "Error:" in bad.stderr


BROKEN = """
from crashsafe import Spider


class Broken(Spider):
    name = "broken"

    def parse(self, page):
        return self.price_of(page)

    def price_of(self, page):
        return int(page.css("title::text").get("no title"))

    def needs_more(self, page, listing):
        yield {}
"""


def test_parse_shows_the_spiders_frames_or_says_it_was_never_entered(
    shop: Callable[..., ShopThread], tmp_path: Path
) -> None:
    site = shop(listings=1, per_listing=1)
    spider = tmp_path / "broken.py"
    spider.write_text(BROKEN)
    raised = run_cli("parse", f"{site.url}/list/0", "--spider", str(spider))
    assert raised.returncode == 1
    frames = raised.stderr.split("Traceback (the spider's frames):\n", 1)[1]
    assert frames.startswith(f'  File "{spider}", line 9, in parse')  # its own, first
    assert "in price_of" in frames and "ValueError: invalid literal for int()" in frames
    assert "asyncio" not in frames and "crashsafe/" not in frames and ".pyx" not in frames
    called = run_cli("parse", f"{site.url}/list/0", "--spider", str(spider), "-c", "needs_more")
    assert called.returncode == 1
    assert "(raised before the spider's code ran: calling it failed)" in called.stderr
    assert "File " not in called.stderr  # no frame that is not the spider's
    assert "missing 1 required positional argument: 'listing'" in called.stderr


def test_shell_gives_the_page_to_a_python_console(shop: Callable[..., ShopThread]) -> None:
    site = shop(listings=1, per_listing=1)
    typed = "print('title:', page.status, len(page.css('a')))\nfetch(page.url)\nprint(page)\n"
    done = subprocess.run(
        [*CLI, "shell", f"{site.url}/list/0"], input=typed, text=True, capture_output=True,
        timeout=60, env=cli_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "title: 200 1" in done.stdout
    assert f"<Page 200 {site.url}/list/0>" in done.stdout


def test_crawl_o_checks_its_folder_and_name_before_crawling(
    shop: Callable[..., ShopThread], db_url: str, tmp_path: Path
) -> None:
    site = shop(listings=1, per_listing=1)
    for extra in (["-o", str(tmp_path / "missing" / "out.csv")], ["-O", ""]):
        bad = run_cli(*crawl_args(site, db_url, *extra))
        assert bad.returncode == 1 and "Traceback" not in bad.stderr, bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert not Path(db_url.removeprefix("sqlite:///")).exists()  # refused before any work
