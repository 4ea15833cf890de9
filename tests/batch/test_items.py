from __future__ import annotations

from pathlib import Path

import pytest

from crashsafe.batch.items import every_item, parse_shard, read_items
from crashsafe.errors import ConfigError
from crashsafe.ids import stable_text_id


def test_jsonl_ids_from_field_or_text_and_duplicates_folded(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text(
        '{"id": "r1", "text": "Good"}\n'
        '{"text": "Great  kettle"}\n'
        "\n"
        '{"text": "great kettle "}\n'
        '{"id": "r1", "text": "Good"}\n'
    )
    inputs = read_items(src)
    assert [i.id for i in inputs.items] == ["r1", stable_text_id("Great kettle")]
    assert inputs.duplicates == 2
    by_position = read_items(src, key_by="position")
    assert len(by_position.items) == 4 and by_position.duplicates == 0


def test_one_id_with_two_texts_is_refused_naming_both_lines(tmp_path: Path) -> None:
    # Folded, the second text got the first one's answer (found by a review).
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": "a", "text": "I love it"}\n{"id": "b", "text": "ok"}\n'
                   '{"id": "a", "text": "terrible, refund please"}\n')  # fmt: skip
    with pytest.raises(
        ConfigError, match=r"in.jsonl:3: id 'a' again, with another text than on line 1"
    ):
        read_items(src)
    src.write_text('{"id": 1, "text": "one"}\n{"id": "1", "text": "two"}\n')  # one id, "1"
    with pytest.raises(ConfigError, match="id '1' again"):
        read_items(src)
    assert len(read_items(src, key_by="position").items) == 2
    # the same text but for its whitespace (what the prompt sends): one item
    src.write_text('{"id": "a", "text": "I love  it"}\n{"id": "a", "text": " I love it\\r\\n"}\n')
    assert len(read_items(src).items) == 1


@pytest.mark.parametrize("value", ["null", "[1, 2]", '{"a": 1}', "true"])
def test_a_text_that_is_not_text_is_refused(value: str, tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text(f'{{"id": "a", "text": "fine"}}\n{{"id": "b", "text": {value}}}\n')
    with pytest.raises(ConfigError, match=r"in.jsonl:2: field 'text' holds .*, not text"):
        read_items(src)
    assert [i.id for i in every_item(src)] == ["a", "b"]  # (a report joins rows back)


@pytest.mark.parametrize("suffix", [".txt", ".csv"])
def test_text_or_csv_that_is_not_utf8_is_one_line(suffix: str, tmp_path: Path) -> None:
    src = tmp_path / f"in{suffix}"
    src.write_bytes(b"text\nfine\ncaf\xe9 au lait\n")
    with pytest.raises(ConfigError, match=r"in\.(txt|csv):3: not UTF-8 .* at byte 13\).*iconv"):
        read_items(src)


def test_csv_and_text(tmp_path: Path) -> None:
    csv_path = tmp_path / "in.csv"
    csv_path.write_text("review,stars\nnice,5\nbad,1\n")
    items = read_items(csv_path, text_field="review").items
    assert [i.text for i in items] == ["nice", "bad"] and items[0].data["stars"] == "5"
    txt = tmp_path / "in.txt"
    txt.write_text("one\n\ntwo\n")
    assert [i.text for i in read_items(txt).items] == ["one", "two"]


def test_clear_errors(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text('{"body": "x"}\n')
    with pytest.raises(ConfigError, match=r"no field 'text'.*--text-field.*body"):
        read_items(src)
    src.write_text("{broken\n")
    with pytest.raises(ConfigError, match=r"in.jsonl:1: not valid JSON"):
        read_items(src)
    with pytest.raises(ConfigError, match="does not exist"):
        read_items(tmp_path / "missing.jsonl")
    with pytest.raises(ConfigError, match="K/N"):
        parse_shard("half")


def test_shards_partition_the_ids(tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text("\n".join(f"review {n}" for n in range(300)))
    everything = {i.id for i in read_items(src).items}
    shards = [{i.id for i in read_items(src, shard=(k, 3)).items} for k in (1, 2, 3)]
    assert set().union(*shards) == everything
    assert sum(len(s) for s in shards) == len(everything)
    assert all(60 < len(s) < 140 for s in shards)
