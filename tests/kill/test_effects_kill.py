"""A crawl that downloads pictures and writes a WARC archive, SIGKILLed while it works.
After the last run: one file per distinct content, no partial file, every record
referring to its picture's content; a WARC archive that warcio reads whole, and that
`warcio check` and `warcio index` accept. (The dispatcher's kills: test_deliver_kill.py,
and `killtest --effects`: test_killtest.py.)"""

from __future__ import annotations

import contextlib
import hashlib
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator  # type: ignore[import-untyped]

from crashsafe import open_store
from crashsafe.demo.shop import IMAGES, ShopThread, image
from tests.helpers import reaped, run_cli, start_cli, wait_for

pytestmark = pytest.mark.slow
EXAMPLE = str(Path(__file__).parents[2] / "examples" / "shop_photos.py")
KILLS = 3
WARCIO = Path(sys.executable).with_name("warcio")  # warcio's own command


def records(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db) as conn:
            return int(conn.execute("SELECT count(*) FROM records").fetchone()[0])
    except sqlite3.OperationalError:  # not created yet
        return 0


def test_files_and_warc_survive_kills(shop: Callable[..., ShopThread], tmp_path: Path) -> None:
    site = shop(listings=4, per_listing=25, latency_ms=5)
    db = tmp_path / "photos.db"
    args = ["crawl", EXAMPLE, "--db", f"sqlite:///{db}", "--start-url", f"{site.url}/list/0",
            "--no-progress", "--concurrency", "4", "--warc", str(tmp_path / "warc")]  # fmt: skip
    for k in range(1, KILLS + 1):
        with reaped(start_cli(*args)) as proc:

            def progressed(proc: subprocess.Popen[str] = proc, k: int = k) -> bool:
                return proc.poll() is not None or records(db) >= 100 * k // (KILLS + 1)

            wait_for(progressed, timeout=60)
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
    done = run_cli(*args)
    assert done.returncode == 0, done.stderr

    # Files: one per distinct content, named by it; nothing partial, no temporary left.
    files = tmp_path / "files"
    stored = sorted(p for p in files.rglob("*") if p.is_file())
    assert len(stored) == IMAGES
    for path in stored:
        assert hashlib.sha256(path.read_bytes()).hexdigest() == path.name
        assert path.relative_to(files).as_posix() == f"{path.name[:2]}/{path.name[2:4]}/{path.name}"
    assert not any((files / ".tmp").iterdir())
    with contextlib.closing(open_store(f"sqlite:///{db}")) as store:
        rows = list(store.iter_records())
        assert store.effect_stats(rows[0].crawl).files == IMAGES
    assert len(rows) == 100
    for r in rows:
        n = int(r.key.removeprefix("SKU-"))
        assert r.data["photo"]["sha256"] == hashlib.sha256(image(n)).hexdigest()
        assert (files / r.data["photo"]["path"]).is_file()

    # WARC: every file read whole by warcio's reader and its own check and index.
    archives = sorted((tmp_path / "warc").glob("*.warc.gz"))
    assert len(archives) >= 1
    responses = 0
    for path in archives:
        with path.open("rb") as stream:
            responses += sum(r.rec_type == "response" for r in ArchiveIterator(stream))
        for tool in ("check", "index"):
            checked = subprocess.run([str(WARCIO), tool, str(path)], capture_output=True, text=True)
            assert checked.returncode == 0 and not checked.stderr, checked.stderr
    assert responses >= 100 + 4 + IMAGES  # every page and picture at least once
