"""What the model says about an item now: its newest prediction, by round (the item browser's Model
column, its confidence filter and its sorts)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import F

from annotate.models import Prediction


@dataclass(frozen=True)
class ModelView:
    label: str  # the predicted label's name
    confidence: float  # top probability
    uncertainty: float  # as the round stored it; else 1 − margin between the top two probabilities
    round: int | None  # the round whose selection wrote it (None: that round is gone)


def newest_predictions(*, item_ids: Any) -> dict[int, ModelView]:
    """item id → its prediction from the highest-numbered round (ties, and rows whose round is gone,
    by when they were written). By round, not by row date: a rerun of a round's selection updates the
    rows it had written, so a newer round's row can be the older one."""
    rows = Prediction.objects.filter(item__in=item_ids).order_by(
        "item_id", F("round__number").asc(nulls_first=True), "created_at", "id"
    )
    views: dict[int, ModelView] = {}
    fields = ("item_id", "label__name", "probs", "uncertainty", "round__number")
    for item_id, label, probs, uncertainty, number in rows.values_list(*fields).iterator(chunk_size=5000):
        if isinstance(probs, list) and probs:
            top = sorted((float(p) for p in probs), reverse=True)
            margin = top[0] - (top[1] if len(top) > 1 else 0.0)
            measured = float(uncertainty) if uncertainty is not None else 1.0 - margin
            views[item_id] = ModelView(label, top[0], measured, number)
    return views  # later rows overwrote earlier ones: the newest round's wins
