"""Plots for the dashboard and the simulation harness: learning curves (accuracy vs labels, one line
per arm or strategy, optionally mean ± spread over seeds) and reliability diagrams.

matplotlib is imported inside the functions and used through ``Figure`` + the Agg canvas, never
pyplot: no global figure state, so plotting is safe in web and worker threads. SVG output is
deterministic (fixed hash salt, no date), so the same data gives the same bytes.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

_SVG_RC: dict[Any, Any] = {"svg.hashsalt": "alann", "svg.fonttype": "none"}  # stable ids; text stays text (smaller)
_SIZE = (6.4, 3.6)  # inches: a dashboard card's aspect ratio


def learning_curve_svg(
    series: Mapping[str, Sequence[tuple[int, float]]],
    *,
    title: str,
    ylabel: str = "test accuracy",
) -> str:
    """One line per arm (e.g. "active", "random") of (labels, value) points, as an SVG string."""
    spread = {name: [(x, y, 0.0) for x, y in points] for name, points in series.items()}
    return _to_svg(_learning_figure(spread, title=title, ylabel=ylabel))


def learning_curve_png(
    series_with_spread: Mapping[str, Sequence[tuple[int, float, float]]],
    path: str | Path,
    *,
    title: str = "Learning curves",
    ylabel: str = "test accuracy",
) -> Path:
    """Mean ± spread (e.g. std over seeds) per strategy: points are (labels, mean, spread). Writes a
    PNG at ``path`` and returns it."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure = _learning_figure(series_with_spread, title=title, ylabel=ylabel)
    figure.savefig(out, format="png", dpi=150, metadata={"Software": None})
    return out


def reliability_svg(bins: Sequence[Mapping[str, Any]], *, title: str = "Reliability") -> str:
    """Reliability diagram from ``predictor.evaluate.reliability_bins``: accuracy bars and mean
    confidence dots per non-empty bin against the diagonal, item count above each bar."""
    figure, axes = _figure(size=(4.0, 4.0))
    filled = [b for b in bins if b["count"]]
    centres = [(b["lo"] + b["hi"]) / 2 for b in filled]
    width = [0.9 * (b["hi"] - b["lo"]) for b in filled]
    axes.bar(centres, [b["accuracy"] for b in filled], width=width, color="#4c72b0", label="accuracy")
    axes.plot([0, 1], [0, 1], linestyle="--", color="#888888", linewidth=1, label="perfect calibration")
    axes.scatter(centres, [b["confidence"] for b in filled], color="#dd8452", zorder=3, s=12, label="confidence")
    for x, b in zip(centres, filled, strict=True):
        axes.annotate(str(b["count"]), (x, b["accuracy"]), ha="center", va="bottom", fontsize=7)
    axes.set(xlim=(0, 1), ylim=(0, 1.05), xlabel="confidence (max probability)", ylabel="accuracy", title=title)
    axes.legend(loc="upper left", fontsize=7, frameon=False)
    return _to_svg(figure)


def _learning_figure(series: Mapping[str, Sequence[tuple[int, float, float]]], *, title: str, ylabel: str) -> Any:
    figure, axes = _figure(size=_SIZE)
    for name, points in series.items():
        ordered = sorted(points)
        xs = [p[0] for p in ordered]
        means = [p[1] for p in ordered]
        spreads = [p[2] for p in ordered]
        (line,) = axes.plot(xs, means, marker="o", markersize=3, label=name)
        if any(spreads):
            low = [m - s for m, s in zip(means, spreads, strict=True)]
            high = [m + s for m, s in zip(means, spreads, strict=True)]
            axes.fill_between(xs, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    axes.set(xlabel="labels", ylabel=ylabel, title=title)
    axes.grid(alpha=0.3)
    if series:
        axes.legend(fontsize=8, frameon=False)
    return figure


def _figure(*, size: tuple[float, float]) -> tuple[Any, Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=size, layout="constrained")
    FigureCanvasAgg(figure)
    return figure, figure.add_subplot()


def _to_svg(figure: Any) -> str:
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context(_SVG_RC):
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    return buffer.getvalue()


def curves_svg(points: Sequence[dict[str, Any]], title: str) -> str:
    """Learning curves (test accuracy vs labels used) of the prod, active and random arms."""
    series: dict[str, list[tuple[int, float]]] = {}
    for point in points:
        series.setdefault(str(point["arm"]), []).append((int(point["labels"]), float(point["accuracy"])))
    return learning_curve_svg({arm: sorted(xy) for arm, xy in series.items()}, title=title)
