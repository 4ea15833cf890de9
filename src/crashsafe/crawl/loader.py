"""Find a Spider class from the CLI's SPIDER argument."""

from __future__ import annotations

import inspect

from crashsafe.crawl.spider import Spider
from crashsafe.errors import SpiderLoadError
from crashsafe.loading import import_target


def load_spider(target: str) -> type[Spider]:
    """``path/file.py[:Class]`` or ``package.module:Class`` → the Spider subclass."""
    where, _, cls_name = target.partition(":")
    module = import_target(where, error=SpiderLoadError)
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
