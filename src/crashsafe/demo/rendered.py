"""The demo spider for the JavaScript demo shop (``crashsafe demo-site --js``)."""

from __future__ import annotations

from crashsafe.demo.spider import DemoShop


class DemoShopRendered(DemoShop):
    """The demo spider for a shop whose product pages are built by JavaScript
    (``crashsafe demo-site --js`` or ``--js-share``): a page without a price or product
    links as fetched is rendered in Chromium (``docs/rendering.md``)."""

    name = "demo-shop-js"
    render = "auto"
    render_when_missing = ".price, a.product"
