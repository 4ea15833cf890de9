"""The crawl engine and the spider API.

``crashsafe.crawl`` is also the blocking crawl function of the Python API
(``crashsafe.crawl(MySpider, db="sqlite:///shop.db")``, :func:`crashsafe.api.crawl`): once
this package is imported, the attribute ``crashsafe.crawl`` is this module, so the module
itself is made callable and passes the call on. Both spellings then work, whichever was
imported first.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crashsafe.crawl.engine import CrawlResult


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> CrawlResult:
        from crashsafe.api import crawl

        return crawl(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
