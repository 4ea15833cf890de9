"""A batch job's rate and ETA on the console, from its checkpoint (clock injected)."""

from __future__ import annotations

import json
from pathlib import Path

from crashsafe.console.batches import BatchWatch


def line(first: int, n: int, total: int) -> str:
    ids = [f"i{k}" for k in range(first, first + n)]
    return json.dumps({"ids": ids, "results": [{"label": "ok"}] * n, "hashes": ["h"] * n,
                       "usage": {"prompt_tokens": 10}, "input_items": total}) + "\n"  # fmt: skip


def test_done_of_total_rate_and_eta(tmp_path: Path) -> None:
    checkpoint = tmp_path / "results.jsonl"
    checkpoint.write_text(line(0, 10, 100))
    now = [1_000_000.0]
    watch = BatchWatch(checkpoint, clock=lambda: now[0])
    first = watch.view()
    assert (first["items"], first["total"], first["eta"]) == (10, 100, None)  # no rate yet
    with checkpoint.open("a") as out:
        out.write(line(10, 20, 100))
    now[0] += 10  # 20 more items in 10 s: 2 a second, 70 left: 35 s to go
    second = watch.view()
    assert (second["items"], second["items_per_second"]) == (30, 2.0)
    assert second["eta"] == "1970-01-12T13:47:25+00:00"  # 1_000_000 + 10 + 35 s


def test_a_checkpoint_from_before_input_items_has_no_total(tmp_path: Path) -> None:
    checkpoint = tmp_path / "old.jsonl"
    checkpoint.write_text(json.dumps({"ids": ["a"], "results": [1], "usage": {}}) + "\n")
    view = BatchWatch(checkpoint).view()
    assert view["items"] == 1 and view["total"] is None and view["eta"] is None


def test_a_file_that_is_not_a_checkpoint_says_so(tmp_path: Path) -> None:
    garbage = tmp_path / "bad.jsonl"
    garbage.write_text("{garbage\n")
    view = BatchWatch(garbage).view()
    assert view["items"] == 0 and view["corrupt_lines"] == 1  # the page says "damaged"
