"""Lint, format and strict typing are part of the test suite, so CI enforces them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed: pip install -e '.[dev]'")
    return found


@pytest.mark.parametrize(
    "args",
    [
        ["ruff", "check", "src", "tests", "benchmarks", "examples"],
        ["ruff", "format", "--check", "src", "tests", "benchmarks", "examples"],
        ["mypy"],
    ],
    ids=["ruff-check", "ruff-format", "mypy-strict"],
)
def test_code_quality(args: list[str]) -> None:
    result = subprocess.run(
        [tool(args[0]), *args[1:]], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr
