"""``batch report``: one row per id from one or more checkpoints, aggregates recomputed."""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from crashsafe.batch.checkpoint import dead_lines, scan
from crashsafe.batch.items import Item
from crashsafe.batch.task import Usage, add_usage
from crashsafe.errors import ConfigError


@dataclass(slots=True)
class BatchReport:
    rows: dict[str, Any] = field(default_factory=dict)  # id -> result (last written wins)
    written: int = 0  # id occurrences across all lines
    batches: int = 0
    corrupt_lines: int = 0
    usage: Usage = field(default_factory=dict)
    labels: Counter[str] = field(default_factory=Counter)
    failed_not_done: int = 0
    cost: float | None = None  # None: no cost recorded and no prices given
    cost_recorded: bool = False  # the cost is what the lines recorded (at their runs' prices)
    cost_batch_api: float = 0.0  # of which paid through a Batch API, at its batch prices
    items_batch_api: int = 0  # answers written by a run --via batch-api

    @property
    def duplicates(self) -> int:
        return self.written - len(self.rows)

    def summary(self) -> dict[str, Any]:
        return {
            "items": len(self.rows),
            "batches": self.batches,
            "written": self.written,
            "duplicates_folded": self.duplicates,
            "corrupt_lines": self.corrupt_lines,
            "failed_not_done": self.failed_not_done,
            "usage": self.usage,
            "cost": None if self.cost is None else round(self.cost, 6),
            "cost_recorded": self.cost_recorded,
            "cost_batch_api": round(self.cost_batch_api, 6),
            "items_batch_api": self.items_batch_api,
            "labels": dict(self.labels.most_common()),
        }


def build_report(
    paths: Sequence[Path], *, price_in: float = 0.0, price_out: float = 0.0
) -> BatchReport:
    """One row per id over ``paths``; the cost is what the lines recorded (each at its run's
    prices), lines without one priced at ``price_in``/``price_out`` when given."""
    report = BatchReport()
    failed_ids: set[str] = set()
    priced = bool(price_in or price_out)

    def cost_of(line: dict[str, Any]) -> float | None:
        recorded = line.get("cost")
        if isinstance(recorded, int | float) and not isinstance(recorded, bool):
            report.cost_recorded = True
            return float(recorded)
        if not priced:
            return None
        usage = line.get("usage")
        if not isinstance(usage, dict):
            usage = {}
        tokens_in, tokens_out = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
        return float(tokens_in * price_in + tokens_out * price_out) / 1e6

    costs: list[float | None] = []
    for path in paths:
        if not path.exists():
            raise ConfigError(f"checkpoint {path} does not exist")
        found = scan(path)
        if found.ledger_lines and not found.lines:
            raise ConfigError(
                f"{path} is the ledger of a Batch API job, not a checkpoint: give the job's "
                "checkpoint (its name without .batches)"
            )
        report.corrupt_lines += found.corrupt + found.ledger_lines
        for line in found.lines:
            report.batches += 1
            add_usage(report.usage, line.get("usage") or {})
            costs.append(cost_of(line))
            if line.get("via") == "batch-api":
                report.cost_batch_api += costs[-1] or 0.0
                report.items_batch_api += len(line["ids"])
            for item_id, result in zip(line["ids"], line["results"], strict=True):
                report.written += 1
                report.rows[item_id] = result
        for line in dead_lines(path):
            failed_ids.update(line.get("ids", []))
            add_usage(report.usage, line.get("usage") or {})
            costs.append(cost_of(line))
    report.failed_not_done = len(failed_ids - report.rows.keys())
    for result in report.rows.values():
        if isinstance(result, dict) and isinstance(result.get("label"), str):
            report.labels[result["label"]] += 1
    known = [c for c in costs if c is not None]
    if known:
        report.cost = sum(known)
    return report


def joined(report: BatchReport, items: Iterable[Item]) -> Iterator[dict[str, Any]]:
    """Every input row (duplicates too, in file order) with its answer's fields added (a
    result that is not an object as ``result``; a field the row has already as
    ``result_<name>``); a row not answered yet has no answer fields."""
    for item in items:
        row = dict(item.data)
        result = report.rows.get(item.id, _MISSING)
        if result is _MISSING:
            yield row
            continue
        fields = result if isinstance(result, dict) else {"result": result}
        for name, value in fields.items():
            row[f"result_{name}" if name in item.data else name] = value
        yield row


_MISSING = object()


def write_csv(report: BatchReport, out: IO[str]) -> None:
    fields: dict[str, None] = {}
    for result in report.rows.values():
        if isinstance(result, dict):
            fields.update(dict.fromkeys(result))
    writer = csv.writer(out)
    writer.writerow(["id", *fields] if fields else ["id", "result"])
    for item_id, result in report.rows.items():
        if fields:
            values = [result.get(f) if isinstance(result, dict) else None for f in fields]
            writer.writerow(
                [item_id, *(json.dumps(v) if isinstance(v, dict | list) else v for v in values)]
            )
        else:
            writer.writerow([item_id, json.dumps(result)])


def write_jsonl(report: BatchReport, out: IO[str]) -> None:
    """One line per id: ``{"id": ..., "result": ...}``, as ``write_json``'s rows."""
    for item_id, result in report.rows.items():
        out.write(json.dumps({"id": item_id, "result": result}, ensure_ascii=False) + "\n")


def write_json(report: BatchReport, out: IO[str]) -> None:
    json.dump(
        {
            "summary": report.summary(),
            "rows": [{"id": k, "result": v} for k, v in report.rows.items()],
        },
        out,
        ensure_ascii=False,
        indent=1,
    )
    out.write("\n")
