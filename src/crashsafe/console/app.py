"""The console's web server (aiohttp): the page, its data, its actions, ``/metrics``.

- ``GET /``: the page (``static/index.html``; its script renders every value as text)
- ``GET /api/state``: the snapshot (``snapshot.py``) as JSON; ``GET /api/events``: the
  same as server-sent events, once a second while it changes
- ``GET /api/records?crawl=NAME&q=TEXT``: records whose key holds TEXT, with their data;
  ``GET /api/records/versions?crawl=NAME&id=ID``: a record's versions, oldest first;
  ``GET /api/changes?crawl=NAME``: the change feed of the crawl's last pass
- ``POST /api/{pause|resume|cancel|retry}``: JSON body ``{"crawl": NAME}``, with
  ``"origin"`` (pause, resume an origin), ``"error"`` (retry the group of the dead
  letter whose ``key`` it is, as ``/api/state`` gives it) or ``"urls"`` (retry those;
  none: every failed URL); each is the store operation the CLI runs, recorded in the
  audit as ``console@<address>``
- ``GET /metrics``: Prometheus (``metrics.py``)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from importlib.resources import files
from typing import Any

from aiohttp import web

from crashsafe.console.guard import Guard
from crashsafe.console.metrics import CONTENT_TYPE, exposition
from crashsafe.console.snapshot import Hub, iso
from crashsafe.errors import ConfigError
from crashsafe.store import Store

STATIC = {
    "console.js": "text/javascript",
    "console.css": "text/css",
}
ACTIONS = {"pause", "resume", "cancel", "retry"}
EVENTS_EVERY = 1.0
RECORDS_SHOWN = 50
HUB: web.AppKey[Hub] = web.AppKey("hub", Hub)
GUARD: web.AppKey[Guard] = web.AppKey("guard", Guard)
READ_ONLY: web.AppKey[bool] = web.AppKey("read_only", bool)
CLOSING: web.AppKey[asyncio.Event] = web.AppKey("closing", asyncio.Event)


def _static(name: str) -> str:
    return files("crashsafe.console").joinpath("static", name).read_text("utf-8")


async def index(request: web.Request) -> web.Response:
    page = _static("index.html")
    page = page.replace("{{csrf}}", request.app[GUARD].csrf)
    page = page.replace("{{read_only}}", "true" if request.app[READ_ONLY] else "false")
    page = page.replace("{{database}}", "true" if request.app[HUB].has_database else "false")
    return web.Response(text=page, content_type="text/html", charset="utf-8")


async def static(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in STATIC:
        raise web.HTTPNotFound()
    return web.Response(text=_static(name), content_type=STATIC[name], charset="utf-8")


async def state(request: web.Request) -> web.Response:
    return web.json_response(await request.app[HUB].latest())


async def events(request: web.Request) -> web.StreamResponse:
    """The snapshot whenever something in it but its time changed (and a comment every
    15 s to keep proxies quiet), until the page goes away or the console stops (then at
    once: an open page must not hold up Ctrl-C)."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    hub, closing = request.app[HUB], request.app[CLOSING]
    sent = ""
    quiet = 0.0
    with contextlib.suppress(ConnectionResetError):
        while not closing.is_set():
            snap = await hub.latest()
            body = json.dumps({**snap, "at": None}, separators=(",", ":"))
            if body != sent:
                data = json.dumps(snap, separators=(",", ":"))
                await response.write(f"data: {data}\n\n".encode())
                sent, quiet = body, 0.0
            elif quiet >= 15:
                await response.write(b": still here\n\n")
                quiet = 0.0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(closing.wait(), EVENTS_EVERY)
            quiet += EVENTS_EVERY
    return response


def _needs_a_database(request: web.Request) -> None:
    if not request.app[HUB].has_database:
        raise web.HTTPBadRequest(text="this console shows batch jobs only: no crawl database")


async def records(request: web.Request) -> web.Response:
    _needs_a_database(request)
    crawl = request.query.get("crawl", "")
    text = request.query.get("q", "")

    def find(store: Store) -> list[dict[str, Any]]:
        return [
            {"key": r.key, "id": r.id, "url": r.url, "version": r.version, "data": r.data,
             "first_seen": iso(r.first_seen), "last_changed": iso(r.last_changed),
             "gone_at": iso(r.gone_at)}
            for r in store.find_records(crawl, text, limit=RECORDS_SHOWN)
        ]  # fmt: skip

    return web.json_response({"records": await request.app[HUB].call(find)})


async def changes(request: web.Request) -> web.Response:
    """The change feed of the crawl's last pass: records new, changed or gone since it
    began (all records when it has had one pass), the first ``RECORDS_SHOWN``."""
    _needs_a_database(request)
    crawl = request.query.get("crawl", "")

    def read(store: Store) -> dict[str, Any]:
        since = store.last_pass_at(crawl)
        found = []
        for r in store.iter_records(crawl, since=since or 0.0):
            found.append({"key": r.key, "id": r.id, "version": r.version, "data": r.data,
                          "last_changed": iso(r.last_changed), "gone_at": iso(r.gone_at),
                          "new": since is not None and r.first_seen >= since})  # fmt: skip
            if len(found) == RECORDS_SHOWN:
                break
        return {"since": iso(since), "records": found}

    return web.json_response(await request.app[HUB].call(read))


async def versions(request: web.Request) -> web.Response:
    _needs_a_database(request)
    crawl, record_id = request.query.get("crawl", ""), request.query.get("id", "")

    def read(store: Store) -> list[dict[str, Any]]:
        return [
            {"version": v, "type": kind, "at": iso(at), "data": data}
            for v, kind, at, data in store.record_versions(crawl, record_id)
        ]

    return web.json_response({"versions": await request.app[HUB].call(read)})


async def action(request: web.Request) -> web.Response:
    if request.app[READ_ONLY]:
        raise web.HTTPForbidden(text="this console is read-only (--read-only)")
    name = request.match_info["action"]
    _needs_a_database(request)
    if name not in ACTIONS:
        raise web.HTTPNotFound(text=f"no action {name!r}: one of {sorted(ACTIONS)}")
    try:
        body = await request.json() if request.can_read_body else {}
    except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, nested too deep
        raise web.HTTPBadRequest(text=f"the body is not JSON: {type(exc).__name__}") from exc
    if not isinstance(body, dict) or not isinstance(body.get("crawl"), str):
        raise web.HTTPBadRequest(text='the body is a JSON object: {"crawl": NAME, ...}')
    crawl = body["crawl"]
    actor = f"console@{request.remote or 'unknown'}"
    try:
        done = await request.app[HUB].act(_run_action(crawl, name, body, actor))
    except ConfigError as exc:
        raise web.HTTPBadRequest(text=str(exc)) from exc
    request.app[HUB].refresh_soon()  # (not awaited: a large dead letter takes seconds)
    return web.json_response(done)


def _run_action(
    crawl: str, name: str, body: dict[str, Any], actor: str
) -> Callable[[Store], dict[str, Any]]:
    def run(store: Store) -> dict[str, Any]:
        if crawl not in store.crawls():
            raise ConfigError(f"no crawl named {crawl!r}")
        if name in ("pause", "resume"):
            origin = body.get("origin")
            if origin is not None:
                from crashsafe.cli.steer_cmds import canonical_origin

                origin = canonical_origin(str(origin))
            act = store.pause if name == "pause" else store.resume
            return {"changed": act(crawl, actor=actor, origin=origin), "origin": origin}
        if name == "cancel":
            return {"workers": store.cancel(crawl, actor=actor)}
        urls = body.get("urls")
        if urls is not None and not (
            isinstance(urls, list) and all(isinstance(u, str) for u in urls)
        ):
            raise ConfigError("urls: a list of URLs")
        key = body.get("error")
        if key is not None:  # a group of the dead letter, by its key: its URLs, as grouped
            from crashsafe.failures import error_key

            urls = [f.url for f in store.failed(crawl) if error_key(f.error) == str(key)]
            if not urls:
                return {"requeued": 0}
        return {"requeued": store.retry_failed(crawl, actor=actor, urls=urls)}

    return run


async def metrics(request: web.Request) -> web.Response:
    snap = await request.app[HUB].latest()
    return web.Response(body=exposition(snap), headers={"Content-Type": CONTENT_TYPE})


async def _no_content() -> web.Response:
    return web.Response(status=204)


def make_app(hub: Hub, guard: Guard, *, read_only: bool = False) -> web.Application:
    app = web.Application(middlewares=[guard.middleware])
    app[HUB], app[GUARD], app[READ_ONLY] = hub, guard, read_only
    app[CLOSING] = asyncio.Event()

    async def closing(app: web.Application) -> None:
        app[CLOSING].set()  # the event streams end now, not when their pages go away

    app.on_shutdown.append(closing)
    app.router.add_get("/", index)
    app.router.add_get("/static/{name}", static)
    app.router.add_get("/api/state", state)
    app.router.add_get("/api/events", events)
    app.router.add_get("/api/records", records)
    app.router.add_get("/api/records/versions", versions)
    app.router.add_get("/api/changes", changes)
    app.router.add_post("/api/{action}", action)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/favicon.ico", lambda _: _no_content())
    return app
