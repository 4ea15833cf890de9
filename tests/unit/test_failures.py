"""The dead letter grouped by error pattern: values put aside, statuses and names kept."""

from __future__ import annotations

import pytest

from crashsafe.failures import error_pattern, group_failures, in_group, short_error
from crashsafe.store import FailedUrl

TRACE = 'Traceback (most recent call last):\n  File "spider.py", line 9\n'


def failure(url: str, error: str | None, status: int | None = None) -> FailedUrl:
    return FailedUrl("c", url, 3, status, error, 0.0)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (TRACE + "ValueError: could not convert string to float: '12,99'",
         TRACE + "ValueError: could not convert string to float: 'n/a'"),
        ("HTTP 500 (gave up after 3 attempts)", "HTTP 500 (gave up after 5 attempts)"),
        ("response too large (more than 10000 bytes: 50000)",
         "response too large (more than 10000 bytes: 73311)"),
        ("redirected to http://a.example/x?id=1, outside the allow-list",
         "redirected to https://b.example/y, outside the allow-list"),
        ("no such order 3f2a9c0e-41d2-4b6e-9a1f-0c2d3e4f5a6b", "no such order 9a1f0c2d3e4f"),
        ("HTTP 503; body: try again (gave up after 3 attempts)",
         "HTTP 503; body: later (gave up after 3 attempts)"),
    ],
)  # fmt: skip
def test_messages_that_differ_in_their_values_are_one_group(one: str, other: str) -> None:
    [group] = group_failures([failure("http://a/1", one), failure("http://a/2", other)])
    assert len(group.failures) == 2
    if short_error(one) != short_error(other):  # the label shows where they differ
        assert group.label == error_pattern(short_error(one))
    assert in_group(failure("http://a/3", one), group.label)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("HTTP 500 (gave up after 3 attempts)", "HTTP 404 (gave up after 3 attempts)"),
        (TRACE + "KeyError: 'price'", TRACE + "KeyError: 'name'"),
        ("TypeError: bad", "ValueError: bad"),
        ("LookupError: unknown encoding: 'utf-8'", "LookupError: unknown encoding: 'latin9'"),
    ],
)
def test_statuses_names_and_kinds_keep_groups_apart(one: str, other: str) -> None:
    groups = group_failures([failure("http://a/1", one), failure("http://a/2", other)])
    assert [len(g.failures) for g in groups] == [1, 1]
    assert [g.label for g in groups] == [short_error(one), short_error(other)]


def test_a_group_that_says_one_thing_shows_it_and_the_largest_comes_first() -> None:
    rows = [failure("http://a/0", "HTTP 403 (gave up after 3 attempts)")]
    rows += [failure(f"http://a/{n}", f"{TRACE}IndexError: row {n}") for n in range(1, 4)]
    rows += [failure("http://a/9", None)]
    groups = group_failures(rows)
    assert [(g.label, len(g.failures)) for g in groups] == [
        ("IndexError: row N", 3),
        ("HTTP 403 (gave up after 3 attempts)", 1),  # one message: shown as it is
        ("-", 1),
    ]
    assert groups[0].failures[0].url == "http://a/1"  # (the example: the first seen)
    assert in_group(rows[2], "IndexError: row N") and not in_group(rows[0], "IndexError: row N")


def test_a_pattern_is_its_own_pattern() -> None:
    for message in ("a 'x y' b 12 http://h/1 deadbeef99", "HTTP 500 at 3.5 s", "'…' N <url>"):
        once = error_pattern(message)
        assert error_pattern(once) == once
