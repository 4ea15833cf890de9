"""What a site echoes of a request's secrets in an error body is kept out of the dead
letter; ordinary words stay."""

from __future__ import annotations

from crashsafe.crawl.pages import body_excerpt
from crashsafe.text import without_secrets


def test_echoed_secrets_are_redacted_as_sent_escaped_or_percent_encoded() -> None:
    said = "Authorization: Bearer abc.DEF-1234567 key a\\/b\\/cdef-9 q=AB%2FCD%3D1 raw AB/CD=1"
    text = without_secrets(said, ["a/b/cdef-9", "AB/CD=1"])
    assert text == "Authorization: Bearer [redacted] key [redacted] q=[redacted] raw [redacted]"


def test_ordinary_words_after_bearer_or_basic_are_kept() -> None:
    said = '{"error": "The bearer token is expired", "retry": true} basic validation failed'
    assert without_secrets(said, []) == said
    assert "Basic [redacted]" in without_secrets("Basic dXNlcjpwYXNzd29yZA==", [])


def test_a_secret_cut_by_the_excerpt_is_still_redacted() -> None:
    # A long secret first shortens the text: one that straddled the read's end moved in.
    cookie, token = "C" * 600, "SECRETTOKEN-0123456789"
    body = f'{{"cookie": "{cookie}", "pad": "{"p" * 160}", "auth": "{token}"}}'.encode()
    assert body.index(token.encode()) < 800 < body.index(token.encode()) + len(token)
    excerpt = body_excerpt(body, [cookie, token])
    assert "SECRET" not in excerpt and "[redacted]" in excerpt
