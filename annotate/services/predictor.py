"""A round's predictor (predictor/model.py) built from the database, and run on items.

The predictor of a finished round is its prod adapters, the prompt they are scored with, the blend
weight its evaluation fitted (``Round.metrics["blend"]["weight"]``; the adapters alone without one)
and, where that weight gives the proxy a share, the embedding proxy fitted on the labels the
adapters trained on (the round's frozen plan). Selection (the scores of the round after it),
evaluation (the ML page) and auto-labelling (its calibration and decisions) all build it here, so
they report and use the same probabilities under the same fingerprint.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from annotate.models import AdapterVersion, Round
from annotate.services import proxy as proxy_service
from predictor.calibrate import Calibrator
from predictor.model import Predictor, ProxyRef, labels_hash
from scoring.cache import text_hash


def predictor_for_round(source: Round | None, *, prompt_hash: str, weight: float | None = None) -> Predictor:
    """The predictor of ``source``'s prod adapters scored with the prompt of ``prompt_hash`` (the
    renderer the caller scores with: another prompt is another predictor). ``weight``: the blend
    weight, by default the one the round's evaluation recorded. None: the base model alone."""
    if source is None:
        return Predictor(adapters=(), prompt_hash=prompt_hash)
    adapters = AdapterVersion.objects.filter(round=source, arm=AdapterVersion.Arm.PROD).order_by("k")
    if weight is None:
        weight = recorded_weight(source)
    proxy = None
    if weight < 1.0:
        pairs = _plan_pairs(source)
        proxy = ProxyRef(labels_hash(pairs), len(pairs))
    return Predictor(
        adapters=tuple(adapters.values_list("content_hash", flat=True)),
        prompt_hash=prompt_hash,
        weight=weight,
        proxy=proxy,
    )


def recorded_weight(source: Round) -> float:
    """The blend weight the round's evaluation fitted; 1 (the adapters alone) where it fitted none
    (loop option ``blend`` off, a round evaluated before the blend)."""
    weight = ((source.metrics or {}).get("blend") or {}).get("weight")
    return float(weight) if isinstance(weight, int | float) else 1.0


def _plan_pairs(source: Round) -> list[tuple[int, int]]:
    from annotate.services.round_state import read_plan

    return [(int(i), int(y)) for i, y in read_plan(source)["prod:0"]]


@dataclass
class RoundPredictor:
    """A predictor with what it needs to run on items: the round its parts come from, whose proxy is
    fitted once (on the first call that needs it) and shared with its calibrated copies."""

    predictor: Predictor
    source: Round | None
    n_classes: int
    _fitted: dict[str, Any] = field(default_factory=dict)

    @property
    def fingerprint(self) -> str:
        return self.predictor.fingerprint()

    def probabilities(
        self, member_p: np.ndarray, texts: Sequence[str], hashes: Sequence[str] | None = None
    ) -> np.ndarray:
        """The predictor's distributions [N, C] over ``texts`` from the members' [K, N, C] scores."""
        proxy_p = self.proxy_probabilities(texts, hashes) if self.predictor.needs_proxy else None
        return self.predictor.probabilities(member_p, proxy_p)

    def proxy_probabilities(self, texts: Sequence[str], hashes: Sequence[str] | None = None) -> np.ndarray:
        """The plan proxy's distributions over ``texts`` (uniform where the round has no plan labels)."""
        if self.source is None:
            raise ValueError("the base model alone has no proxy")
        if "proxy" not in self._fitted:
            self._fitted["proxy"] = proxy_service.plan_proxy(self.source, self.n_classes)[1]
        fitted = self._fitted["proxy"]
        if fitted is None:
            return np.full((len(texts), self.n_classes), 1.0 / self.n_classes)
        keys = list(hashes) if hashes is not None else [text_hash(t) for t in texts]
        return np.asarray(fitted.predict_proba(proxy_service.embeddings(list(texts), keys)))

    def calibrated(self, calibrator: Calibrator) -> RoundPredictor:
        return RoundPredictor(self.predictor.calibrated(calibrator), self.source, self.n_classes, self._fitted)


def round_predictor(
    source: Round | None, *, prompt_hash: str, n_classes: int, weight: float | None = None
) -> RoundPredictor:
    return RoundPredictor(predictor_for_round(source, prompt_hash=prompt_hash, weight=weight), source, n_classes)
