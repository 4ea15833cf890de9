"""OpenTelemetry traces (the ``otel`` extra), off unless the standard environment asks.

A crawl makes a span per page (``crawl.page``: lease to commit, with ``crawl.fetch``,
``crawl.parse`` and ``crawl.commit`` inside it), a batch job a span per call
(``batch.call``: model, items, tokens, cost). Nothing is made, and nothing imported,
unless ``OTEL_TRACES_EXPORTER`` is set to ``otlp`` or ``console``, or
``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set (with
``OTEL_TRACES_EXPORTER=none`` winning); ``OTEL_SERVICE_NAME`` names the service
(``crashsafe`` by default). A program that configured a tracer provider of its own passes
its tracer instead (``Crawler(..., tracer=...)``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
from typing import Any

from crashsafe.errors import ConfigError

_configured: Any = None  # the tracer made from the environment, once
_NO_SPAN = contextlib.nullcontext()  # reusable: it holds nothing


def tracer_from_env() -> Any:
    """A tracer if the environment asks for traces, else None (see the module docstring)."""
    global _configured
    exporter_name = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if exporter_name == "none" or not (exporter_name or endpoint):
        return None
    if _configured is not None:
        return _configured
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise ConfigError(
            "OTEL_* asks for traces but OpenTelemetry is not installed: "
            "pip install 'crashsafe[otel]' (or unset OTEL_TRACES_EXPORTER)"
        ) from exc
    exporter: Any
    if exporter_name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        exporter = ConsoleSpanExporter()
    elif exporter_name in ("", "otlp"):
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as exc:
            raise ConfigError(
                "OTEL_* asks for OTLP traces but the exporter is not installed: "
                "pip install 'crashsafe[otel]'"
            ) from exc
        exporter = OTLPSpanExporter()  # reads OTEL_EXPORTER_OTLP_* itself
    else:
        raise ConfigError(
            f"OTEL_TRACES_EXPORTER={exporter_name!r}: crashsafe knows otlp, console and none"
        )
    service = os.environ.get("OTEL_SERVICE_NAME", "crashsafe")
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    atexit.register(provider.shutdown)  # what is buffered goes out before the process ends
    _configured = provider.get_tracer("crashsafe")
    return _configured


def span(tracer: Any, name: str, **attributes: Any) -> Any:
    """``tracer``'s span ``name`` as the current one (a context manager yielding it), or a
    context manager that does nothing and yields None when there is no tracer."""
    if tracer is None:
        return _NO_SPAN  # (on every page's path: nothing made when nobody traces)
    return tracer.start_as_current_span(
        name, attributes={k: v for k, v in attributes.items() if v is not None}
    )
