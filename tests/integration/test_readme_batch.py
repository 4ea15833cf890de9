"""The README's batch example runs as written (#11 item 14): the bundled LLM stand-in on a
free port instead of 8800, everything else word for word, offline."""

from __future__ import annotations

import contextlib
import re
import shlex
import subprocess
from pathlib import Path

from tests.helpers import CLI, cli_env, reaped, wait_for

ROOT = Path(__file__).resolve().parents[2]
PORT = "8800"  # the README's port, replaced by the one the stand-in is given


def readme_commands(heading: str) -> list[list[str]]:
    """The words of each command of the ``sh`` block under ``## heading``."""
    section = (ROOT / "README.md").read_text().split(f"\n## {heading}\n", 1)[1]
    [block] = re.findall(r"```sh\n(.*?)```", section.split("\n## ", 1)[0], re.S)
    return [shlex.split(line, comments=True) for line in block.replace("\\\n", " ").splitlines()]


def bound_port(log: Path) -> str | None:
    found = re.search(r"127\.0\.0\.1:(\d+)/v1", log.read_text())
    return found.group(1) if found else None


def start_server(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    """Start ``crashsafe *args`` with stderr in ``log``."""
    with log.open("w") as out:
        return subprocess.Popen([*CLI, *args], cwd=log.parent, stderr=out, env=cli_env())


def test_the_readme_batch_example_runs_as_written(tmp_path: Path) -> None:
    commands = readme_commands("30 seconds: a batch job")
    assert [words[:3] for words in commands] == [
        [".venv/bin/crashsafe", "batch", "demo"],
        [".venv/bin/crashsafe", "batch", "llm-server"],
        [".venv/bin/crashsafe", "batch", "classify"],
        [".venv/bin/crashsafe", "batch", "report"],
    ]
    (tmp_path / "src").symlink_to(ROOT / "src")  # the README runs from the repository
    log = tmp_path / "llm-server.log"
    port = PORT
    with contextlib.ExitStack() as started:
        for words in commands:
            args = [w.replace(f"127.0.0.1:{PORT}", f"127.0.0.1:{port}") for w in words[1:]]
            if args[-1] == "&":  # the stand-in, in the background, on a free port
                args = [("0" if w == PORT else w) for w in args[:-1]]
                server = started.enter_context(reaped(start_server(args, log)))
                wait_for(lambda s=server: bound_port(log) is not None or s.poll() is not None)
                port = bound_port(log) or ""
                assert port, log.read_text()
                continue
            result = subprocess.run(
                [*CLI, *args], cwd=tmp_path, capture_output=True, text=True, timeout=180,
                env=cli_env(),
            )  # fmt: skip
            assert result.returncode == 0, (words, result.stdout, result.stderr)
        assert "200" in result.stdout and "items (one row per id)" in result.stdout
