"""Durable requests: a :class:`Request` as ``parse`` yields it, and as the frontier keeps it.

A request is stored whole with its frontier row, so a restarted crawl sends exactly the
same request (method, headers, body, cookies) and hands its callback the same ``meta``
and ``cb_kwargs``. Its frontier key is a fingerprint of method, canonical URL and body,
as Scrapy's request fingerprint is (headers, cookies and ``meta`` are not part of it):

- a plain GET (no body) is keyed by its canonical URL, as every URL always was;
- any other request by ``<canonical URL>#<METHOD>[:<sha256 of the body, 16 hex>]``: a
  canonical URL never has a fragment, so the two kinds never meet, and the same URL sent
  by POST with two bodies is two requests;
- ``dont_filter=True`` adds ``~<n>``, a digest of the page that yielded it and the
  request's place among that page's ``dont_filter`` requests: fetched again even if the
  URL was seen, yet still once per page that yields it (a page's output is committed
  once), so a restart never adds it twice.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from crashsafe.errors import ConfigError
from crashsafe.sealed import secret_body
from crashsafe.store.values import canonical_json

if TYPE_CHECKING:
    from crashsafe.sealed import Sealer

__all__ = [
    "BadRequest",
    "Request",
    "callback_name",
    "check_proxy",
    "checked",
    "frontier_key",
    "request_from_row",
]

_PLAIN_FIELDS = ("headers", "cookies", "meta", "cb_kwargs")


def callback_name(callback: str | Callable[..., Any] | None) -> str | None:
    """The name the frontier keeps for ``callback`` (a method's name, or the method)."""
    if callable(callback):
        return getattr(callback, "__name__", None)
    return callback


@dataclass(frozen=True, slots=True)
class Request:
    """A request to crawl, named and shaped as Scrapy's.

    Args:
        url: absolute, or relative to the page when made with ``page.follow``.
        method: the HTTP method (upper-cased).
        headers: sent with this request, over the crawl's ``default_headers``.
        body: the request body (``str`` is sent as UTF-8).
        cookies: sent with this request, beside the crawl's cookie jar.
        callback: the spider method that parses the response: the method itself
            (``self.parse_item``) or its name; None is ``parse``.
        errback: the spider method called with a :class:`~crashsafe.crawl.failure.Failure`
            when the request fails for good (its retries spent, a status the spider does
            not handle); what it yields is stored with the page, done.
        cb_kwargs: keyword arguments for the callback (JSON values).
        meta: carried to the response as ``page.meta`` (JSON values); ``meta["proxy"]``
            sends this request through that proxy.
        priority: higher is leased first.
        dont_filter: fetch it even if the same request was seen (see the module's doc).
        render: ``True``: render the page in Chromium; ``False``: fetch its HTML only;
            ``None``: as the crawl's ``render`` setting says (``docs/rendering.md``).
    """

    url: str
    method: str = "GET"
    headers: Mapping[str, str] | None = None
    body: bytes | str | None = None
    cookies: Mapping[str, str] | None = None
    callback: str | Callable[..., Any] | None = None
    errback: str | Callable[..., Any] | None = None
    cb_kwargs: Mapping[str, Any] | None = None
    meta: Mapping[str, Any] | None = None
    priority: int = 0
    dont_filter: bool = False
    render: bool | None = None
    # Set when read back from the frontier: the key it is stored under.
    key: str | None = field(default=None, compare=False, repr=False)

    @property
    def body_bytes(self) -> bytes:
        body = self.body
        if body is None:
            return b""
        return body.encode("utf-8") if isinstance(body, str) else bytes(body)

    @property
    def is_plain(self) -> bool:
        """A GET without body whose replay needs nothing but its URL."""
        return (
            self.method.upper() == "GET"
            and not self.body_bytes
            and not self.dont_filter
            and self.errback is None
        )

    def stored(self, sealer: Sealer | None = None) -> str | None:
        """What the frontier keeps beside the URL to send this request again, as JSON
        (None: a plain GET with nothing else), its secrets sealed by ``sealer``
        (crashsafe/sealed.py). Raises ``ConfigError`` naming the field whose value is not
        JSON, or a secret that cannot be sealed."""
        out: dict[str, Any] = {}
        method = self.method.upper()
        if method != "GET":
            out["method"] = method
        body = self.body_bytes
        if body:
            try:
                out["body"] = body.decode("utf-8")
            except UnicodeDecodeError:
                out["body_base64"] = base64.b64encode(body).decode("ascii")
        for name in _PLAIN_FIELDS:
            value = getattr(self, name)
            if value:
                out[name] = value
        errback = callback_name(self.errback)
        if errback:
            out["errback"] = errback
        if self.render is not None:
            out["render"] = bool(self.render)
        if not out:
            return None
        if sealer is not None:
            out = sealer.seal_request(out)
        try:
            return canonical_json(out)
        except (TypeError, ValueError) as exc:
            bad = next(n for n in _PLAIN_FIELDS if not _is_json(getattr(self, n)))
            raise ConfigError(
                f"Request {bad} must hold JSON values (str, int, float, bool, None, lists, "
                f"dicts) to be stored with the frontier ({exc}); NaN and objects cannot be"
            ) from None


class BadRequest(ValueError):
    """A Request whose fields cannot be sent or stored (says which, and why)."""


_PRIORITY = range(-(2**63), 2**63)  # what the database's integer holds
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 token: methods, names


def checked(request: Request) -> Request:
    """``request`` if every field can be sent and stored; raises :class:`BadRequest`
    naming the first that cannot. ``meta`` and ``cb_kwargs`` are checked when stored."""
    if not isinstance(request.url, str):
        raise BadRequest(f"the URL is a {type(request.url).__name__}, not a string")
    for kind in ("callback", "errback"):
        name = callback_name(getattr(request, kind))
        if name is not None and not (isinstance(name, str) and name.isidentifier()):
            raise BadRequest(f"{kind} {name!r} is not the name of a spider method")
    if request.render not in (None, True, False):
        raise BadRequest(f"render must be True, False or None, not {request.render!r}")
    if type(request.priority) is not int or request.priority not in _PRIORITY:
        raise BadRequest(f"priority {request.priority!r} is not an integer within 64 bits")
    method = request.method
    if method != "GET" and (
        not isinstance(method, str) or not _TOKEN.fullmatch(method) or len(method) > 20
    ):
        raise BadRequest(f"method {method!r} is not an HTTP method")
    if request.body is not None and not isinstance(request.body, str | bytes | bytearray):
        raise BadRequest(
            f"body must be bytes or str, not {type(request.body).__name__} "
            "(for JSON: body=json.dumps(...))"
        )
    for name in ("headers", "cookies"):
        value = getattr(request, name)
        if value is None:
            continue
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) and _TOKEN.fullmatch(k)
            for k, v in value.items()
        ):
            raise BadRequest(f"{name} must map names to strings, e.g. {{'X-Name': 'value'}}")
    return request


def check_proxy(value: object, where: str) -> str:
    """``value`` if it is a proxy URL aiohttp can use (``http://[user:pass@]host:port``)."""
    from yarl import URL  # (only when a proxy is given: spiders import this module)

    text = str(value)
    try:
        url = URL(text)
    except (ValueError, TypeError):
        url = None
    if url is None or url.scheme not in ("http", "https") or not url.host:
        raise ConfigError(
            f"{where} {text[:200]!r} is not a proxy URL: use http://[user:pass@]host:port"
        )
    return text


def _is_json(value: Any) -> bool:
    try:
        canonical_json(value)
    except (TypeError, ValueError):
        return False
    return True


def frontier_key(
    canonical: str,
    request: Request,
    *,
    parent: str = "",
    ordinal: int = 0,
    sealer: Sealer | None = None,
) -> str:
    """The key ``request`` (whose canonical URL is ``canonical``) is stored under.

    ``parent`` and ``ordinal`` (the page that yielded it, the request's place among that
    page's ``dont_filter`` requests) matter only with ``dont_filter``. A body with a
    credential field is told apart by ``sealer``'s keyed hash, not a plain one.
    """
    if request.is_plain:
        return canonical
    tag = request.method.upper()
    body = request.body_bytes
    if body:
        if sealer is not None and secret_body(body):
            tag += ":" + sealer.keyed(body)[:16]
        else:
            tag += ":" + hashlib.sha256(body).hexdigest()[:16]
    if request.dont_filter:
        seed = f"{parent}\n{ordinal}".encode()
        tag += "~" + hashlib.sha256(seed).hexdigest()[:12]
    return f"{canonical}#{tag}"


def request_from_row(
    key: str, callback: str | None, stored: str | None, sealer: Sealer | None = None
) -> Request:
    """The request kept under ``key`` (the frontier's url column) with ``stored``, its
    sealed secrets opened by ``sealer``."""
    if stored is None:  # a plain GET: its key is its URL
        return Request(key, callback=callback, key=key)
    url = key.partition("#")[0]
    data = json.loads(stored, object_hook=None if sealer is None else sealer.opened)
    body: bytes | str | None = data.get("body")
    if "body_base64" in data:
        body = base64.b64decode(data["body_base64"])
    return Request(
        url,
        method=data.get("method", "GET"),
        headers=data.get("headers"),
        body=body,
        cookies=data.get("cookies"),
        callback=callback,
        errback=data.get("errback"),
        cb_kwargs=data.get("cb_kwargs"),
        meta=data.get("meta"),
        dont_filter="~" in key.partition("#")[2],
        render=data.get("render"),
        key=key,
    )
