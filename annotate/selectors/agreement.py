"""Inter-annotator agreement for the lead dashboard: the reads that turn annotation rows into label
arrays, and the agreement statistics over those arrays (Cohen's κ of two raters, Fleiss' κ of many,
specific agreement per class — pure functions at the end of this module, also used by the evaluation
for model-vs-human κ). Each annotator's own figures (accuracy, speed, labels per day) are in
selectors/people.py."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from annotate.models import Annotation, Project
from predictor.evaluate import confusion


@dataclass(frozen=True)
class Rater:
    id: int
    username: str


@dataclass(frozen=True)
class PairAgreement:
    a: Rater
    b: Rater
    n_items: int  # items both labelled
    observed: float  # share of those items with the same label
    kappa: float | None  # Cohen's kappa; None when undefined (one label only, or no shared items)


@dataclass(frozen=True)
class ClassAgreement:
    label: str
    n_ratings: int  # ratings of this class on items with two or more raters
    specific: float | None  # P(second rater says j | first rater said j), pooled over items


@dataclass(frozen=True)
class AgreementSummary:
    labels: list[str]
    raters: list[Rater]
    pairs: list[PairAgreement]
    per_class: list[ClassAgreement]
    multi_rated_items: int  # items with two or more raters
    fleiss: float | None  # Fleiss' kappa over the items that have the most common rater count
    fleiss_items: int
    fleiss_raters: int


@dataclass(frozen=True)
class PairConfusion:
    a: Rater
    b: Rater
    labels: list[str]
    matrix: list[list[int]]  # rows: a's label, columns: b's label
    n_items: int

    @property
    def rows(self) -> list[tuple[str, list[int]]]:
        return list(zip(self.labels, self.matrix, strict=True))


@dataclass(frozen=True)
class _Ratings:
    labels: list[str]
    raters: dict[int, Rater]
    by_item: dict[int, dict[int, int]]  # item id -> {annotator id: label index}


def _ratings(project: Project) -> _Ratings:
    labels = list(project.labels.order_by("order", "id").values_list("id", "name"))
    index = {label_id: i for i, (label_id, _) in enumerate(labels)}
    raters: dict[int, Rater] = {}
    by_item: dict[int, dict[int, int]] = defaultdict(dict)
    rows = Annotation.objects.filter(item__project=project).values_list(
        "item_id", "annotator_id", "annotator__username", "label_id"
    )
    for item_id, annotator_id, username, label_id in rows:
        raters.setdefault(annotator_id, Rater(annotator_id, username))
        by_item[item_id][annotator_id] = index[label_id]
    return _Ratings([name for _, name in labels], raters, dict(by_item))


def _finite(value: float) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def _pair_vectors(r: _Ratings, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    both = [(v[a], v[b]) for v in r.by_item.values() if a in v and b in v]
    arr = np.array(both, dtype=np.int64).reshape(-1, 2)
    return arr[:, 0], arr[:, 1]


def _per_class(r: _Ratings, multi: list[dict[int, int]]) -> list[ClassAgreement]:
    """Specific agreement per class: sum_i n_ij (n_ij - 1) / sum_i n_ij (n_i - 1) over multi-rated items."""
    out = []
    for j, name in enumerate(r.labels):
        agree = pairs = ratings = 0
        for votes in multi:
            n_ij = sum(1 for v in votes.values() if v == j)
            agree += n_ij * (n_ij - 1)
            pairs += n_ij * (len(votes) - 1)
            ratings += n_ij
        out.append(ClassAgreement(name, ratings, agree / pairs if pairs else None))
    return out


def agreement_summary(*, project: Project) -> AgreementSummary:
    r = _ratings(project)
    n_classes = len(r.labels)
    pairs = []
    for a, b in combinations(sorted(r.raters), 2):
        va, vb = _pair_vectors(r, a, b)
        if len(va) == 0:
            continue
        kappa = _finite(cohen_kappa(va, vb, n_classes))
        pairs.append(PairAgreement(r.raters[a], r.raters[b], len(va), float(np.mean(va == vb)), kappa))
    multi = [votes for votes in r.by_item.values() if len(votes) >= 2]
    fleiss, fleiss_items, fleiss_raters = None, 0, 0
    if multi:
        fleiss_raters = Counter(len(v) for v in multi).most_common(1)[0][0]
        same = [v for v in multi if len(v) == fleiss_raters]
        counts = np.zeros((len(same), n_classes), dtype=np.int64)
        for i, votes in enumerate(same):
            for label_index in votes.values():
                counts[i, label_index] += 1
        fleiss, fleiss_items = _finite(fleiss_kappa(counts)), len(same)
    return AgreementSummary(
        labels=r.labels,
        raters=sorted(r.raters.values(), key=lambda x: x.username),
        pairs=pairs,
        per_class=_per_class(r, multi),
        multi_rated_items=len(multi),
        fleiss=fleiss,
        fleiss_items=fleiss_items,
        fleiss_raters=fleiss_raters,
    )


def pair_confusion(*, project: Project, a_id: int, b_id: int) -> PairConfusion | None:
    """Confusion matrix between two annotators on the items both labelled (None: unknown annotator)."""
    r = _ratings(project)
    if a_id not in r.raters or b_id not in r.raters or a_id == b_id:
        return None
    va, vb = _pair_vectors(r, a_id, b_id)
    matrix = np.asarray(confusion(va, vb, len(r.labels)), dtype=np.int64)
    return PairConfusion(r.raters[a_id], r.raters[b_id], r.labels, matrix.tolist(), len(va))


# -- the statistics (pure functions over label arrays) ----------------------------------------------


def cohen_kappa(a: np.ndarray, b: np.ndarray, n_classes: int) -> float:
    """Cohen's κ of two raters over the same items (model vs human, or human vs human).

    κ = (p_o − p_e) / (1 − p_e). When both raters use a single, identical class throughout, p_e = 1
    and κ is 0/0; it is reported as 1.0 (they agree perfectly). NaN for no items."""
    matrix = confusion(a, b, n_classes).astype(np.float64)
    n = matrix.sum()
    if n == 0:
        return float("nan")
    observed = np.trace(matrix) / n
    expected = float((matrix.sum(axis=1) / n) @ (matrix.sum(axis=0) / n))
    if expected >= 1.0:
        return 1.0
    return float((observed - expected) / (1.0 - expected))


def fleiss_kappa(counts: np.ndarray) -> float:
    """Fleiss' κ from counts[N, C] (raters who chose class c for item i).

    Items may have different numbers of raters (the annotation app's reality): each item's agreement
    uses its own n_i, class shares pool all ratings; items with fewer than two ratings are dropped.
    With a constant number of raters this is Fleiss (1971) exactly. NaN when no item has two ratings."""
    table = np.asarray(counts, dtype=np.float64)
    if table.ndim != 2 or (table < 0).any():
        raise ValueError("counts must be a non-negative [N, C] table")
    raters = table.sum(axis=1)
    table, raters = table[raters >= 2], raters[raters >= 2]
    if len(table) == 0:
        return float("nan")
    item_agreement = ((table**2).sum(axis=1) - raters) / (raters * (raters - 1))
    shares = table.sum(axis=0) / raters.sum()
    expected = float((shares**2).sum())
    observed = float(item_agreement.mean())
    if expected >= 1.0:
        return 1.0
    return (observed - expected) / (1.0 - expected)


def per_class_agreement(a: np.ndarray, b: np.ndarray, n_classes: int) -> list[float | None]:
    """Specific (positive) agreement per class: 2·n_cc / (n_c· + n_·c), the share of the two raters'
    uses of class c on which they agree. None for a class neither rater used."""
    matrix = confusion(a, b, n_classes)
    used = matrix.sum(axis=1) + matrix.sum(axis=0)
    return [float(2 * matrix[c, c] / used[c]) if used[c] else None for c in range(n_classes)]
