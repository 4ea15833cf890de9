"""Integrations with other tools, each an optional extra (``crashsafe[scrapy]``)."""
