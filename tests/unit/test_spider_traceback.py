"""`crashsafe parse`'s traceback (cli/try_cmds.py spider_traceback): from the spider's
first frame on, also for a spider installed in a site-packages that lies under the
standard library's folder (any interpreter that is not a venv)."""

from __future__ import annotations

import importlib.util
import sysconfig
from pathlib import Path
from typing import Any

import pytest

SPIDER = "def parse(page):\n    return int('12,50')\n"
# What calls the spider and catches its error, as the event loop does: stdlib's frames.
RUNNER = """
from crashsafe.cli.try_cmds import spider_traceback


def run(parse):
    try:
        parse(None)
    except ValueError:
        return spider_traceback()
"""


def load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def test_an_installed_spiders_frames_are_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stdlib = tmp_path / "lib" / "python3"
    site = stdlib / "site-packages"
    site.mkdir(parents=True)
    module = site / "shopspiders.py"
    module.write_text(SPIDER)
    paths = {**sysconfig.get_paths(), "stdlib": str(stdlib), "purelib": str(site),
             "platlib": str(site)}  # fmt: skip
    monkeypatch.setattr(sysconfig, "get_paths", lambda: paths)
    (stdlib / "runner.py").write_text(RUNNER)
    spiders, runner = load(module), load(stdlib / "runner.py")
    shown = runner.run(spiders.parse)
    assert shown.startswith("Traceback (the spider's frames):\n")
    assert f'File "{module}", line 2, in parse' in shown
    assert shown.endswith("ValueError: invalid literal for int() with base 10: '12,50'\n")
