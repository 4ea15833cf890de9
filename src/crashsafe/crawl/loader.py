"""Find a Spider class from the CLI's SPIDER argument."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType

from crashsafe.crawl.spider import Spider
from crashsafe.errors import SpiderLoadError


def _module_from_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise SpiderLoadError(f"spider file {path} does not exist")
    name = f"crashsafe_spider_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SpiderLoadError(f"cannot import {path}: is it a .py file?")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise SpiderLoadError(f"importing {path} failed: {type(exc).__name__}: {exc}") from exc
    return module


def load_spider(target: str) -> type[Spider]:
    """``path/file.py[:Class]`` or ``package.module:Class`` → the Spider subclass."""
    where, _, cls_name = target.partition(":")
    if where.endswith(".py") or "/" in where:
        module = _module_from_file(Path(where))
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            raise SpiderLoadError(
                f"cannot import module {where!r}: {exc}. Use path/file.py[:Class] or module:Class"
            ) from exc
    if cls_name:
        found = getattr(module, cls_name, None)
        if not (inspect.isclass(found) and issubclass(found, Spider)):
            raise SpiderLoadError(f"{where} has no Spider subclass named {cls_name!r}")
        return found
    spiders = [
        obj
        for obj in vars(module).values()
        if inspect.isclass(obj)
        and issubclass(obj, Spider)
        and obj is not Spider
        and obj.__module__ == module.__name__
    ]
    if len(spiders) != 1:
        names = ", ".join(s.__name__ for s in spiders) or "none"
        raise SpiderLoadError(
            f"{where} defines {len(spiders)} Spider classes ({names}): name one as "
            f"{where}:ClassName"
        )
    return spiders[0]
