"""Find a Spider class from the CLI's SPIDER argument."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from crashsafe.crawl.spider import Spider
from crashsafe.errors import SpiderLoadError
from crashsafe.loading import import_target

#: Where ``crashsafe crawl NAME`` looks for a spider named NAME (Scrapy's project layout:
#: ``myproject/spiders/shop.py``), relative to the current folder.
SPIDER_FOLDERS = ("spiders", "*/spiders")


def load_spider(target: str) -> type[Spider]:
    """``path/file.py[:Class]``, ``package.module[:Class]``, or the ``name`` of a spider in
    the project's ``spiders/`` folder (``SPIDER_FOLDERS``) → the Spider subclass."""
    if ":" not in target and "/" not in target and not target.endswith(".py"):
        named = spiders_named(target)
        if len(named) == 1:
            return named[0]
        if len(named) > 1:
            where = ", ".join(sorted({inspect.getfile(s) for s in named}))
            raise SpiderLoadError(f"{len(named)} spiders are named {target!r} ({where})")
    where, _, cls_name = target.partition(":")
    try:
        module = import_target(where, error=SpiderLoadError)
    except SpiderLoadError as exc:
        if ":" in target or "." in target or "/" in target:
            raise
        raise SpiderLoadError(
            f"no spider named {target!r} in {', '.join(SPIDER_FOLDERS)} of {Path.cwd()}, "
            f"and no module {target!r}: give path/file.py, module:Class, or a spider's name "
            f"from a project's spiders/ folder{_scrapy_named(target)}"
        ) from exc
    if cls_name:
        found = getattr(module, cls_name, None)
        if not (inspect.isclass(found) and issubclass(found, Spider)):
            raise SpiderLoadError(
                f"{where} has no Spider subclass named {cls_name!r}{_scrapy_hint(module, where)}"
            )
        return found
    spiders = [
        obj
        for obj in vars(module).values()
        if inspect.isclass(obj)
        and issubclass(obj, Spider)
        and obj is not Spider
        and obj.__module__ == module.__name__
    ]
    if not spiders:
        hint = _scrapy_hint(module, where) or " (a spider subclasses crashsafe.Spider)"
        raise SpiderLoadError(f"{where} defines no crashsafe Spider class{hint}")
    if len(spiders) > 1:
        names = ", ".join(s.__name__ for s in spiders)
        raise SpiderLoadError(
            f"{where} defines {len(spiders)} Spider classes ({names}): name one as "
            f"{where}:ClassName"
        )
    return spiders[0]


def _scrapy_spiders(module: object) -> list[Any]:
    """The Scrapy spider classes ``module`` defines (subclasses of ``scrapy.Spider``,
    ``CrawlSpider``...; not items or loaders), found without importing Scrapy."""
    return [
        obj
        for obj in vars(module).values()
        if inspect.isclass(obj)
        and obj.__module__ == getattr(module, "__name__", None)
        and any(
            base.__module__.startswith("scrapy.") and base.__name__.endswith("Spider")
            for base in obj.__mro__[1:]
        )
    ]


def _scrapy_hint(module: object, where: str, *, named: str = "") -> str:
    """What to do with a module that defines a Scrapy spider where a crashsafe one was
    looked for ("" if it defines none)."""
    found = _scrapy_spiders(module)
    if not found:
        return ""
    how = (
        f"`scrapy crawl {named}` in its project"
        if named
        else f"`scrapy runspider {where}`"
        if where.endswith(".py")
        else "`scrapy crawl NAME` in its project"
    )
    return (
        f"; {', '.join(s.__name__ for s in found)} is a Scrapy spider: run it with {how} "
        "and crashsafe's adapter settings, or port it to crashsafe.Spider (docs/scrapy.md "
        "shows both)"
    )


def _scrapy_named(name: str, root: Path | None = None) -> str:
    """The hint for a Scrapy spider named ``name`` in the project's spider folders."""
    for f in _spider_files(root or Path.cwd()):
        try:
            module = import_target(str(f), error=SpiderLoadError)
        except SpiderLoadError:
            continue
        if any(getattr(s, "name", None) == name for s in _scrapy_spiders(module)):
            return _scrapy_hint(module, str(f), named=name)
    return ""


def _spiders_in(path: Path) -> list[type[Spider]]:
    module = import_target(str(path), error=SpiderLoadError)
    return [
        obj
        for obj in vars(module).values()
        if inspect.isclass(obj) and issubclass(obj, Spider) and obj.__module__ == module.__name__
    ]


def spiders_named(name: str, root: Path | None = None) -> list[type[Spider]]:
    """The Spider classes named ``name`` in the ``.py`` files of the project's spider
    folders (each file is imported to find out, as Scrapy imports its spider modules)."""
    files = _spider_files(root or Path.cwd())
    return [s for f in files for s in _spiders_in(f) if s.name == name]


def _spider_files(root: Path) -> list[Path]:
    """The ``.py`` files of the project's spider folders under ``root``."""
    found = {f for folder in SPIDER_FOLDERS for f in root.glob(f"{folder}/*.py")}
    return sorted(f for f in found if f.name != "__init__.py")
