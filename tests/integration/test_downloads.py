"""page.download(): files stored once per content, referenced from records; downloads that
fail for good are noted in the record, those that fail for now retry the page."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

import crashsafe
from crashsafe import CrashsafeError, File, Page, Record, Spider, open_store
from crashsafe.demo.server import AppThread
from crashsafe.demo.shop import IMAGES, ShopThread, image
from crashsafe.effects.files import FileStore, _host


class Photos(Spider):
    name = "photos"
    image_path = "/image/{n}.png"

    def parse(self, page: Page) -> Iterator[Any]:
        if "/list/" in page.url:
            yield from page.follow_all(css="a.product::attr(href)")
            yield page.download("/image/0.png")  # on its own: stored, in no record
            return
        n = int(page.url.rsplit("-", 1)[1])
        yield Record(
            key=str(n),
            data={"photos": [page.download(self.image_path.format(n=n)), File("/image/1.png")]},
        )


def stored_records(db: str) -> dict[str, Any]:
    store = open_store(db)
    try:
        return {r.key: r.data for r in store.iter_records()}
    finally:
        store.close()


def test_files_are_stored_once_per_content_and_referenced(
    shop: Callable[..., ShopThread], tmp_path: Path, any_db_url: str
) -> None:
    site = shop(listings=1, per_listing=10)
    db = any_db_url
    result = crashsafe.crawl(
        Photos, db=db, start_urls=[f"{site.url}/list/0"], files_dir=str(tmp_path / "files")
    )
    assert result.stats.failed == 0
    files = sorted(p for p in (tmp_path / "files").rglob("*") if p.is_file())
    assert len(files) == IMAGES  # products 0..9 share 7 pictures; /image/0 and 1 among them
    data = stored_records(db)
    for key, value in data.items():
        photo, shared = value["photos"]
        assert photo["sha256"] == hashlib.sha256(image(int(key))).hexdigest()
        assert photo["path"] == FileStore.relative(photo["sha256"])
        assert (photo["size"], photo["content_type"]) == (len(image(int(key))), "image/png")
        assert shared["url"] == f"{site.url}/image/1.png"
    assert os.stat(files[0]).st_mode & 0o777 == 0o600
    store = open_store(db)
    assert store.effect_stats("photos").files == IMAGES
    store.close()


def test_downloads_failing_for_good_are_noted_and_for_now_retried(
    shop: Callable[..., ShopThread], tmp_path: Path
) -> None:
    class Odd(Photos):
        image_path = "/image/{n}00.png"  # 0 exists; 100..900 are 404

    # Every page and picture answers 503 once: the pages wait for their pictures.
    site = shop(listings=1, per_listing=10, error_rate=1.0, error_attempts=1)
    db = f"sqlite:///{tmp_path / 'p.db'}"
    result = crashsafe.crawl(
        Odd, db=db, start_urls=[f"{site.url}/list/0"], backoff_base=0.01, backoff_max=0.05,
        max_file_bytes=2070,
    )  # fmt: skip
    assert result.stats.failed == 0 and result.stats.records == 10
    data = stored_records(db)
    assert data["0"]["photos"][0]["sha256"] == hashlib.sha256(image(0)).hexdigest()
    for n in range(1, 10):
        assert data[str(n)]["photos"][0] == {
            "url": f"{site.url}/image/{n}00.png",
            "error": "HTTP 404",
        }
    assert len(image(0)) <= 2070 < len(image(1))
    too_big = data["0"]["photos"][1]
    assert "too large" in too_big["error"] and "max_file_bytes" in too_big["error"]


def test_a_page_download_of_nothing_fails_the_page_saying_why(
    shop: Callable[..., ShopThread], tmp_path: Path
) -> None:
    class Broken(Spider):
        name = "broken"
        fail_fast_after = 0

        def parse(self, page: Page) -> Iterator[Any]:
            yield Record(
                key="k", data={"photo": page.download(page.css("img.none::attr(src)").get())}
            )

    site = shop(listings=1, per_listing=1)
    db = f"sqlite:///{tmp_path / 'p.db'}"
    result = crashsafe.crawl(Broken, db=db, start_urls=[f"{site.url}/list/0"])
    assert result.stats.failed == 1
    store = open_store(db)
    [failed] = store.failed()
    store.close()
    assert "did the selector match nothing?" in (failed.error or "")


def test_temporary_files_of_dead_processes_are_removed(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    sha, rel = store.put(b"x" * 10)
    assert store.put(b"x" * 10) == (sha, rel)  # the same content: the same file, no copy
    assert (tmp_path / rel).read_bytes() == b"x" * 10
    tmp = tmp_path / ".tmp"
    dead = tmp / f"{_host()}-999999999-0"
    live = tmp / f"{_host()}-{os.getpid()}-7"
    dead.write_bytes(b"partial")
    live.write_bytes(b"in flight")
    FileStore(tmp_path)
    assert not dead.exists() and live.exists()


@pytest.mark.parametrize("url", [None, "", "   "])
def test_a_file_needs_a_url(url: Any) -> None:
    with pytest.raises(ValueError, match="selector"):
        File(url)


def test_a_files_folder_that_cannot_be_written_stops_the_crawl_and_loses_nothing(
    shop: Callable[..., ShopThread], tmp_path: Path
) -> None:
    (tmp_path / "file").write_text("a file where the files folder should be")
    site = shop(listings=1, per_listing=3)
    db = f"sqlite:///{tmp_path / 'p.db'}"
    with pytest.raises(CrashsafeError, match="cannot create the files folder"):
        crashsafe.crawl(
            Photos, db=db, start_urls=[f"{site.url}/list/0"],
            files_dir=str(tmp_path / "file" / "x"),
        )  # fmt: skip
    store = open_store(db)
    stats = store.stats("photos")
    store.close()
    assert stats.failed == 0 and stats.pending >= 1  # waiting for a run that can store
    (tmp_path / "file").unlink()
    result = crashsafe.crawl(
        Photos, db=db, start_urls=[f"{site.url}/list/0"], files_dir=str(tmp_path / "file" / "x")
    )
    assert result.stats.records == 3 and result.stats.failed == 0


def test_download_urls_that_cannot_be_fetched_are_noted_without_credentials(
    shop: Callable[..., ShopThread], tmp_path: Path
) -> None:
    class Odd(Spider):
        name = "odd"

        def parse(self, page: Page) -> Iterator[Any]:
            urls = ["http://u:pw@127.0.0.1:1/x.png", "http://127.0.0.1:99999/x", "http://[::1/x"]
            yield Record(key="k", data={"files": [page.download(u) for u in urls]})

    site = shop(listings=1, per_listing=1)
    db = f"sqlite:///{tmp_path / 'p.db'}"
    result = crashsafe.crawl(Odd, db=db, start_urls=[f"{site.url}/list/0"])
    assert result.stats.failed == 0
    [files] = [d["files"] for d in stored_records(db).values()]
    assert files[0]["url"] == "http://127.0.0.1:1/x.png"  # no user:password
    assert all(f["error"].startswith("not downloaded") for f in files)


def test_a_file_kept_from_another_page_fails_the_page_saying_why(
    shop: Callable[..., ShopThread], tmp_path: Path
) -> None:
    class Memo(Spider):
        name = "memo"
        kept: list[File] = []

        def parse(self, page: Page) -> Iterator[Any]:
            if "/list/" in page.url:
                self.kept.append(page.download("/image/1.png"))
                yield from page.follow_all(css="a.product::attr(href)")
            else:
                yield Record(
                    key=page.url, data={"photo": self.kept[0], "own": page.download("/image/2.png")}
                )

    site = shop(listings=1, per_listing=1)
    db = f"sqlite:///{tmp_path / 'p.db'}"
    crashsafe.crawl(Memo, db=db, start_urls=[f"{site.url}/list/0"], fail_fast_after=0)
    store = open_store(db)
    [failed] = store.failed()
    store.close()
    assert "made outside this page's callback" in (failed.error or "")
    assert "Traceback" not in (failed.error or "")


def test_a_download_left_for_later_is_tried_again_even_if_its_page_did_not_change(
    tmp_path: Path,
) -> None:
    # The picture's host answers 503 for its robots.txt in the first pass: the record says
    # "not downloaded: ... trying again later". Its page answers 304 when asked whether it
    # changed; it must not be asked (a 304 keeps the record as it is, for ever).
    robots_down = [True]
    conditional: list[str | None] = []

    async def robots(request: web.Request) -> web.Response:
        return web.Response(status=503) if robots_down[0] else web.Response(text="")

    async def picture(request: web.Request) -> web.Response:
        return web.Response(body=b"\x89PNG picture", content_type="image/png")

    pictures = web.Application()
    pictures.router.add_get("/robots.txt", robots)
    pictures.router.add_get("/p.png", picture)
    with AppThread(pictures) as host:

        async def item(request: web.Request) -> web.Response:
            conditional.append(request.headers.get("If-None-Match"))
            if request.headers.get("If-None-Match") == '"v1"':
                return web.Response(status=304, headers={"ETag": '"v1"'})
            body = f'<img src="{host.url}/p.png">'
            return web.Response(text=body, content_type="text/html", headers={"ETag": '"v1"'})

        pages = web.Application()
        pages.router.add_get("/item", item)
        with AppThread(pages) as site:

            class Pictures(Spider):
                name = "pictures"
                item_key = "id"
                allowed_download_domains = (host.url.removeprefix("http://"),)
                allowed_addresses = ("loopback",)

                def parse(self, page: Page) -> Iterator[Any]:
                    yield {"id": 1, "pic": page.download(page.css("img::attr(src)").get())}

            db = f"sqlite:///{tmp_path / 'p.db'}"
            files = str(tmp_path / "files")
            crashsafe.crawl(Pictures, db=db, start_urls=[f"{site.url}/item"], files_dir=files)
            [first] = stored_records(db).values()
            assert first["pic"]["error"].startswith("not downloaded: robots.txt")
            robots_down[0] = False
            with sqlite3.connect(tmp_path / "p.db") as conn:  # its next try is due now
                conn.execute("UPDATE robots SET retry_at = 0 WHERE retry_at IS NOT NULL")
            store = open_store(db)
            try:
                store.recrawl("pictures")
            finally:
                store.close()
            crashsafe.crawl(Pictures, db=db, start_urls=[f"{site.url}/item"], files_dir=files)
    assert conditional == [None, None]  # the second fetch did not ask "changed?"
    [second] = stored_records(db).values()
    assert second["pic"]["sha256"] == hashlib.sha256(b"\x89PNG picture").hexdigest()
