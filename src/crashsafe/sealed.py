"""Secrets a stored request carries, sealed at rest.

A request is stored whole with its frontier row so that a restarted crawl sends it again
exactly; its secrets must not lie in the database in clear (a backup, a copy for
debugging, ``sqlite3 crawl.db`` are read by more people than the crawl's passwords).
Before a request is stored, these values are sealed (Fernet: AES-128-CBC with an
HMAC-SHA256, from ``cryptography``) with a key kept outside the database:

- the values of headers named like credentials (:data:`SECRET_HEADERS`: ``Authorization``,
  ``Cookie``, ``X-Api-Key``, ``*-Token``...; the ``secret_headers`` setting adds names);
- every cookie the request sets itself (``cookies=``);
- a proxy with credentials (``meta["proxy"] = "http://user:pass@host:port"``);
- a body that holds a field named like a credential (a login form's ``password=``).

A sealed value is stored as ``{"$sealed": "<token>"}`` and opened when the request is
read back to be sent. The key: ``CRASHSAFE_SECRET_KEY`` (``crashsafe secret-key`` prints a
new one; give every worker the same), else, for an SQLite database, the file
``<database>.key`` beside it (``0600``, made when the first secret is sealed). A request
that carries a secret when there is no key to seal it with (PostgreSQL without
``CRASHSAFE_SECRET_KEY``) is refused, saying so: it is never stored in clear.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import hmac
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from crashsafe.errors import ConfigError
from crashsafe.files import open_private

__all__ = ["SECRET_HEADERS", "Sealer", "is_secret_header", "new_key", "secret_body"]

ENV = "CRASHSAFE_SECRET_KEY"
#: Header names whose values are credentials (``*`` matches any characters; any case).
SECRET_HEADERS = (
    "authorization", "proxy-authorization", "cookie", "set-cookie", "apikey", "api-key",
    "token", "*-token", "*-secret", "*-key", "*-auth", "x-auth*", "*-authorization",
    "*-password", "*-session", "*-session-id", "x-csrf*", "x-xsrf*",
)  # fmt: skip
_SECRET_FIELDS = (
    "*password*", "*passwd*", "pass", "pwd", "passcode", "*secret*", "*token*", "*api_key*",
    "*apikey*", "pin", "otp",
)  # fmt: skip
_SECRET_JSON = ('"pass', '"pwd', '"secret', '"token', '"api_key', '"apikey', '"otp"', '"pin"')
SEALED = "$sealed"


def is_secret_header(name: str, extra: Iterable[str] = ()) -> bool:
    lower = name.lower()
    return any(fnmatch.fnmatchcase(lower, p.lower()) for p in (*SECRET_HEADERS, *extra))


def secret_body(body: str | bytes) -> bool:
    """Whether a form or JSON body names a credential field (bytes in any encoding: the
    names are ASCII)."""
    lower = (body.decode("latin-1") if isinstance(body, bytes) else body).lower()
    names = [n for n, _ in parse_qsl(lower, keep_blank_values=True)] if "=" in lower else []
    if any(fnmatch.fnmatchcase(n.strip(), p) for n in names for p in _SECRET_FIELDS):
        return True
    return any(w in lower for w in _SECRET_JSON)


def new_key() -> str:
    """A new key for ``CRASHSAFE_SECRET_KEY``."""
    from cryptography.fernet import Fernet

    return Fernet.generate_key().decode("ascii")


class Sealer:
    """Seals and opens the secrets of stored requests (see the module docstring).

    Args:
        key: the key (Fernet's urlsafe base64 of 32 bytes), or None to look for one.
        key_file: where a key is kept (and made) when there is no ``key`` nor env var.
        extra_headers: more header names to treat as secrets (``secret_headers``).
    """

    def __init__(
        self,
        key: str | None = None,
        *,
        key_file: Path | None = None,
        extra_headers: Iterable[str] = (),
    ) -> None:
        self._key = key or os.environ.get(ENV) or None
        self.key_file = key_file
        self.extra_headers = tuple(extra_headers)
        self._fernet: Any = None
        self._hmac_key = b""

    @classmethod
    def for_store(cls, store_url: str, extra_headers: Iterable[str] = ()) -> Sealer:
        """The sealer of a database: ``CRASHSAFE_SECRET_KEY``, else ``<db>.key`` for SQLite."""
        from crashsafe.store import sqlite_path

        path = sqlite_path(store_url)
        key_file = None if path is None else path.with_name(path.name + ".key")
        return cls(key_file=key_file, extra_headers=extra_headers)

    # -- the key --------------------------------------------------------------------------
    def _cipher(self, *, make: bool) -> Any:
        if self._fernet is not None:
            return self._fernet
        from cryptography.fernet import Fernet

        key = self._key
        if key is None and self.key_file is not None:
            key = self._read_key_file(make=make)
        if key is None:
            return None
        try:
            self._fernet = Fernet(key.strip().encode("ascii"))
            self._hmac_key = key.strip().encode("ascii")
        except ValueError:
            raise ConfigError(
                f"{ENV} (or {self.key_file}) is not a key: use `crashsafe secret-key` to make one"
            ) from None
        return self._fernet

    def _read_key_file(self, *, make: bool) -> str | None:
        assert self.key_file is not None
        try:
            return self._key_text()
        except FileNotFoundError:
            if not make:
                return None
        key = new_key()
        try:
            fd = open_private(self.key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, follow=False)
        except FileExistsError:  # another worker made it meanwhile (or a link is there)
            return self._key_text()
        except OSError as exc:
            raise ConfigError(f"cannot make the key file {self.key_file}: {exc}") from None
        with os.fdopen(fd, "w") as out:
            out.write(key + "\n")
            out.flush()
            os.fsync(out.fileno())
        return key

    def _key_text(self) -> str:
        """The key file's text, read without following a symbolic link (a key planted
        elsewhere is not taken). FileNotFoundError if there is none."""
        assert self.key_file is not None
        try:
            fd = os.open(self.key_file, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            raise
        except OSError as exc:
            why = "it is a symbolic link" if self.key_file.is_symlink() else str(exc)
            raise ConfigError(
                f"the key file {self.key_file} cannot be read ({why}): put the key itself "
                f"there, or give it in {ENV}"
            ) from None
        with os.fdopen(fd, encoding="ascii", errors="replace") as source:
            return source.read().strip()

    # -- values ---------------------------------------------------------------------------
    def seal(self, value: str, what: str) -> dict[str, str]:
        cipher = self._cipher(make=True)
        if cipher is None:
            raise ConfigError(
                f"the request carries a secret ({what}), which crashsafe stores only "
                f"sealed: set {ENV} on every worker (`crashsafe secret-key` makes one)"
            )
        return {SEALED: cipher.encrypt(value.encode("utf-8", "surrogatepass")).decode("ascii")}

    def keyed(self, data: bytes) -> str:
        """A keyed hash of ``data`` (HMAC-SHA256 with the key, hex): for a frontier key
        that tells bodies apart without letting a reader of the database test guesses
        of a password against a plain hash of the login form."""
        if self._cipher(make=True) is None:
            raise ConfigError(
                f"the request carries a secret (a body with a credential field), which "
                f"crashsafe stores only sealed: set {ENV} on every worker "
                "(`crashsafe secret-key` makes one)"
            )
        return hmac.new(self._hmac_key, data, hashlib.sha256).hexdigest()

    def open(self, sealed: Mapping[str, str]) -> str:
        from cryptography.fernet import InvalidToken

        cipher = self._cipher(make=False)
        if cipher is None:
            raise ConfigError(
                f"a stored request's secret is sealed, and there is no key to open it: set "
                f"{ENV} to the key it was sealed with"
                + (f" (or bring back {self.key_file})" if self.key_file else "")
            )
        try:
            return str(
                cipher.decrypt(sealed[SEALED].encode("ascii")).decode("utf-8", "surrogatepass")
            )
        except InvalidToken:
            raise ConfigError(
                f"a stored request's secret cannot be opened with this key: {ENV} is not "
                "the key it was sealed with"
            ) from None

    # -- requests as stored (JSON objects) ------------------------------------------------
    def seal_request(self, stored: dict[str, Any]) -> dict[str, Any]:
        """``stored`` (a request as the frontier keeps it) with its secrets sealed."""
        headers = stored.get("headers")
        if isinstance(headers, dict):
            stored["headers"] = {
                k: self.seal(v, f"header {k}") if self._secret(k) else v for k, v in headers.items()
            }
        elif isinstance(headers, list):  # [[name, [values]]] (the Scrapy adapter's)
            stored["headers"] = [
                [k, [self.seal(v, f"header {k}") for v in vs] if self._secret(k) else vs]
                for k, vs in headers
            ]
        cookies = stored.get("cookies")
        if isinstance(cookies, dict) and cookies:
            stored["cookies"] = {k: self.seal(str(v), f"cookie {k}") for k, v in cookies.items()}
        elif isinstance(cookies, list) and cookies:
            stored["cookies"] = [self._seal_any(c, "a cookie") for c in cookies]
        meta = stored.get("meta")
        proxy = meta.get("proxy") if isinstance(meta, dict) else None
        if isinstance(proxy, str) and "@" in urlsplit(proxy).netloc:
            stored["meta"] = {**(meta or {}), "proxy": self.seal(proxy, "a proxy's password")}
        body = stored.get("body")
        what = "a body with a credential field"
        if isinstance(body, str) and body and secret_body(body):
            stored["body"] = self.seal(body, what)
        elif isinstance(body, bytes) and body and secret_body(body):  # not UTF-8
            stored["body"] = self._seal_any({"$bytes": base64.b64encode(body).decode()}, what)
        encoded = stored.get("body_base64")
        if isinstance(encoded, str) and secret_body(base64.b64decode(encoded)):
            stored["body_base64"] = self.seal(encoded, what)
        return stored

    def _secret(self, header: str) -> bool:
        return is_secret_header(header, self.extra_headers)

    def _seal_any(self, value: Any, what: str) -> Any:
        import json

        return {**self.seal(json.dumps(value), what), "json": True}

    def opened(self, obj: dict[str, Any]) -> Any:
        """A JSON object hook: a sealed value opened, anything else as it is."""
        if SEALED in obj and len(obj) <= 2:
            text = self.open(obj)
            if obj.get("json"):
                import json

                return json.loads(text)
            return text
        return obj
