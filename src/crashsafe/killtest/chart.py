"""A self-contained SVG of the kill test: rows stored and requests made per run, naive
vs crashsafe, against the minimum. No plotting library needed; ``.html`` wraps it."""

from __future__ import annotations

from html import escape
from pathlib import Path

from crashsafe.killtest import KillTestResult

COLORS = {"naive": "#d9534f", "crashsafe": "#2e8b57"}
W, H, PAD, GAP = 420, 260, 44, 40


def _panel(x0: int, title: str, values: list[dict[str, int]], minimum: int) -> list[str]:
    top = max([minimum, *(v for run in values for v in run.values())]) * 1.1
    inner_w, inner_h = W - PAD - 10, H - PAD - 30
    base_y = 30 + inner_h
    out = [
        f'<text x="{x0 + W / 2}" y="18" text-anchor="middle" font-weight="bold">'
        f"{escape(title)}</text>",
        f'<line x1="{x0 + PAD}" y1="{base_y}" x2="{x0 + W - 10}" y2="{base_y}" stroke="#333"/>',
    ]
    slot = inner_w / max(1, len(values))
    bar = slot / 3
    for i, run in enumerate(values):
        for j, (name, v) in enumerate(run.items()):
            h = inner_h * v / top
            x = x0 + PAD + i * slot + bar * 0.5 + j * bar
            out += (
                f'<rect x="{x:.1f}" y="{base_y - h:.1f}" width="{bar:.1f}" height="{h:.1f}" '
                f'fill="{COLORS.get(name, "#888")}"><title>run {i + 1} {escape(name)}: {v}'
                "</title></rect>",
                f'<text x="{x + bar / 2:.1f}" y="{base_y - h - 3:.1f}" text-anchor="middle" '
                f'font-size="10">{v}</text>',
            )
        out.append(
            f'<text x="{x0 + PAD + (i + 0.5) * slot:.1f}" y="{base_y + 14}" '
            f'text-anchor="middle" font-size="11">run {i + 1}</text>'
        )
    y = base_y - inner_h * minimum / top
    out += [
        f'<line x1="{x0 + PAD}" y1="{y:.1f}" x2="{x0 + W - 10}" y2="{y:.1f}" '
        'stroke="#333" stroke-dasharray="5,4"/>',
        f'<text x="{x0 + PAD - 4}" y="{y + 4:.1f}" text-anchor="end" font-size="11">'
        f"{minimum}</text>",
        f'<text x="{x0 + PAD - 4}" y="{30 + 4}" text-anchor="end" font-size="11">{int(top)}</text>',
    ]
    return out


def svg(result: KillTestResult) -> str:
    rows = [{n: o.rows for n, o in run.items()} for run in result.runs]
    reqs = [{n: o.requests for n, o in run.items()} for run in result.runs]
    minimum = min(o.minimum for run in result.runs for o in run.values())
    width = 2 * W + GAP
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{H + 30}" '
        'font-family="sans-serif" font-size="13">',
        f'<rect width="{width}" height="{H + 30}" fill="white"/>',
        *_panel(0, f"rows stored (dashed: {result.products} products)", rows, result.products),
        *_panel(W + GAP, "requests made (dashed: the minimum)", reqs, minimum),
    ]
    for i, (name, color) in enumerate(COLORS.items()):
        x = PAD + i * 120
        parts.append(f'<rect x="{x}" y="{H + 8}" width="12" height="12" fill="{color}"/>')
        parts.append(f'<text x="{x + 16}" y="{H + 18}">{name}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def write_chart(result: KillTestResult, path: Path) -> None:
    picture = svg(result)
    if path.suffix.lower() in {".html", ".htm"}:
        picture = (
            "<!doctype html><meta charset='utf-8'><title>crashsafe kill test</title>"
            f"<body style='font-family:sans-serif'>{picture}</body>"
        )
    path.write_text(picture, encoding="utf-8")
