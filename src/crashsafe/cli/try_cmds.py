"""parse, shell: try selectors and callbacks on one page, as ``scrapy parse`` and
``scrapy shell`` do. Nothing is read from or written to a database."""

from __future__ import annotations

import code
import json
import sys
from collections.abc import Callable, Iterable
from typing import Any

import click

from crashsafe import aio
from crashsafe.cli.crawl_cmds import parse_arguments, parse_sets
from crashsafe.crawl.requests import Request, callback_name
from crashsafe.crawl.spider import Link, Page, Record, Spider
from crashsafe.errors import ConfigError


def _json_option(text: str | None, name: str) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{name} {text!r} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{name} must be a JSON object, e.g. '{{\"page\": 2}}'")
    return value


def fetch_page(spider: Spider, request: Request, sets: Iterable[str] = ()) -> Page:
    """Fetch ``request`` once with the spider's settings (headers, cookies, proxy, auth,
    the address guard) and return it as ``parse`` would see it."""
    from crashsafe.crawl.addresses import AddressGuard, GuardedResolver
    from crashsafe.crawl.allow import BadLink, host_and_port
    from crashsafe.crawl.fetch import fetch, new_session
    from crashsafe.crawl.fetch_errors import FetchError
    from crashsafe.crawl.sessions import SendBuilder
    from crashsafe.ids import canonical_url

    settings = type(spider).crawl_settings(**parse_sets(sets))
    try:
        host, port = host_and_port(canonical_url(request.url))
    except (BadLink, ValueError) as exc:
        raise ConfigError(f"{request.url!r} cannot be fetched: {exc}") from None
    sends = SendBuilder(settings, [(host, port)])
    guard = AddressGuard.for_crawl(
        settings.allowed_addresses, [(host, port)], sends.proxy_endpoints()
    )

    async def go() -> Page:
        async with new_session(settings, resolver=GuardedResolver(guard)) as session:
            try:
                resp = await fetch(
                    session, request.url, settings, guard=guard, send=sends.send(request)
                )
            except FetchError as exc:
                raise ConfigError(f"cannot fetch {request.url}: {exc}") from None
        return Page(
            url=resp.url, status=resp.status, headers=resp.headers, body=resp.body,
            request=request,
        )  # fmt: skip

    return aio.run(go())


def _described(item: Any, page: Page, key: Callable[[Any], Any] | None) -> dict[str, Any]:
    """What one yielded thing is, as a JSON object to print."""
    from itemadapter import ItemAdapter

    if isinstance(item, Record):
        return {"record": {"key": item.key, "data": item.data}}
    if isinstance(item, str):
        item = Request(page.urljoin(item))
    if isinstance(item, Link):
        item = Request(page.urljoin(item.url), callback=item.callback, priority=item.priority)
    if isinstance(item, Request):
        shown: dict[str, Any] = {"url": page.urljoin(item.url), "method": item.method.upper()}
        shown["callback"] = callback_name(item.callback) or "parse"
        for name in ("headers", "cookies", "meta", "cb_kwargs"):
            if getattr(item, name):
                shown[name] = getattr(item, name)
        if item.body:
            shown["body"] = item.body_bytes.decode("utf-8", "replace")
        return {"request": shown}
    if ItemAdapter.is_item(item):
        data = ItemAdapter(item).asdict()
        return {"item": {"key": key(data) if key else None, "data": data}}
    return {"unsupported": f"{type(item).__name__}: {item!r}"[:500]}


@click.command("parse")
@click.argument("url")
@click.option("--spider", "spider_path", required=True, help="path/file.py[:Class]")
@click.option("-c", "--callback", help="The spider method to call (default: parse).")
@click.option("--meta", help="The request's meta, as a JSON object.")
@click.option("--cb-kwargs", help="The callback's keyword arguments, as a JSON object.")
@click.option("-s", "--set", "sets", multiple=True, metavar="NAME=VALUE", help="Any crawl setting.")
@click.option("-a", "arguments", multiple=True, metavar="NAME=VALUE", help="A spider argument.")
def parse_cmd(
    url: str,
    spider_path: str,
    callback: str | None,
    meta: str | None,
    cb_kwargs: str | None,
    sets: tuple[str, ...],
    arguments: tuple[str, ...],
) -> None:
    """Fetch URL once and print what the spider's callback yields, one JSON object per
    line (records, items, requests), as the crawl would treat the page. Nothing is stored."""
    from crashsafe.crawl.allow import LinkFilter
    from crashsafe.crawl.extract import ParseError, item_keyer, run_callback, to_rows
    from crashsafe.crawl.loader import load_spider
    from crashsafe.crawl.pages import not_handled, status_rule

    spider = load_spider(spider_path)(**parse_arguments(arguments))
    request = Request(
        url,
        callback=callback,
        meta=_json_option(meta, "--meta"),
        cb_kwargs=_json_option(cb_kwargs, "--cb-kwargs"),
    )
    page = fetch_page(spider, request, sets)
    click.echo(f"{page.status} {page.url} ({len(page.body):,} bytes)", err=True)
    settings = type(spider).crawl_settings(**parse_sets(sets))
    rule = status_rule(page.status, settings.handle_statuses)
    if rule != "parse":  # as the crawl would: the callback never sees such a page
        click.echo(f"the crawl would {CRAWL_WOULD[rule]}", err=True)
        if rule == "fail":
            click.echo(f"  {not_handled(page.status)}", err=True)
        sys.exit(0 if rule in ("gone", "redirect") else 1)
    try:
        items = aio.run(run_callback(spider, page, callback))
    except ParseError as exc:
        raise ConfigError(str(exc)) from None
    except Exception:  # the spider's own code: its frames are what helps here
        sys.stderr.write(spider_traceback())
        click.echo(f"Error: {callback or 'parse'} raised (above)", err=True)
        sys.exit(1)
    key = item_keyer(spider)
    counts: dict[str, int] = {}
    for item in items:
        if item is None:
            continue
        shown = _described(item, page, key)
        counts[next(iter(shown))] = counts.get(next(iter(shown)), 0) + 1
        click.echo(json.dumps(shown, ensure_ascii=False, default=str))
    summary = ", ".join(f"{n} {kind}(s)" for kind, n in counts.items()) or "nothing"
    click.echo(f"{callback or 'parse'} yielded {summary}", err=True)
    try:  # what the crawl checks before it stores a page's yield
        to_rows(items, page=page, source=spider.name, links=LinkFilter(settings, [url]),
                item_key=key)  # fmt: skip
    except ParseError as exc:
        click.echo(f"the crawl would fail this page: {exc}", err=True)
        sys.exit(1)


CRAWL_WOULD = {
    "gone": "mark this page done with no record, without calling the callback (add the "
    "status to handle_statuses to parse such pages)",
    "redirect": "mark this page done with no record: a redirect it was not allowed to follow",
    "retry": "try this page again later, counting an attempt (429 and 5xx are retried)",
    "fail": "fail this page: its status is not one the spider handles",
}


def spider_traceback() -> str:
    """The traceback of the exception being handled from the spider's first frame on
    (what it called included), without the frames that led there (crashsafe's, the
    standard library's, the event loop's): the spider's are what says what went wrong.
    With no frame of the spider's (the callback could not even be called: a wrong
    signature), none, and it says so."""
    import sysconfig
    import traceback
    from pathlib import Path

    ours = str(Path(__file__).resolve().parents[1])
    paths = sysconfig.get_paths()
    installed = (paths["purelib"], paths["platlib"])  # (under stdlib outside a venv)

    def theirs(name: str) -> bool:
        if name.startswith(ours) or not Path(name).is_file():  # (a .pyx is not one)
            return False
        return name.startswith(installed) or not name.startswith(paths["stdlib"])

    _, exc, tb = sys.exc_info()
    assert exc is not None
    frames = traceback.extract_tb(tb)
    for n, frame in enumerate(frames):
        if theirs(frame.filename):
            lines = ["Traceback (the spider's frames):\n", *traceback.format_list(frames[n:])]
            break
    else:
        lines = ["(raised before the spider's code ran: calling it failed)\n"]
    return "".join(lines + traceback.format_exception_only(type(exc), exc))


@click.command("shell")
@click.argument("url")
@click.option("--spider", "spider_path", help="path/file.py[:Class]: its settings apply.")
@click.option("-s", "--set", "sets", multiple=True, metavar="NAME=VALUE", help="Any crawl setting.")
def shell(url: str, spider_path: str | None, sets: tuple[str, ...]) -> None:
    """Fetch URL and open a Python console with it as `page` (try
    page.css("title::text").get()); fetch(url) loads another page. Nothing is stored."""
    from crashsafe.crawl.loader import load_spider

    spider = load_spider(spider_path)() if spider_path else _Any()
    space: dict[str, Any] = {"spider": spider, "Request": Request}

    def fetch(target: str | Request) -> Page:
        request = target if isinstance(target, Request) else Request(str(target))
        page = fetch_page(spider, request, sets)
        space["page"] = space["response"] = page
        return page

    space["fetch"] = fetch
    page = fetch(url)
    banner = (
        f"crashsafe shell: page = {page!r} (also bound as `response`, as in Scrapy)\n"
        '  page.css("title::text").get(), page.xpath(...), page.text, page.headers\n'
        "  fetch(url) loads another page into `page`; Ctrl-D leaves."
    )
    code.interact(banner=banner, local=space, exitmsg="")


class _Any(Spider):
    name = "shell"
