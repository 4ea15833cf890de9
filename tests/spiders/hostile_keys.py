"""The demo shop's products, and beside every fifth one records whose keys an escape
would confuse: a lone surrogate and its spelled-out escape, a NUL and its spelled-out
escape. Each must be its own record, read back with its own key and data. Sources with a
colon must not borrow another source's keys either."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from crashsafe import Page, Record
from crashsafe.demo.spider import DemoShop

#: What a product's sku becomes in the extra keys: each pair differs only by an escape, or
#: (the last two) a split surrogate pair and the one character it would make.
TWINS = ("\ud800", "\\ud800", "\x00", "\\x00", "\udc80", "\\udc80", "\ud83d\ude00", "\U0001f600")


def hostile_keys(sku: str) -> dict[str, Any]:
    """The extra records of product ``sku``: key -> data."""
    return {f"{sku}{twin}": {"of": sku, "twin": twin} for twin in TWINS}


class HostileKeys(DemoShop):
    name = "hostile-keys"

    def parse(self, page: Page) -> Iterator[Any]:
        for item in super().parse(page):
            yield item
            if isinstance(item, Record) and int(str(item.key).removeprefix("SKU-")) % 5 == 0:
                for key, data in hostile_keys(str(item.key)).items():
                    yield Record(key=key, data=data)
                # "a" + "b:c" and "a:b" + "c" hashed the same text once
                yield Record(key=f"b:{item.key}", data={"source": "a"}, source="a")
                yield Record(key=str(item.key), data={"source": "a:b"}, source="a:b")
