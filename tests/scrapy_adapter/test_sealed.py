"""The Scrapy adapter stores a request's secrets sealed (#24 item 3), and a restarted
crawl sends them exactly: credential headers, cookies, a proxy's password in meta, a
login form, a latin-1 body."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from aiohttp import web

from crashsafe.demo.server import AppThread
from tests.faults.proxy import forward_proxy
from tests.helpers import cli_env

pytest.importorskip("scrapy", reason="the Scrapy adapter needs crashsafe[scrapy]")

SPIDER = str(Path(__file__).with_name("secrets_spider.py"))
SECRETS = ["S3CRET-T0KEN", "K3Y-VALUE", "C00KIE-VALUE", "PA55W0RD", "L4TIN-PW", "PR0XY-PW"]


def test_the_adapter_seals_a_requests_secrets_and_replays_them_exactly(tmp_path: Path) -> None:
    import json

    from crashsafe.contrib.scrapy import SETTINGS

    seen: dict[str, dict[str, str]] = {}

    async def handle(request: web.Request) -> web.Response:
        seen[request.path] = {
            "auth": request.headers.get("Authorization", ""),
            "key": request.headers.get("X-Api-Key", ""),
            "cookie": request.headers.get("Cookie", ""),
            "body": (await request.read()).decode("latin-1"),
        }
        return web.Response(text="<p>ok</p>", content_type="text/html")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    db = tmp_path / "s.db"
    with forward_proxy("u", "PR0XY-PW") as proxy, AppThread(app) as site:
        cmd = [sys.executable, "-m", "scrapy", "runspider", SPIDER,
               "-a", f"start={site.url}/start",
               "-a", f"proxy=http://u:PR0XY-PW@127.0.0.1:{proxy.port}",
               "-s", f"SCHEDULER={SETTINGS['SCHEDULER']}",
               "-s", f"SPIDER_MIDDLEWARES={json.dumps(SETTINGS['SPIDER_MIDDLEWARES'])}",
               "-s", f"DOWNLOADER_MIDDLEWARES={json.dumps(SETTINGS['DOWNLOADER_MIDDLEWARES'])}",
               "-s", "CRASHSAFE_ITEM_KEY=sku", "-s", f"CRASHSAFE_DB=sqlite:///{db}",
               "-s", "LOG_LEVEL=WARNING"]  # fmt: skip
        # The first run stops after the start page: the three requests wait in the store
        first = subprocess.run([*cmd, "-s", "CLOSESPIDER_PAGECOUNT=1"], env=cli_env(),
                               text=True, capture_output=True, timeout=120)  # fmt: skip
        assert first.returncode == 0, first.stderr
        assert set(seen) == {"/start"}
        with sqlite3.connect(db) as conn:
            at_rest = "\n".join(str(r[0]) for r in conn.execute("SELECT request FROM frontier"))
        assert at_rest.count("$sealed") >= 5, at_rest
        for secret in SECRETS:
            assert secret not in at_rest, secret
        # the login's key is not its plain fingerprint (a hash of the body)
        from scrapy import FormRequest
        from scrapy.utils.request import fingerprint

        login = FormRequest(f"{site.url}/login", formdata={"user": "me", "password": "PA55W0RD"})
        with sqlite3.connect(db) as conn:
            keys = [str(r[0]) for r in conn.execute("SELECT url FROM frontier")]
        assert any(k.startswith(f"{site.url}/login#") for k in keys), keys
        assert not any(fingerprint(login).hex()[:32] in k for k in keys), keys
        rest = subprocess.run(cmd, env=cli_env(), text=True, capture_output=True, timeout=120)
        assert rest.returncode == 0, rest.stderr
    assert seen["/api"]["auth"] == "Bearer S3CRET-T0KEN" and seen["/api"]["key"] == "K3Y-VALUE"
    assert "sid=C00KIE-VALUE" in seen["/api"]["cookie"]
    assert seen["/login"]["body"] == "user=me&password=PA55W0RD"
    assert seen["/old-login"]["body"] == "user=m\xe9&pass=L4TIN-PW"
    assert f"GET {site.url}/api" in proxy.log  # through the proxy, its password opened
