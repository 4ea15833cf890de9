"""A rerun never mixes answers: an item whose text changed is asked again, a checkpoint
answered with other labels, model or prompt is refused, a total spend cap outlives a
crash loop (issue #22 items 2 and 6, #23 item 6)."""

from __future__ import annotations

import json
from pathlib import Path

from crashsafe.batch.checkpoint import scan, text_hash
from crashsafe.batch.testserver import LLMServerThread
from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]
TASK = f"{ROOT / 'examples' / 'word_count.py'}:count_words"


def write_items(path: Path, texts: dict[str, str]) -> Path:
    path.write_text("".join(json.dumps({"id": k, "text": t}) + "\n" for k, t in texts.items()))
    return path


def results(checkpoint: Path) -> dict[str, object]:
    found: dict[str, object] = {}
    for line in scan(checkpoint).lines:
        found.update(zip(line["ids"], line["results"], strict=True))
    return found


def test_items_whose_text_changed_are_asked_again_and_said(tmp_path: Path) -> None:
    texts = {f"r{k}": f"review number {k}" for k in range(10)}
    src, cp = write_items(tmp_path / "in.jsonl", texts), tmp_path / "cp.jsonl"
    args = ["batch", "run", str(src), "--checkpoint", str(cp), "--task", TASK]
    assert run_cli(*args).returncode == 0
    texts["r3"] = "a much longer review than it was before"
    texts["r7"] = "short"
    write_items(src, texts)
    kept = run_cli(*args, "--keep-changed")
    assert "10 already done, 0 to do" in kept.stderr
    assert "2 items changed since answered: kept (--keep-changed)" in kept.stderr
    redone = run_cli(*args)
    assert redone.returncode == 0, redone.stderr
    assert "8 already done, 2 to do in 1 batch\n" in redone.stderr
    assert "2 items changed since answered: redone" in redone.stderr
    assert results(cp)["r3"] == {"words": 8} and results(cp)["r7"] == {"words": 1}
    report = json.loads(run_cli("batch", "report", str(cp), "--format", "json").stdout)
    rows = {r["id"]: r["result"] for r in report["rows"]}
    assert rows["r3"] == {"words": 8} and len(rows) == 10  # the newest answer, once
    assert "0 to do" in run_cli(*args).stderr  # and answered for the new text


def test_a_checkpoint_written_before_hashes_and_job_lines_resumes(tmp_path: Path) -> None:
    texts = {f"r{k}": f"text {k}" for k in range(6)}
    src, cp = write_items(tmp_path / "in.jsonl", texts), tmp_path / "old.jsonl"
    # a line as d0670a4 wrote it: no hashes, no job line
    old = {"ids": ["r0", "r1", "r2"], "results": [{"words": 2}] * 3,
           "usage": {}, "attempts": 1, "finished_at": "2026-12-01T00:00:00Z"}  # fmt: skip
    cp.write_text(json.dumps(old) + "\n")
    texts["r1"] = "changed, but its answer has no hash to compare"
    write_items(src, texts)
    again = run_cli("batch", "run", str(src), "--checkpoint", str(cp), "--task", TASK)
    assert again.returncode == 0, again.stderr
    assert "3 already done, 3 to do" in again.stderr and "changed" not in again.stderr
    assert scan(cp).jobs == [{"task": "word_count.py:count_words"}]
    # (batch run hands the task the whole row: its every field is hashed)
    assert [line["hashes"] for line in scan(cp).lines[1:]] == [
        [text_hash(f"text {n}", {"id": f"r{n}"}) for n in (3, 4, 5)]
    ]


def test_a_rerun_with_other_labels_is_refused_unless_accepted(tmp_path: Path) -> None:
    texts = {f"r{k}": f"great product {k}" for k in range(20)}
    src, cp = write_items(tmp_path / "in.jsonl", texts), tmp_path / "cp.jsonl"
    with LLMServerThread() as server:
        base = ["batch", "classify", str(src), "--checkpoint", str(cp),
                "--base-url", server.base_url, "--model", "m1"]  # fmt: skip
        assert run_cli(*base, "--labels", "spam,ham").returncode == 0
        other = run_cli(*base, "--labels", "positive,negative,neutral")
        assert other.returncode == 1 and "Traceback" not in other.stderr
        [line] = other.stderr.splitlines()
        assert "--labels spam,ham (this run: positive,negative,neutral)" in line
        assert "use a new --checkpoint" in line and "--accept-changed" in line
        model = run_cli(*base[:-1], "m2", "--labels", "spam,ham")
        assert model.returncode == 1 and "--model m1 (this run: m2)" in model.stderr
        accepted = run_cli(*base, "--labels", "positive,negative,neutral", "--accept-changed")
        assert accepted.returncode == 0, accepted.stderr
        assert "20 already done, 0 to do" in accepted.stderr
        # from now on the checkpoint's job is the accepted one
        assert run_cli(*base, "--labels", "positive,negative,neutral").returncode == 0
        assert run_cli(*base, "--labels", "spam,ham").returncode == 1
        twice = run_cli(*base, "--labels", "spam,ham,spam")
        assert twice.returncode == 1 and "spam given twice" in twice.stderr


def test_a_total_spend_cap_counts_what_earlier_runs_spent(tmp_path: Path) -> None:
    texts = {f"r{k}": f"a fine review, number {k}" for k in range(100)}
    src, cp = write_items(tmp_path / "in.jsonl", texts), tmp_path / "cp.jsonl"
    with LLMServerThread() as server:
        args = ["batch", "classify", str(src), "--checkpoint", str(cp), "--labels", "a,b",
                "--base-url", server.base_url, "--price-in", "1000", "--price-out", "1000",
                "--concurrency", "1"]  # fmt: skip
        first = run_cli(*args, "--max-spend-total", "0.5")
        assert first.returncode == 3 and "total spend cap 0.5 reached" in first.stderr
        spent = sum(line["cost"] for line in scan(cp).lines)
        assert 0 < spent <= 0.5
        # a crash loop reruns the same command: the budget is not reset
        again = run_cli(*args, "--max-spend-total", "0.5")
        assert again.returncode == 3
        assert sum(line["cost"] for line in scan(cp).lines) <= 0.5
        # --max-spend alone is per run: the same rerun spends again
        per_run = run_cli(*args, "--max-spend", "0.5")
        assert per_run.returncode == 3 and "raise --max-spend " in per_run.stderr
        assert sum(line["cost"] for line in scan(cp).lines) > spent


def test_report_joins_the_answers_back_to_the_input_rows_and_shows_the_recorded_cost(
    tmp_path: Path,
) -> None:
    src = tmp_path / "in.csv"  # no id field: ids come from the text, duplicates fold
    src.write_text("text,stars\ngreat stuff,5\nawful,1\ngreat  STUFF,4\nnot yet,3\n")
    cp = tmp_path / "cp.jsonl"
    with LLMServerThread() as server:
        ran = run_cli("batch", "classify", str(src), "--checkpoint", str(cp),
                      "--labels", "positive,negative", "--base-url", server.base_url,
                      "--price-in", "0.5", "--price-out", "1.5", "--batch-size", "1",
                      "--max-spend", "1000")  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        assert "3 items in 3 batches, 0 batches failed" in ran.stderr  # one duplicate folded
    lines = cp.read_text().splitlines()
    cp.write_text("\n".join(lines[:-1]) + "\n")  # as if the last answer was never written
    joined = run_cli("batch", "report", str(cp), "--input", str(src))
    assert joined.returncode == 0, joined.stderr
    rows = [json.loads(x) for x in joined.stdout.splitlines()]
    assert [r["stars"] for r in rows] == ["5", "1", "4", "3"]  # every row, in input order
    assert rows[0]["label"] == rows[2]["label"]  # a duplicate gets its twin's answer
    assert "label" not in rows[3]  # answered in the line cut off: no answer yet
    assert "wrote 4 input rows, 1 row without an answer yet" in joined.stderr
    as_csv = run_cli("batch", "report", str(cp), "--input", str(src), "--format", "csv")
    assert as_csv.stdout.splitlines()[0] == "text,stars,label"
    table = run_cli("batch", "report", str(cp)).stdout
    assert "cost (as recorded)" in table
    [line] = [x for x in table.splitlines() if "cost (as recorded)" in x]
    spent = sum(json.loads(x).get("cost", 0) for x in cp.read_text().splitlines())
    assert f"{spent:.4f}" in line


def test_an_empty_input_says_so(tmp_path: Path) -> None:
    src = tmp_path / "empty.jsonl"
    src.write_text("")
    result = run_cli("batch", "run", str(src), "--checkpoint", str(tmp_path / "cp.jsonl"),
                     "--task", TASK)  # fmt: skip
    assert result.returncode == 0 and f"{src} holds no items: nothing to do." in result.stderr
    assert not (tmp_path / "cp.jsonl").exists() or not (tmp_path / "cp.jsonl").read_text()


def test_a_file_saved_again_with_other_whitespace_is_no_change(tmp_path: Path) -> None:
    # (an adversary's find: CRLF line ends, or a trailing space, re-paid every item)
    src, cp = tmp_path / "in.txt", tmp_path / "cp.jsonl"
    src.write_text("".join(f"review {n}\n" for n in range(10)))
    args = ["batch", "run", str(src), "--checkpoint", str(cp), "--task", TASK]
    assert run_cli(*args).returncode == 0
    src.write_bytes("".join(f"review  {n} \r\n" for n in range(10)).encode())
    again = run_cli(*args)
    assert "10 already done, 0 to do" in again.stderr and "changed" not in again.stderr


def test_a_task_handed_the_whole_row_is_asked_again_when_any_field_changed(
    tmp_path: Path,
) -> None:
    task = tmp_path / "stars.py"
    task.write_text("def run(items):\n    return [{'stars': i.data['stars']} for i in items]\n")
    src, cp = tmp_path / "in.jsonl", tmp_path / "cp.jsonl"
    rows = [{"id": str(n), "text": "same text", "stars": 1} for n in range(4)]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["batch", "run", str(src), "--checkpoint", str(cp), "--task", f"{task}:run"]
    assert run_cli(*args).returncode == 0
    rows[2]["stars"] = 5
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    again = run_cli(*args)
    assert "1 item changed since answered: redone" in again.stderr, again.stderr
    assert results(cp)["2"] == {"stars": 5}


def test_a_damaged_job_line_does_not_turn_the_check_off(tmp_path: Path) -> None:
    texts = {f"r{k}": f"great product {k}" for k in range(10)}
    src, cp = write_items(tmp_path / "in.jsonl", texts), tmp_path / "cp.jsonl"
    with LLMServerThread() as server:
        base = ["batch", "classify", str(src), "--checkpoint", str(cp),
                "--base-url", server.base_url]  # fmt: skip
        assert run_cli(*base, "--labels", "positive,negative").returncode == 0
        cp.write_text(cp.read_text().replace('{"job"', '{"jo"', 1))  # damaged
        other = run_cli(*base, "--labels", "good,bad")
        assert other.returncode == 1 and "job line" in other.stderr
        assert "missing or damaged" in other.stderr and "--accept-changed" in other.stderr
        assert "Traceback" not in other.stderr
        # a classify run logs no line per HTTP request of the client it uses
        assert "HTTP Request" not in other.stderr
