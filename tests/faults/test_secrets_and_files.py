"""Secrets stay secret and files stay private: a planted API key is found in no file the
job wrote nor in its output; credentials in URLs are never stored; lock files are not
opened through links; what a job creates is 0600."""

from __future__ import annotations

import csv
import io
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from aiohttp import web

from crashsafe.batch.checkpoint import Checkpoint
from crashsafe.batch.llm import Classifier, redact
from crashsafe.demo.server import AppThread
from crashsafe.demo.shop import ShopThread
from crashsafe.errors import ConfigError
from crashsafe.store import NewUrl, PageOutcome, RecordRow, open_store
from tests.helpers import CLI, cli_env, run_cli

KEY = "sk-planted-0123456789abcdef"


async def echo_authorization(request: web.Request) -> web.Response:
    """An endpoint that refuses the key and echoes the request's headers (some do)."""
    body = {"error": {"message": f"bad key; you sent {request.headers.get('Authorization')}"}}
    return web.json_response(body, status=401)


def files_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def test_a_planted_api_key_is_in_no_file_the_job_wrote(tmp_path: Path) -> None:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", echo_authorization)
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": f"review {n}"}) + "\n" for n in range(3)))
    env = cli_env() | {"OPENAI_API_KEY": KEY}
    with AppThread(app) as server:
        args = ["batch", "classify", str(src), "--checkpoint", str(tmp_path / "out.jsonl"),
                "--labels", "a,b", "--base-url", f"{server.url}/v1",
                "--max-attempts", "1"]  # fmt: skip
        done = subprocess.run(
            [*CLI, *args], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
        )
    written = files_under(tmp_path)
    for path in written:
        assert KEY not in path.read_text(errors="replace"), path
    assert KEY not in done.stdout + done.stderr
    # the job stops at once, saying what the endpoint said, with the key taken out
    assert done.returncode == 1 and "check OPENAI_API_KEY" in done.stderr
    assert "[redacted]" in done.stderr


def test_redact_removes_the_key_and_any_bearer_token() -> None:
    text = redact(f"401: got 'Authorization: Bearer {KEY}' and Bearer other-token", [KEY])
    assert KEY not in text and "other-token" not in text
    assert len(redact("x" * 10_000, [KEY])) <= 303


def test_the_api_key_never_crosses_the_network_in_clear_text() -> None:
    with pytest.raises(ConfigError, match="plain http"):
        Classifier(labels=["a"], base_url="http://llm.example/v1", model="m", api_key=KEY)
    for ok in ("https://llm.example/v1", "http://127.0.0.1:9/v1", "http://localhost:9/v1"):
        Classifier(labels=["a"], base_url=ok, model="m", api_key=KEY)
    Classifier(labels=["a"], base_url="http://llm.example/v1", model="m", api_key="not-set")


def test_credentials_in_a_start_url_are_refused_and_stored_nowhere(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    with ShopThread() as site:
        start = site.url.replace("http://", "http://user:hunter2secret@") + "/list/0"
        result = run_cli("crawl", "crashsafe.demo.spider:DemoShop", "--db", f"sqlite:///{db}",
                         "--start-url", start, "--no-progress")  # fmt: skip
    assert result.returncode != 0 and "credentials" in result.stderr
    assert "Traceback" not in result.stderr
    for path in files_under(tmp_path):
        assert b"hunter2secret" not in path.read_bytes(), path


def test_a_lock_file_planted_as_a_link_is_refused(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    checkpoint = tmp_path / "results.jsonl"
    (tmp_path / "results.jsonl.lock").symlink_to(victim)
    with pytest.raises(ConfigError, match="symbolic link"):
        Checkpoint(checkpoint).open()
    assert victim.read_text() == "precious\n"


def test_what_a_job_creates_is_private(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        db = tmp_path / "c.db"
        with ShopThread() as site:
            result = run_cli("crawl", "crashsafe.demo.spider:DemoShop", "--db", f"sqlite:///{db}",
                             "--start-url", f"{site.url}/list/0", "--no-progress",
                             "--set", "max_depth=0")  # fmt: skip
        assert result.returncode == 0, result.stderr
        out = tmp_path / "export.csv"
        assert run_cli("export", "--db", f"sqlite:///{db}", "-o", str(out)).returncode == 0
        with Checkpoint(tmp_path / "r.jsonl"):
            pass
    finally:
        os.umask(old)
    for path in [db, out, tmp_path / "r.jsonl", tmp_path / "r.jsonl.lock"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    for path in files_under(tmp_path):  # -wal, -shm, the liveness locks, whatever is left
        assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, path


def test_the_files_folder_and_every_level_under_it_are_private(tmp_path: Path) -> None:
    # (#24 item 5: files/ and files/ab/ were 0755 under umask 022: Path.mkdir(parents=True)
    # gives the parents it creates the umask's mode)
    from crashsafe.effects.files import FileStore

    old = os.umask(0o022)
    try:
        store = FileStore(tmp_path / "deep" / "files")
        store.put(b"a picture")
    finally:
        os.umask(old)
    folder = tmp_path / "deep"
    created = [folder, *(p for p in folder.rglob("*") if p.is_dir())]
    assert len(created) >= 4  # deep, files, ab, cd
    for path in created:
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path


def test_csv_cells_that_a_spreadsheet_would_run_are_neutralised() -> None:
    from crashsafe.text import csv_cell, printable

    row = [csv_cell(v) for v in ('=HYPERLINK("http://x")', "+1", "-2", "@SUM(A1)", "ok", -3)]
    buffer = io.StringIO()
    csv.writer(buffer).writerow(row)
    assert buffer.getvalue().startswith("\"'=HYPERLINK")
    assert row[1:] == ["'+1", "'-2", "'@SUM(A1)", "ok", -3]
    assert printable("redirect to \x1b]8;;http://evil\x07x\x1b[2J") == (
        "redirect to \\x1b]8;;http://evil\\x07x\\x1b[2J"
    )


def test_an_export_that_fails_half_way_leaves_the_previous_file_whole(tmp_path: Path) -> None:
    from crashsafe.files import atomic_text

    target = tmp_path / "shop.csv"
    target.write_text("the previous export\n")
    with pytest.raises(RuntimeError), atomic_text(target) as out:
        out.write("half of a new one")
        raise RuntimeError("killed half-way")
    assert target.read_text() == "the previous export\n"
    assert [p.name for p in tmp_path.iterdir()] == ["shop.csv"]  # no temporary file left
    with atomic_text(target) as out:
        out.write("the new export\n")
    assert target.read_text() == "the new export\n"


def test_an_export_through_a_link_replaces_the_file_and_one_to_a_fifo_writes_in_place(
    tmp_path: Path,
) -> None:
    """-o names a link: the file it names gets the export, the link stays a link. -o
    names a FIFO (or /dev/stdout, a device): the reader at its end gets the export, and
    no file takes the FIFO's place (as root, once, a device node was replaced)."""
    import threading

    from crashsafe.files import atomic_text

    real, link = tmp_path / "real.jsonl", tmp_path / "link.jsonl"
    real.write_text("old\n")
    link.symlink_to(real)
    with atomic_text(link) as out:
        out.write("new\n")
    assert link.is_symlink() and real.read_text() == "new\n"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    with atomic_text(fifo) as out:
        out.write("through the pipe\n")
    reader.join(30)
    assert got == ["through the pipe\n"] and stat.S_ISFIFO(fifo.lstat().st_mode)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
@pytest.mark.parametrize("command", ["status", "export", "history"])
def test_stdout_on_a_full_disk_is_one_line_and_a_failure(tmp_path: Path, command: str) -> None:
    """`crashsafe status > file` on a full disk: exit 1 and one line saying so, not a
    traceback, nor (as click's probe of the stream swallowed the first error) exit 0
    with nothing written."""
    from tests.helpers import CLI, cli_env

    db = f"sqlite:///{tmp_path / 'c.db'}"
    store = open_store(db)
    store.enqueue("c", [NewUrl("http://a/1")])
    [lease] = store.lease("c", store.register_worker(), 1, 60)
    store.commit_pages("c", [PageOutcome(lease, "done", 200, records=[
        RecordRow.build(id="k", source="s", key="k", url=None, data={"a": 1})])])  # fmt: skip
    store.close()
    with open("/dev/full", "w") as full:
        done = subprocess.run([*CLI, command, "--db", db], stdout=full, stderr=subprocess.PIPE,
                              text=True, env=cli_env(), timeout=120)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [
        "Error: cannot write the output: the disk it goes to is full; free some space and "
        "run the same command again"
    ]


def test_a_lock_path_of_the_wrong_kind_is_a_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "results.jsonl.lock").mkdir()  # a folder where the lock file goes
    with pytest.raises(ConfigError, match="is a folder where crashsafe needs a file"):
        Checkpoint(tmp_path / "results.jsonl").open()
    db = tmp_path / "c.db"
    (tmp_path / "c.db-workers").write_text("a file where the lock folder goes")
    result = run_cli("crawl", "crashsafe.demo.spider:DemoShop", "--db", f"sqlite:///{db}",
                     "--start-url", "http://127.0.0.1:9/", "--no-progress")  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "is a file where crashsafe needs a folder" in result.stderr
