"""Logging: what a job says goes through Python's ``logging``, under ``crashsafe.*``.

Loggers: ``crashsafe.crawl`` (progress lines off a terminal, waits, pages not finished),
``crashsafe.crawl.requests`` (one line per request, at DEBUG), ``crashsafe.store``
(reconnects), ``crashsafe.scrapy`` (the Scrapy adapter), and one per spider, named after
it (``Spider.logger``, as in Scrapy). The CLI installs one handler on the root logger,
writing to stderr, as text (``2026-12-02 06:31:02 INFO crashsafe.crawl: ...``) or as one
JSON object per line (``--log-format json``: ``time``, ``level``, ``logger``,
``message`` and a line's own fields, e.g. a progress line's figures); a program that
uses crashsafe as a library configures logging its own way.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

__all__ = ["LEVELS", "JsonFormatter", "configure", "fields", "json_lines", "spider_logger"]

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
#: The attributes every LogRecord has: what is not among them came with ``extra=``.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}
_TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def fields(**values: Any) -> dict[str, Any]:
    """``extra=`` for a log call: fields a JSON line carries beside its message."""
    return {"crashsafe": values}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (ISO 8601, UTC), ``level``, ``logger``,
    ``message``, the fields given with :func:`fields`, and ``error`` (a traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        extra = getattr(record, "crashsafe", None)
        if isinstance(extra, dict):
            line.update(extra)
        for key, value in vars(record).items():
            if key not in _STANDARD and key != "crashsafe" and key not in line:
                line[key] = value
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


class _Stderr(logging.Handler):
    """Writes to whatever ``sys.stderr`` is when a line is written (the CLI wraps it;
    tests capture it), never to the object it was when logging was configured."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:
            self.handleError(record)


_json = [False]


def json_lines() -> bool:
    """Whether :func:`configure` was asked for JSON lines (then a command's own lines,
    its summary, go through logging too, so that every line of stderr is JSON)."""
    return _json[0]


def configure(level: str = "INFO", fmt: str = "text") -> None:
    """Send crashsafe's lines (``crashsafe.*``, and the spiders': :func:`spider_logger`)
    at ``level`` and above to stderr, as ``fmt`` (``text`` or ``json``); every other
    library's only from WARNING (an HTTP client's line per request would drown ours)."""
    name = level.upper()
    if name not in LEVELS:
        raise ValueError(f"log level {level!r}: use one of {', '.join(LEVELS)}")
    handler = _Stderr()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(_TEXT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("crashsafe").setLevel(name)
    for spider in _spiders:
        logging.getLogger(spider).setLevel(name)
    _level[0] = name
    _json[0] = fmt == "json"


_level: list[str | None] = [None]  # what configure() set, once it ran
_spiders: set[str] = set()


def spider_logger(name: str) -> logging.Logger:
    """The logger of the spider named ``name`` (Scrapy names it so too), at crashsafe's
    level once the CLI configured logging (a library user's configuration is left as
    it is)."""
    logger = logging.getLogger(name)
    if name not in _spiders:
        _spiders.add(name)
        if _level[0] is not None and logger.level == logging.NOTSET:
            logger.setLevel(_level[0])
    return logger
