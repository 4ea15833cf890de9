from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import crashsafe
from crashsafe.crawl.loader import load_spider
from crashsafe.crawl.settings import CrawlSettings
from crashsafe.demo.spider import DemoShop
from crashsafe.errors import ConfigError, SpiderLoadError
from crashsafe.retry_after import retry_after_seconds


def test_public_names_match_all() -> None:
    public = {
        n
        for n in dir(crashsafe)
        # (crashsafe.crawl is the crawl package too, made callable: the API's crawl())
        if not n.startswith("_")
        and (not inspect.ismodule(getattr(crashsafe, n)) or callable(getattr(crashsafe, n)))
    }
    assert set(crashsafe.__all__) == public - {"annotations", "TYPE_CHECKING", "Any"}
    for name in crashsafe.__all__:  # each resolves to the object of its home module
        assert getattr(crashsafe, name).__module__.startswith("crashsafe.")


def test_spider_attributes_then_overrides() -> None:
    class S(crashsafe.Spider):
        name = "s"
        concurrency = 3
        allowed_domains = ["a.com"]

    settings = S.crawl_settings(max_attempts=2)
    assert (settings.concurrency, settings.max_attempts) == (3, 2)
    assert settings.allowed_domains == ("a.com",)
    assert settings.host_limit == 3


def test_bad_settings_are_named() -> None:
    with pytest.raises(ConfigError, match="concurrency must be a number > 0"):
        CrawlSettings(concurrency=0)
    for bad in ({"timeout": float("inf")}, {"lease_seconds": float("nan")},
                {"max_response_bytes": -5}, {"per_host_delay": -1.0}):  # fmt: skip
        with pytest.raises(ConfigError, match=f"setting {next(iter(bad))} must be a number"):
            CrawlSettings(**bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="max_depth must be >= 0"):
        CrawlSettings(max_depth=-1)
    with pytest.raises(ConfigError, match="unknown setting"):
        CrawlSettings().replace(concurency=3)
    assert CrawlSettings.parse_value("obey_robots", "false") is False
    assert CrawlSettings.parse_value("per_host_delay", "0.5") == 0.5
    assert CrawlSettings.parse_value("handle_statuses", "403,451") == (403, 451)
    with pytest.raises(ConfigError, match="cannot use"):
        CrawlSettings.parse_value("concurrency", "many")


def test_load_spider_from_module_and_file(tmp_path: Path) -> None:
    assert load_spider("crashsafe.demo.spider:DemoShop") is DemoShop
    assert load_spider("crashsafe.demo.spider") is DemoShop
    f = tmp_path / "mine.py"
    f.write_text(
        "from crashsafe import Spider\n"
        "class A(Spider):\n    name = 'a'\n"
        "class B(Spider):\n    name = 'b'\n"
    )
    assert load_spider(f"{f}:B").name == "b"
    with pytest.raises(SpiderLoadError, match="defines 2 Spider classes"):
        load_spider(str(f))
    with pytest.raises(SpiderLoadError, match="does not exist"):
        load_spider(str(tmp_path / "missing.py"))
    with pytest.raises(SpiderLoadError, match="cannot import module"):
        load_spider("no_such_module_xyz:Spider")
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(SpiderLoadError, match="RuntimeError: boom"):
        load_spider(str(broken))
    empty = tmp_path / "empty.py"
    empty.write_text("X = 1\n")
    with pytest.raises(SpiderLoadError, match=r"defines no crashsafe Spider class \(a spider"):
        load_spider(str(empty))


def test_a_scrapy_spider_where_a_crashsafe_one_is_looked_for_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("scrapy")
    f = tmp_path / "theirs.py"
    f.write_text("import scrapy\nclass Off(scrapy.Spider):\n    name = 'off'\n")
    for target in (str(f), f"{f}:Off"):
        with pytest.raises(SpiderLoadError) as raised:
            load_spider(target)
        assert f"Off is a Scrapy spider: run it with `scrapy runspider {f}`" in str(raised.value)
    items = tmp_path / "items.py"  # Scrapy's items and loaders are not spiders
    items.write_text(
        "import scrapy\nfrom scrapy.loader import ItemLoader\n"
        "class Product(scrapy.Item):\n    name = scrapy.Field()\n"
        "class Loader(ItemLoader):\n    pass\n"
    )
    with pytest.raises(SpiderLoadError) as raised:
        load_spider(str(items))
    assert "Scrapy spider" not in str(raised.value)
    # a project's spiders/ folder: the name finds the Scrapy spider, and says how
    (tmp_path / "proj" / "spiders").mkdir(parents=True)
    (tmp_path / "proj" / "spiders" / "shop.py").write_text(
        "import scrapy\nclass Shop(scrapy.Spider):\n    name = 'shop'\n"
    )
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpiderLoadError) as raised:
        load_spider("shop")
    assert "Shop is a Scrapy spider: run it with `scrapy crawl shop` in its project" in str(
        raised.value
    )


def test_retry_after() -> None:
    assert retry_after_seconds("120") == 120
    assert retry_after_seconds(None) is None
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
