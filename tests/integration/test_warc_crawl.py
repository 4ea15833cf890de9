"""--warc on a crawl: pages and downloads captured with their requests, credentials
redacted, files private."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator  # type: ignore[import-untyped]

import crashsafe
from crashsafe.demo.shop import ShopThread
from tests.integration.test_downloads import Photos


def test_a_crawl_archives_every_page_and_download_without_its_credentials(
    shop: Callable[..., ShopThread], tmp_path: Path
) -> None:
    site = shop(listings=1, per_listing=3)
    warc = tmp_path / "warc"
    crashsafe.crawl(
        Photos, db=f"sqlite:///{tmp_path / 'p.db'}", start_urls=[f"{site.url}/list/0"],
        warc_dir=str(warc), secret_headers=("X-Shop-*",),
        default_headers=(("Authorization", "Bearer s3cret"), ("X-Api-Key", "k3y"),
                         ("Session-Token", "t0k"), ("X-Shop-Pass", "p4ss"), ("X-Plain", "ok")),
    )  # fmt: skip
    [path] = list(warc.glob("*.warc.gz"))
    assert os.stat(path).st_mode & 0o777 == 0o600
    with path.open("rb") as stream:
        records = [
            (r.rec_type, r.rec_headers.get_header("WARC-Target-URI"), r.http_headers,
             r.content_stream().read())
            for r in ArchiveIterator(stream)
        ]  # fmt: skip
    responses = {uri: body for kind, uri, _, body in records if kind == "response"}
    assert set(responses) == {f"{site.url}/list/0"} | {
        f"{site.url}/product/SKU-0000{n}" for n in range(3)
    } | {f"{site.url}/image/{n}.png" for n in range(3)} | {f"{site.url}/image/1.png"}
    requests = [headers for kind, _, headers, _ in records if kind == "request"]
    assert requests and all(h.get_header("Authorization") == "[redacted]" for h in requests)
    # headers named like credentials too (#24 item 3), and those secret_headers names
    for name in ("X-Api-Key", "Session-Token", "X-Shop-Pass"):
        assert all(h.get_header(name) == "[redacted]" for h in requests), name
    assert all(h.get_header("X-Plain") == "ok" for h in requests)
    assert all(h.get_header("User-Agent") == "crashsafe/0.1" for h in requests)
