"""The WARC archive: real files, read back with warcio, and a writer killed mid-loop."""

from __future__ import annotations

import os
import random
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from warcio.archiveiterator import ArchiveIterator  # type: ignore[import-untyped]
from warcio.exceptions import ArchiveLoadFailed  # type: ignore[import-untyped]

from crashsafe.effects.warc import WarcArchive, read_archive, trim_torn_tail, whole_length
from crashsafe.errors import ConfigError, FolderUnwritable
from tests.clock import ManualClock
from tests.helpers import reaped, wait_for_line

WARCIO = Path(sys.executable).with_name("warcio")


def write(archive: WarcArchive, number: int, body: bytes, **options: Any) -> None:
    exchange: dict[str, Any] = {
        "url": f"https://shop.example/p/{number}?page=1",
        "method": "GET",
        "request_headers": [("Host", "shop.example"), ("User-Agent", "crashsafe")],
        "request_body": None,
        "status": 200,
        "reason": "OK",
        "response_headers": [
            ("Content-Type", "text/html"),
            ("Content-Encoding", "gzip"),
            ("Transfer-Encoding", "chunked"),
            ("Content-Length", "7"),
        ],
        "body": body,
    }
    archive.write_exchange(**{**exchange, **options})


def records(path: Path) -> list[tuple[Any, bytes]]:
    """Every record of ``path`` with its content, read by warcio alone."""
    with path.open("rb") as stream:
        return [(r, r.content_stream().read()) for r in ArchiveIterator(stream)]


def exchanges(path: Path) -> list[str]:
    """The target URIs of the response records, checking each is followed by its request."""
    found = records(path)
    assert found[0][0].rec_type == "warcinfo"
    assert [r.rec_type for r, _ in found[1:]] == ["response", "request"] * ((len(found) - 1) // 2)
    for (response, _), (request, _) in zip(found[1::2], found[2::2], strict=True):
        response_id = response.rec_headers.get_header("WARC-Record-ID")
        assert request.rec_headers.get_header("WARC-Concurrent-To") == response_id
    return [r.rec_headers.get_header("WARC-Target-URI") for r, _ in found[1::2]]


def test_exchanges_read_back_as_written(tmp_path: Path) -> None:
    folder = tmp_path / "warc"
    bodies = [b"<html>first</html>", b"", os.urandom(20_000)]
    with WarcArchive(folder, "w1") as archive:
        for number, body in enumerate(bodies):
            write(archive, number, body)
        archive.write_exchange(
            url="https://shop.example/search",
            method="POST",
            request_headers=[("Content-Type", "application/json")],
            request_body=b'{"q": "lamp"}',
            status=404,
            reason="Not Found",
            response_headers=[],
            body=b"none",
        )
    [path] = archive.paths
    assert path.parent == folder and path.name.endswith("-w1-00000.warc.gz")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    found = records(path)
    info = found[0][1].decode()
    assert "software: crashsafe" in info and "worker: w1" in info
    assert len(found) == 1 + 2 * 4
    responses = [(r, content) for r, content in found if r.rec_type == "response"]
    for (record, content), body in zip(responses, bodies, strict=False):
        assert content == body  # the decoded body, as received
        headers = record.http_headers
        assert headers.get_statuscode() == "200"
        assert headers.get_header("Content-Length") == str(len(body))
        assert headers.get_header("Content-Encoding") is None
        assert headers.get_header("Transfer-Encoding") is None
        assert headers.get_header("X-Crashsafe-Original-Content-Encoding") == "gzip"
    post_response, post_request = found[-2], found[-1]
    assert post_response[0].http_headers.get_statuscode() == "404"
    assert post_request[0].http_headers.protocol == "POST"
    assert post_request[0].http_headers.statusline == "/search HTTP/1.1"
    assert post_request[1] == b'{"q": "lamp"}'
    assert exchanges(path)[:2] == [
        "https://shop.example/p/0?page=1",
        "https://shop.example/p/1?page=1",
    ]
    assert [r.rec_type for r in read_archive(path)] == [r.rec_type for r, _ in found]


def test_files_rotate_in_name_order(tmp_path: Path) -> None:
    clock = ManualClock(1_800_000_000)
    archive = WarcArchive(tmp_path, "w1", max_bytes=8_000, clock=clock)
    for number in range(30):
        write(archive, number, os.urandom(2_000))
        clock.advance(0.4)
    archive.close()

    assert len(archive.paths) >= 5
    assert archive.paths == sorted(tmp_path.iterdir())
    written = [url for path in archive.paths for url in exchanges(path)]
    assert written == [f"https://shop.example/p/{n}?page=1" for n in range(30)]
    assert all(path.stat().st_size < 8_000 + 3_000 for path in archive.paths)


def test_a_second_archive_never_appends(tmp_path: Path) -> None:
    clock = ManualClock(1_800_000_000)
    first = WarcArchive(tmp_path, "w1", clock=clock)
    second = WarcArchive(tmp_path, "w1", clock=clock)
    write(first, 1, b"one")
    write(second, 2, b"two")
    first.close()
    second.close()

    assert first.paths != second.paths
    assert exchanges(first.paths[0]) == ["https://shop.example/p/1?page=1"]
    assert exchanges(second.paths[0]) == ["https://shop.example/p/2?page=1"]


def test_worker_names_cannot_leave_the_folder(tmp_path: Path) -> None:
    with WarcArchive(tmp_path, "../crawl worker/1") as archive:
        write(archive, 1, b"x")
    [path] = archive.paths
    assert path.parent == tmp_path
    assert "-.._crawl_worker_1-00000" in path.name


def torn_copy(tmp_path: Path, fraction: float) -> tuple[Path, int]:
    """An archive whose last member (a big POST request) is cut at ``fraction`` of it, and
    where that member started."""
    with WarcArchive(tmp_path / "whole", "w1") as archive:
        write(archive, 1, b"first")
        write(archive, 2, b"second", method="POST", request_body=os.urandom(30_000))
    [path] = archive.paths
    with path.open("rb") as stream:
        iterator = ArchiveIterator(stream)
        for _ in iterator:
            last = iterator.get_record_offset()
    data = path.read_bytes()
    torn = tmp_path / path.name
    torn.write_bytes(data[: last + max(1, int((len(data) - last) * fraction))])
    return torn, last


@pytest.mark.parametrize("fraction", [0.0, 0.01, 0.5, 0.999])
def test_a_torn_file_reads_up_to_its_last_whole_record(tmp_path: Path, fraction: float) -> None:
    torn, last = torn_copy(tmp_path, fraction)
    assert whole_length(torn) == last
    assert [r.rec_type for r in read_archive(torn)] == [
        "warcinfo",
        "response",
        "request",
        "response",
    ]

    # warcio alone reads a wrong last record without a word, or raises
    try:
        read = records(torn)
    except (ArchiveLoadFailed, AttributeError):
        return
    assert len(read) < 5 or len(read[-1][1]) < 30_000


def test_a_new_archive_repairs_the_torn_file_of_every_dead_worker(tmp_path: Path) -> None:
    torn, last = torn_copy(tmp_path, 0.5)
    other = tmp_path / torn.name.replace("-w1-", "-pid4242-")  # a worker named by its PID
    other.write_bytes(torn.read_bytes())

    WarcArchive(tmp_path, "pid777").close()  # a restart: another PID, another series

    for path in (torn, other):
        assert path.stat().st_size == last
        kinds = [r.rec_type for r, _ in records(path)]
        assert kinds == ["warcinfo", "response", "request", "response"]


def test_a_file_being_written_is_never_trimmed(tmp_path: Path) -> None:
    archive = WarcArchive(tmp_path, "w1")
    write(archive, 1, b"one")
    [path] = archive.paths
    with path.open("ab") as stream:
        stream.write(b"\x1f\x8b\x08 half a member")  # what a write in progress looks like
    size = path.stat().st_size

    assert trim_torn_tail(path) == 0
    WarcArchive(tmp_path, "w1")
    assert path.stat().st_size == size
    archive.close()
    assert trim_torn_tail(path) == len(b"\x1f\x8b\x08 half a member")


def test_a_folder_that_cannot_be_created_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="cannot create the WARC folder"):
        WarcArchive(tmp_path / "file" / "warc", "w1")


def test_a_read_only_folder_is_one_line(small_disk: Path) -> None:
    archive = WarcArchive(small_disk, "w1")
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    with pytest.raises(FolderUnwritable, match="read-only file system"):
        write(archive, 1, b"x")
    subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=True)


def test_a_full_disk_is_one_line_and_leaves_the_file_whole(small_disk: Path) -> None:
    archive = WarcArchive(small_disk, "w1")
    with pytest.raises(
        FolderUnwritable, match=r"^disk full while writing the WARC file .*free some"
    ) as raised:
        for number in range(10):
            write(archive, number, os.urandom(2_500))
    assert "\n" not in str(raised.value)
    archive.close()
    [path] = archive.paths
    assert whole_length(path) == path.stat().st_size
    assert len(exchanges(path)) >= 1


def test_a_write_after_a_failed_one_follows_the_last_whole_exchange(small_disk: Path) -> None:
    """A write that did not fit was cut off; the next one, which fits, goes right after
    the last whole exchange (not after a hole of zeros where the cut part was)."""
    archive = WarcArchive(small_disk, "w1")
    write(archive, 1, b"small one")
    with pytest.raises(FolderUnwritable, match="disk full"):
        write(archive, 2, os.urandom(20_000))
    write(archive, 3, b"small two")
    archive.close()
    [path] = archive.paths
    assert whole_length(path) == path.stat().st_size
    # warcio alone reads it whole (no hole of zeros), both exchanges in it
    assert exchanges(path) == [f"https://shop.example/p/{n}?page=1" for n in (1, 3)]


CHILD = textwrap.dedent(
    """
    import os, random, sys
    from pathlib import Path
    from crashsafe.effects.warc import WarcArchive

    archive = WarcArchive(Path(sys.argv[1]), "w1", max_bytes=300_000)
    page = b"<li>lamp 42.00</li>" * 500
    for number in range(100_000):
        # now and then a large body, so that some kills land inside the kernel's copy
        body = os.urandom(200_000) if number % 9 == 4 else page[: random.randrange(10_000)]
        archive.write_exchange(
            url=f"https://shop.example/p/{number}", method="GET", request_headers=[],
            request_body=None, status=200, reason="OK", response_headers=[], body=body,
        )
        print(f"wrote {number}", flush=True)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("kill_after", [3, 30, 100])
def test_a_killed_writer_leaves_readable_files(tmp_path: Path, kill_after: int) -> None:
    kill_after += random.randrange(10)  # land the kill at a different place each run
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    with reaped(child):
        seen = wait_for_line(child.stdout, f"wrote {kill_after}\n")  # type: ignore[arg-type]
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    acknowledged = {line.split()[1] for line in seen.splitlines() if line.startswith("wrote ")}
    paths = sorted(tmp_path.iterdir())

    # Only the file being written can have a torn tail (a kill inside a long write);
    # everything written before that tail is there.
    assert all(whole_length(path) == path.stat().st_size for path in paths[:-1])
    found = {
        r.rec_headers.get_header("WARC-Target-URI").rsplit("/", 1)[1]
        for path in paths
        for r in read_archive(path)
        if r.rec_type == "response"
    }
    assert acknowledged <= found

    WarcArchive(tmp_path, "w1").close()  # the worker starts again
    for path in paths:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert whole_length(path) == path.stat().st_size
        if path.stat().st_size:  # a kill between creating a file and its first write
            exchanges(path)
        for command in ("check", "index"):
            done = subprocess.run([WARCIO, command, path], capture_output=True)
            assert done.returncode == 0, done
            assert not done.stderr, done.stderr
