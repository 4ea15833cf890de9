"""Fixtures more than one module of tests/integration uses."""

from tests.integration.test_deliver import crawled, endpoint

__all__ = ["crawled", "endpoint"]
