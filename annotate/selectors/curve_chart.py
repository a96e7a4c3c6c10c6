"""The ML page's learning curve as a small SVG drawn from the rounds' points: test accuracy in % (as
the tables say it) against labels, whole-number label ticks, each line named in words. The gain
sentence stays in the page's text, so no subtitle is clipped by the figure."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any
from xml.sax.saxutils import escape

WIDTH, HEIGHT = 640, 340
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 12, 84  # px: room for the % ticks, the label ticks and the legend
# The arms evaluation.py records, in the words the page uses; an unknown arm keeps its own name.
ARM_NAMES = {
    "prod": "model in use (every label so far)",
    "prod0": "model in use, before retraining from scratch",
    "scratch": "retrained from scratch",
    "active": "active selection",
    "random": "random selection",
}
COLOURS = ["#2563eb", "#dd8452", "#15803d", "#b91c1c", "#7c3aed"]


def label_ticks(top: int, *, most: int = 6) -> list[int]:
    """Whole-number ticks from 0 to at least ``top``, a 1-2-5 step, at most ``most`` of them."""
    top = max(top, 1)
    steps = (m * 10**e for e in range(12) for m in (1, 2, 5))
    step = next(s for s in steps if math.ceil(top / s) + 1 <= most)
    return list(range(0, math.ceil(top / step) * step + 1, step))


def curve_svg(points: Sequence[Mapping[str, Any]]) -> str:
    """One polyline per arm of (labels, accuracy) points; y is 0–100 %."""
    series: dict[str, list[tuple[int, float]]] = {}
    for point in points:
        series.setdefault(str(point["arm"]), []).append((int(point["labels"]), float(point["accuracy"])))
    xs = label_ticks(max((x for line in series.values() for x, _ in line), default=1))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def at(x: float, y: float) -> tuple[float, float]:
        return LEFT + plot_w * x / xs[-1], TOP + plot_h * (1 - y)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
        'font-family="sans-serif" font-size="11">'
    ]
    for pct in range(0, 101, 20):
        _, y = at(0, pct / 100)
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e7eb"/>')
        parts.append(f'<text class="y-tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{pct} %</text>')
    for tick in xs:
        x, y = at(tick, 0)
        parts.append(f'<text class="x-tick" x="{x:.1f}" y="{y + 16:.1f}" text-anchor="middle">{tick}</text>')
    parts.append(f'<text x="{LEFT + plot_w / 2:.1f}" y="{TOP + plot_h + 34}" text-anchor="middle">labels</text>')
    parts.append(
        f'<text x="14" y="{TOP + plot_h / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {TOP + plot_h / 2:.1f})">test accuracy</text>'
    )
    for i, (arm, line) in enumerate(series.items()):
        colour = COLOURS[i % len(COLOURS)]
        xy = [at(x, y) for x, y in sorted(line)]
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        parts += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>' for x, y in xy]
        row_y = TOP + plot_h + 52 + 14 * (i // 2)
        col_x = LEFT + (plot_w / 2) * (i % 2)
        parts.append(f'<rect x="{col_x:.1f}" y="{row_y - 8}" width="12" height="3" fill="{colour}"/>')
        name = escape(ARM_NAMES.get(arm, arm))
        parts.append(f'<text class="legend" x="{col_x + 16:.1f}" y="{row_y - 3}">{name}</text>')
    parts.append("</svg>")
    return "\n".join(parts)
