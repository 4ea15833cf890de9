"""The dead letter grouped by error pattern: values put aside, statuses and names kept,
and a group found again by its key whatever it shows."""

from __future__ import annotations

import pytest

from crashsafe.failures import LINE_MAX, error_key, error_pattern, group_failures, short_error
from crashsafe.store import FailedUrl

TRACE = 'Traceback (most recent call last):\n  File "spider.py", line 9\n'
PYDANTIC = (
    "pydantic_core._pydantic_core.ValidationError: 1 validation error for Item\n{field}\n"
    "  {wrong} [type={kind}, input_value={value}, input_type=str]\n"
    "    For further information visit https://errors.pydantic.dev/2.14/v/{kind}"
)
NOT_A_NUMBER = "Input should be a valid number, unable to parse string as a number"


def pydantic(field: str, kind: str, value: str, wrong: str = NOT_A_NUMBER) -> str:
    return TRACE + PYDANTIC.format(field=field, kind=kind, value=value, wrong=wrong)


def failure(url: str, error: str | None, status: int | None = None) -> FailedUrl:
    return FailedUrl("c", url, 3, status, error, 0.0)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (TRACE + "ValueError: could not convert string to float: '12,99'",
         TRACE + "ValueError: could not convert string to float: 'TBD'"),
        ("HTTP 500 (gave up after 3 attempts)", "HTTP 500 (gave up after 5 attempts)"),
        ("response too large: over max_response_bytes=5000000 (6000000 bytes)",
         "response too large: over max_response_bytes=5000000 (12000000 bytes)"),
        ("redirect to a URL that cannot be crawled: 'http://a\\\\b/' (backslash)",
         "redirect to a URL that cannot be crawled: 'http://c\\\\d/' (backslash)"),
        ("no such order 3f2a9c0e-41d2-4b6e-9a1f-0c2d3e4f5a6b", "no such order 9a1f0c2d3e4f"),
        ("HTTP 503; body: try again (gave up after 3 attempts)",
         "HTTP 503; body: later (gave up after 3 attempts)"),
        ("UnicodeDecodeError: 'utf-8' codec can't decode byte 0xe9 in position 12",
         "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xfc in position 7"),
        ("connection refused (127.0.0.1:8001)", "connection refused (127.0.0.1:8002)"),
        ("more than 3 redirects (last: http://a/login?next=/p/1)",
         "more than 3 redirects (last: http://a/login?next=/p/2)"),
        ("timeout after 2.5s", "timeout after 10s"),
        ("ValueError: bad value -3 on 2024-01-05", "ValueError: bad value 7 on 2024-02-11"),
        ("ValueError: b'12,99'", "ValueError: b'TBD'"),
        (pydantic("price", "float_parsing", "'12,99'"),
         pydantic("price", "float_parsing", "'TBD'")),
    ],
)  # fmt: skip
def test_messages_that_differ_in_their_values_are_one_group(one: str, other: str) -> None:
    rows = [failure("http://a/1", one), failure("http://a/2", other)]
    [group] = group_failures(rows)
    assert len(group.failures) == 2
    same = short_error(one) == short_error(other)
    assert group.label == (short_error(one) if same else group.key)
    assert error_key(one) == error_key(other) == group.key


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("HTTP 500 (gave up after 3 attempts)", "HTTP 404 (gave up after 3 attempts)"),
        (TRACE + "KeyError: 'price'", TRACE + "KeyError: 'name'"),
        (TRACE + "KeyError: 'état'", TRACE + "KeyError: 'prix_réduit'"),
        ("TypeError: bad", "ValueError: bad"),
        ("LookupError: unknown encoding: 'utf-8'", "LookupError: unknown encoding: 'utf-16'"),
        ("ValueError: can't parse 'x'", "ValueError: can't read 'x'"),
        ("ValueError: no 'utf-8' in utf-8", "ValueError: no 'utf-8' in utf-16"),
        # pydantic: the field and what is wrong with it (the last line is a URL)
        (pydantic("price", "float_parsing", "'x'"), pydantic("name", "float_parsing", "'x'")),
        (pydantic("price", "float_parsing", "'x'"),
         pydantic("price", "missing", "{'a': 1}", wrong="Field required")),
        # a note (PEP 678) after the exception line is not the exception
        (TRACE + "KeyError: 'price'\nwhile parsing a product page",
         TRACE + "ValueError: bad\nwhile parsing a product page"),
        # a message's last line that only points to a URL
        (TRACE + "httpx.HTTPStatusError: Client error '404 Not Found' for url 'http://a/1'\n"
                 "For more information check: https://developer.mozilla.org/404",
         TRACE + "httpx.HTTPStatusError: Server error '500 Internal Server Error' for url "
                 "'http://a/2'\nFor more information check: https://developer.mozilla.org/500"),
        (TRACE + "sqlalchemy.exc.IntegrityError: (sqlite3.IntegrityError) UNIQUE failed\n"
                 "(Background on this error at: https://sqlalche.me/e/20/gkpj)",
         TRACE + "sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) locked\n"
                 "(Background on this error at: https://sqlalche.me/e/20/e3q8)"),
    ],
)  # fmt: skip
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


def test_a_group_is_found_by_its_key_even_when_its_label_would_pattern_otherwise() -> None:
    """A review's case: a label that, read again as an error, falls into another group."""
    errors = [
        "LookupError: no such order 'ord-20240115'",
        "LookupError: no such order 'ord-20240116'",
        "ValueError: no such order 'ord 7'",
    ]
    rows = [failure(f"http://a/{n}", e) for n, e in enumerate(errors)]
    for group in group_failures(rows):
        found = [r.url for r in rows if error_key(r.error) == group.key]
        assert found == [r.url for r in group.failures]


def test_exception_groups_and_frames_are_read_for_their_exception() -> None:
    error = (
        "  + Exception Group Traceback (most recent call last):\n"
        "  | ExceptionGroup: two (2 sub-exceptions)\n"
        "  +-+---------------- 1 ----------------\n"
        "    | ValueError: a\n"
        "    +---------------- 2 ----------------\n"
        "    | KeyError: 'b'\n"
        "    +---------------- ... ----------------\n"
        "    | and 3 more exceptions\n"
        "    +------------------------------------\n"
    )
    assert short_error(error) == "KeyError: 'b'"
    assert short_error("\n \n") == short_error(None) == "-"


def test_putting_values_aside_stays_linear_on_long_runs() -> None:
    """Runs that made a backtracking rule take seconds at 40 000 characters, at 400 000:
    linear, this takes milliseconds; quadratic, hours (the suite's timeout stops it)."""
    hostile = ["1" * 400_000 + "x", "1." * 200_000 + "1x", "1-" * 200_000 + "1abcd",
               "a1" * 200_000, "'" * 400_000, "b'" * 200_000, "http://" * 60_000]  # fmt: skip
    for text in hostile:
        assert error_pattern(text)
    # and whole stored errors, which are not cut (a pydantic input, a body, repeated)
    errors = [
        "E\nprice\n  " + "input_value=" * 400_000 + "\nFor further information visit x",
        "HTTP 500" + "; body: " * 400_000,
        TRACE + "ValueError: " + "x" * 400_000,
    ]
    for error in errors:
        assert len(error_key(error)) <= 2 * LINE_MAX
