"""Scrapy requests as the crashsafe frontier keeps them: JSON of Scrapy's own
``Request.to_dict()``, keyed by Scrapy's request fingerprint.

The key is ``<canonical URL>#<fingerprint>`` (the URL first, so the store finds a row's
origin for politeness and robots.txt); a ``dont_filter`` request adds ``~<n>``, a digest
of the response that yielded it and its place among that response's ``dont_filter``
requests, so it is fetched again, yet added once however often that response is
processed (a restart commits the response's output once).
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from scrapy import Request, Spider
from scrapy.utils.request import request_from_dict

from crashsafe.contrib.scrapy.errbacks import original
from crashsafe.errors import ConfigError
from crashsafe.ids import canonical_url
from crashsafe.sealed import Sealer, secret_body

#: Meta keys of the adapter's own, never stored.
LEASE_META = "crashsafe_lease"
OWN_META = frozenset({LEASE_META, "download_slot", "download_latency", "_scheme_proxy"})


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    raise TypeError(f"{type(value).__name__} is not JSON")


def _hook(obj: dict[str, Any]) -> Any:
    if obj.keys() == {"$bytes"}:
        return base64.b64decode(obj["$bytes"])
    return obj


def encode(request: Request, spider: Spider, sealer: Sealer | None = None) -> str:
    """``request`` as JSON: Scrapy's ``to_dict`` (callbacks by name), headers and bytes
    made JSON, its secrets sealed by ``sealer`` (credential headers, cookies, a proxy's
    password: crashsafe/sealed.py). Raises ConfigError naming what cannot be stored (a
    callback that is not a spider method, meta that is not JSON, a secret without a key)."""
    if (errback := original(request.errback)) is not request.errback:
        request = request.replace(errback=errback)  # (the spider's own, not crashsafe's)
    try:
        d = request.to_dict(spider=spider)
    except ValueError as exc:  # a callback that is not a method of the spider
        raise ConfigError(f"request {request.url} cannot be stored: {exc}") from None
    d["headers"] = [
        [k.decode("latin-1"), [v.decode("latin-1") for v in values]]
        for k, values in request.headers.items()
    ]
    d["meta"] = {k: v for k, v in (d.get("meta") or {}).items() if k not in OWN_META}
    if sealer is not None:
        body = d.get("body")
        if isinstance(body, bytes):  # a form body is sealed as text when it holds a secret
            try:
                d["body"] = body.decode("utf-8")
                d["body_text"] = True
            except UnicodeDecodeError:
                pass
        d = sealer.seal_request(d)
    try:
        return json.dumps(d, default=_jsonable, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"request {request.url} cannot be stored: its meta or cb_kwargs must be JSON "
            f"values or bytes ({exc})"
        ) from None


def decode(text: str, spider: Spider, sealer: Sealer | None = None) -> Request:
    """The request :func:`encode` stored, its sealed secrets opened by ``sealer``."""

    def hook(obj: dict[str, Any]) -> Any:
        obj = _hook(obj)
        if sealer is not None and isinstance(obj, dict):
            opened = sealer.opened(obj)  # a sealed body of bytes opens as {"$bytes": ...}
            return _hook(opened) if isinstance(opened, dict) else opened
        return obj

    d = json.loads(text, object_hook=hook)
    d["headers"] = {k: values for k, values in d["headers"]}
    if d.pop("body_text", False) and isinstance(d.get("body"), str):
        d["body"] = d["body"].encode("utf-8")
    return request_from_dict(d, spider=spider)


def frontier_key(
    request: Request,
    fingerprint: bytes,
    *,
    parent: str,
    ordinal: int,
    sealer: Sealer | None = None,
) -> str:
    """The key ``request`` is stored under (see the module docstring). For a body with a
    credential field, ``sealer``'s keyed hash of the fingerprint (which hashes the body
    plainly: a reader of the database could test password guesses against it)."""
    try:
        url = canonical_url(request.url, strip_params=())
    except ValueError as exc:
        raise ConfigError(f"request URL {request.url!r} cannot be crawled: {exc}") from None
    if sealer is not None and request.body and secret_body(request.body):
        key = f"{url}#{sealer.keyed(fingerprint)[:32]}"
    else:
        key = f"{url}#{fingerprint.hex()[:32]}"
    if request.dont_filter:
        key += "~" + hashlib.sha256(f"{parent}\n{ordinal}".encode()).hexdigest()[:12]
    return key
