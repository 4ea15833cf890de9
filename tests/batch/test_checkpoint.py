"""The checkpoint file: append-only, fsync'd, tolerant of torn and corrupt lines, locked."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crashsafe.batch.checkpoint import Checkpoint, encode_line, scan
from crashsafe.errors import WorkerBusyError


def line(ids: list[str], label: str = "x") -> dict[str, object]:
    return {"ids": ids, "results": [{"label": label}] * len(ids), "usage": {}}


def test_torn_last_line_is_ignored_and_not_glued_to(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(line(["a", "b"])) + "\n" + '{"ids": ["c"], "resu')
    with Checkpoint(path) as cp:
        assert cp.found.torn_bytes == 20 and cp.found.done_ids() == {"a", "b"}
        cp.append([line(["c"])])
    found = scan(path)
    assert found.done_ids() == {"a", "b", "c"}
    assert found.corrupt == 0  # the torn fragment was cut off, not kept as a corrupt line
    assert not found.torn_bytes


def test_a_whole_last_line_without_its_newline_is_kept(tmp_path: Path) -> None:
    # A kill (or a full disk) between a line's last byte and its newline: the answers are
    # whole, and were cut, unseen, and paid for again.
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(line(["a", "b"])) + "\n" + json.dumps(line(["c"])))
    with Checkpoint(path) as cp:
        assert cp.found.unterminated and not cp.found.torn_bytes
        assert cp.found.done_ids() == {"a", "b", "c"}
        cp.append([line(["d"])])
    found = scan(path)
    assert found.done_ids() == {"a", "b", "c", "d"} and found.corrupt == 0
    assert path.read_text().endswith("\n") and not found.unterminated


def test_corrupt_middle_line_is_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    good1, good2 = json.dumps(line(["a"])), json.dumps(line(["c"]))
    bad_shape = json.dumps({"ids": ["x", "y"], "results": [1]})
    path.write_text(f"{good1}\nnot json at all\n{bad_shape}\n{good2}\n")
    found = scan(path)
    assert found.done_ids() == {"a", "c"} and found.corrupt == 2


def test_appends_never_rewrite(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    with Checkpoint(path) as cp:
        cp.append([line(["a"])])
    before = path.read_bytes()
    with Checkpoint(path) as cp:
        cp.append([line(["b"]), line(["c"])])
    after = path.read_bytes()
    assert after.startswith(before) and after.count(b"\n") == 3


def test_a_second_run_on_the_same_checkpoint_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    with Checkpoint(path), pytest.raises(WorkerBusyError, match="in use by pid"):
        Checkpoint(path).open()
    with Checkpoint(path):  # free again once the first is closed
        pass


ids = st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=5, unique=True)
results = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        ids.flatmap(
            lambda i: st.tuples(st.just(i), st.lists(results, min_size=len(i), max_size=len(i)))
        ),
        max_size=6,
    )
)
def test_writer_and_reader_round_trip(tmp_path: Path, batches: list) -> None:  # type: ignore[type-arg]
    path = tmp_path / "rt.jsonl"
    path.unlink(missing_ok=True)
    written = [{"ids": i, "results": r, "usage": {"calls": 1}} for i, r in batches]
    with Checkpoint(path) as cp:
        for entry in written:
            cp.append([entry])
    assert scan(path).lines == written


def test_what_cannot_be_read_back_exactly_is_refused() -> None:
    assert encode_line({"ids": ["a"], "results": [2**63 - 1]})
    with pytest.raises(ValueError, match="64 bits"):
        encode_line({"ids": ["a"], "results": [2**70]})
    with pytest.raises(ValueError):
        encode_line({"ids": ["a"], "results": [float("inf")]})
    with pytest.raises(TypeError):
        encode_line({"ids": ["a"], "results": [object()]})


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_the_lock_follows_the_file_not_its_name(tmp_path: Path, link: str) -> None:
    path = tmp_path / "results.jsonl"
    other = tmp_path / "other.jsonl"
    with Checkpoint(path):
        if link == "symlink":
            other.symlink_to(path)
        else:
            os.link(path, other)
        with pytest.raises(WorkerBusyError, match="is in use by"):
            Checkpoint(other).open()
    with Checkpoint(other):  # free again once the first run ends
        pass


def test_a_line_of_the_right_shape_with_wrong_types_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    good = '{"ids": ["a"], "results": [1]}'
    wrong = ['{"ids": [["x"]], "results": [1]}', '{"ids": [1], "results": [2]}',
             '{"ids": ["u"], "results": [3], "usage": [1]}']  # fmt: skip
    path.write_text("\n".join([good, wrong[0], good, wrong[1], wrong[2]]) + "\n")
    found = scan(path)
    assert found.corrupt == 3 and found.corrupt_where() == "lines 2, 4, 5"
    assert found.done_ids() == {"a"}
