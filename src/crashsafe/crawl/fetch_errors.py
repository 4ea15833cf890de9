"""How a fetch can fail, as the engine acts on it (kept apart from ``fetch.py`` so that
modules raising them need not import aiohttp)."""

from __future__ import annotations


class FetchError(Exception):
    """A fetch produced no response to parse."""


class TransientFetchError(FetchError):
    """Worth retrying: timeout, refused or reset connection."""


class TLSFetchError(TransientFetchError):
    """The TLS handshake failed (a certificate that is invalid, a port that speaks plain
    HTTP): retried, since a certificate may be fixed, but never an outage to wait out:
    every try counts an attempt, and the page ends in the dead letter with the error."""


class PermanentFetchError(FetchError):
    """Retrying will not help: too many redirects, response too large."""

    #: True when no request of the fetch reached the network (its first hop refused by
    #: the address guard): the page fails without counting a request
    unsent = False
