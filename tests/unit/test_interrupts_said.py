"""The line a first signal prints names what sent it (interrupts.stopping_line)."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from crashsafe import interrupts


@pytest.fixture(autouse=True)
def as_before() -> Iterator[None]:
    yield
    interrupts._last[0] = signal.SIGINT
    interrupts._parent_gone.clear()


def test_a_ctrl_c_a_sigterm_and_a_parent_gone_are_each_said_as_what_they_are() -> None:
    doing = "finishing 3 page(s) in flight"
    interrupts._last[0] = signal.SIGINT
    assert interrupts.stopping_line(doing) == (
        "Stopping: finishing 3 page(s) in flight (Ctrl-C again to abort at once)..."
    )
    interrupts._last[0] = signal.SIGTERM
    assert interrupts.stopping_line(doing) == (
        "Stopping (SIGTERM): finishing 3 page(s) in flight (a second signal aborts at once)..."
    )
    interrupts.parent_gone()
    line = interrupts.stopping_line(doing)
    assert line.startswith("Stopping: the command that started this worker is gone;")
    assert "Ctrl-C" not in line
