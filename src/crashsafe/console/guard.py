"""Who may use the console, and how its actions are kept from other sites.

- Bound to 127.0.0.1 (the default) without a token, only requests whose ``Host`` is that
  address and port are answered: a web page elsewhere cannot reach the console through
  a name it points at 127.0.0.1 (DNS rebinding).
- With a token (required for any other address), every request carries it: the
  ``Authorization: Bearer`` header (Prometheus, scripts) or the cookie that ``/login?token=``
  sets (a browser; HttpOnly, SameSite=Strict). Compared in constant time.
- Every action is a POST that carries the page's CSRF token (a header no other site's
  page can set without the console's consent, which it never gives), and whose
  ``Origin``, when sent, is the console's own.
- Every answer forbids framing, sniffing and any script but the console's own file (CSP).
"""

from __future__ import annotations

import hmac
import logging
import secrets
from collections.abc import Awaitable, Callable

from aiohttp import web

COOKIE = "crashsafe_console"
CSRF_HEADER = "X-Crashsafe-CSRF"
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
logger = logging.getLogger("crashsafe.console")


def same(given: str, secret: str) -> bool:
    """``given == secret`` in constant time; any bytes a header may carry (aiohttp keeps
    undecodable ones as surrogates) compare as unequal, never as an error."""
    return hmac.compare_digest(
        given.encode("utf-8", "surrogateescape"), secret.encode("utf-8", "surrogateescape")
    )


class Guard:
    def __init__(self, *, host: str, token: str | None) -> None:
        self.token = token
        self.csrf = secrets.token_urlsafe(32)
        # What the login cookie holds: not the token (a browser sends a host's cookies to
        # every port of it, so another service there would learn it), a session of this
        # run's that ends with it.
        self.session = secrets.token_urlsafe(32)
        self.host = host
        self.hosts: set[str] = set()

    def bound(self, port: int) -> None:
        """The port the console listens on: the ``Host`` it answers to without a token."""
        names = {self.host, "localhost", "127.0.0.1"}
        self.hosts = {f"[{h}]:{port}" if ":" in h else f"{h}:{port}" for h in names}

    def _has_token(self, request: web.Request) -> bool:
        if self.token is None:
            return True
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            return same(auth.removeprefix("Bearer "), self.token)
        return same(request.cookies.get(COOKIE, ""), self.session)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response = await self._checked(request, handler)
        except web.HTTPException as exc:
            exc.headers.update(HEADERS)
            raise
        except Exception as exc:  # a bug of ours: a 500 with the same headers, and a log line
            logger.exception("console: %s %s failed", request.method, request.path)
            raise web.HTTPInternalServerError(text="the console failed; see its log",
                                              headers=HEADERS) from exc  # fmt: skip
        response.headers.update(HEADERS)
        return response

    async def _checked(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self.token is None and request.host not in self.hosts:
            raise web.HTTPMisdirectedRequest(text="this console answers on its own address only")
        if request.path == "/login" and self.token is not None:
            return self._login(request)
        if not self._has_token(request):
            raise web.HTTPUnauthorized(
                text="a token is needed: open /login?token=... once, or send "
                "'Authorization: Bearer ...'"
            )
        if request.method == "POST":
            if not same(request.headers.get(CSRF_HEADER, ""), self.csrf):
                raise web.HTTPForbidden(text="missing or wrong CSRF token: reload the page")
            origin = request.headers.get("Origin")
            if origin is not None and origin != f"{request.scheme}://{request.host}":
                raise web.HTTPForbidden(text="an action from another site's page is refused")
        return await handler(request)

    def _login(self, request: web.Request) -> web.StreamResponse:
        given = request.query.get("token", "")
        assert self.token is not None
        if not same(given, self.token):
            raise web.HTTPUnauthorized(text="wrong token")
        back = web.HTTPSeeOther("/")
        back.set_cookie(COOKIE, self.session, httponly=True, samesite="Strict", path="/")
        raise back
