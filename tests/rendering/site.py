"""A site whose pages need a browser, for the rendering tests: content written by scripts,
cookies set on both sides, a script that reaches for another address, one that never
stops, one that waits on the server."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter

from aiohttp import web

PRICE_BY_SCRIPT = """<html><body><h1>{name}</h1><script>
var p = document.createElement('span'); p.className = 'price'; p.textContent = '{price}';
document.body.appendChild(p);
</script></body></html>"""

STATIC = '<html><body><h1>{name}</h1><span class="price">{price}</span></body></html>'

# The page reads the cookie HTTP set, shows it, and sets one of its own.
COOKIES = """<html><body><div id="seen"></div><script>
document.getElementById('seen').textContent = document.cookie;
document.cookie = 'js_side=from-script; path=/';
var p = document.createElement('span'); p.className = 'price'; p.textContent = '1';
document.body.appendChild(p);
</script><a href="/after">after</a></body></html>"""

# A script that asks another loopback address for something, in three ways.
REACH_OUT = """<html><body><script src="{canary}/script.js"></script><script>
fetch('{canary}/fetch').catch(function () {{}});
var i = new Image(); i.src = '{canary}/pixel';
var p = document.createElement('span'); p.className = 'price'; p.textContent = 'shown';
document.body.appendChild(p);
</script></body></html>"""

# Every way out a page has, towards the canary: a popup, a link and a form opening a new
# tab, a frame, a WebSocket, a beacon, a preconnect hint.
ESCAPES = """<html><head><link rel="preconnect" href="{canary}"><link rel="dns-prefetch"
href="{canary}"></head><body>
<a id="blank" href="{canary}/blank-link" target="_blank">x</a>
<form id="form" action="{canary}/form" method="post" target="_blank"><input name="a" value="1">
</form><iframe src="{canary}/frame"></iframe><script>
window.open('{canary}/popup');
document.getElementById('blank').click();
document.getElementById('form').submit();
try {{ new WebSocket('{ws}/socket'); }} catch (e) {{}}
navigator.sendBeacon('{canary}/beacon', 'x');
var p = document.createElement('span'); p.className = 'price'; p.textContent = 'escaped?';
document.body.appendChild(p);
</script></body></html>"""

NEVER_SETTLES = "<html><body><script>while (true) {}</script></body></html>"

# Fills in its price from /api/held, which the server holds while ``hold`` is set.
HELD = """<html><body><script>
fetch('/api/held').then(function (r) { return r.text(); }).then(function (t) {
  var p = document.createElement('span'); p.className = 'price'; p.textContent = t;
  document.body.appendChild(p);
});
</script></body></html>"""

# A list that shows more items when its button is clicked (for page.browser).
MORE = """<html><body><ul id="items"><li>a</li><li>b</li></ul>
<button id="more" onclick="['c', 'd'].forEach(function (t) {
  var li = document.createElement('li'); li.textContent = t;
  document.getElementById('items').appendChild(li); });
  document.cookie = 'clicked=yes; path=/';">more</button>
<a href="/after">after</a></body></html>"""


# A page whose load event waits for an image the server sends after ``slow`` seconds.
SLOW = """<html><body><span class="price">{n}.75</span><img src="/img/slow?n={n}"></body></html>"""

# A page whose script sets a cookie of its own name, then waits (as SLOW) for its load.
JAR = """<html><body><script>document.cookie = '{name}=set-by-{name}; path=/';</script>
<span class="price">{name}</span><img src="/img/slow?n=jar-{name}"></body></html>"""

GIF = (
    b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff!\xf9\x04\x01"
    b"\x00\x00\x00\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;"
)


class TcpCanary:
    """A bare TCP listener on 127.0.0.2 counting every connection made to it, bytes or
    none (a connect alone is enough to probe an internal port)."""

    def __init__(self) -> None:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.2", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.2:{self.port}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


class JsSite:
    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self.cookies_seen: dict[str, dict[str, str]] = {}
        self.canary = ""
        self.held = threading.Event()  # set: /api/held waits
        self.held_asked = threading.Event()
        self.slow = 0.0  # seconds /img/slow takes
        self.images: Counter[str] = Counter()  # /img/slow requests by ?n=

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self.handle)
        return app

    def _html(self, text: str, **headers: str) -> web.Response:
        return web.Response(text=text, content_type="text/html", headers=headers)

    async def handle(self, request: web.Request) -> web.Response:
        path = request.path
        self.hits[path] += 1
        self.cookies_seen[path] = dict(request.cookies)
        if path == "/robots.txt":
            return web.Response(text="User-agent: *\nDisallow: /private/\nAllow: /\n")
        if path == "/links":  # /links?to=/js/1&to=/hang: a page linking those
            links = "".join(f'<a href="{to}">{to}</a>' for to in request.query.getall("to", []))
            return self._html(f"<html><body>{links}</body></html>")
        if path.startswith("/js/"):
            n = path.rsplit("/", 1)[1]
            return self._html(PRICE_BY_SCRIPT.format(name=f"js {n}", price=f"{n}.00"))
        if path.startswith("/static/"):
            n = path.rsplit("/", 1)[1]
            return self._html(STATIC.format(name=f"static {n}", price=f"{n}.50"))
        if path == "/login":
            links = '<a href="/cookies">on</a>'
            return self._html(f"<html><body>{links}</body></html>",
                              **{"Set-Cookie": "http_side=from-http; Path=/"})  # fmt: skip
        if path == "/cookies":
            return self._html(COOKIES)
        if path == "/after":
            return self._html(f'<html><body><span class="price">{request.cookies}</span>')
        if path == "/reach":
            return self._html(REACH_OUT.format(canary=self.canary))
        if path == "/escape":
            ws = self.canary.replace("http://", "ws://")
            return self._html(ESCAPES.format(canary=self.canary, ws=ws))
        if path.startswith("/item/"):  # /item/0 sold out: no price, rendered or not
            n = int(path.rsplit("/", 1)[1])
            price = "" if n == 0 else f'<span class="price">{n}.25</span>'
            return self._html(f"<html><body><h1>item {n}</h1>{price}</body></html>")
        if path == "/hang":
            return self._html(NEVER_SETTLES)
        if path == "/held":
            return self._html(HELD)
        if path == "/api/held":
            self.held_asked.set()
            while self.held.is_set():
                await asyncio.sleep(0.05)
            return web.Response(text="9.99")
        if path.startswith("/slow/"):
            return self._html(SLOW.format(n=path.rsplit("/", 1)[1]))
        if path.startswith("/jar/"):
            return self._html(JAR.format(name=path.rsplit("/", 1)[1]))
        if path == "/img/slow":
            self.images[request.query.get("n", "")] += 1
            await asyncio.sleep(self.slow)
            return web.Response(body=GIF, content_type="image/gif",
                                headers={"Cache-Control": "no-store"})  # fmt: skip
        if path == "/more":
            return self._html(MORE)
        if path == "/frames":  # a frame robots.txt allows, one it does not
            frames = '<iframe src="/open/frame"></iframe><iframe src="/private/frame"></iframe>'
            return self._html(f'<html><body>{frames}<span class="price">1</span></body></html>')
        if path in ("/open/frame", "/private/frame"):
            return self._html("<html><body>frame</body></html>")
        return web.Response(status=404)
