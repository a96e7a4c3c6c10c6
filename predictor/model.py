"""The predictor: what the app believes about an item. Plain numpy, no Django.

One frozen, versioned object names everything an item's probabilities depend on — the K adapters
(their content hashes, in member order), the rendered prompt (its prefix hash), the embedding proxy
(the labels it is fitted on), the blend weight (predictor/blend.py) and the calibrator
(predictor/calibrate.py, auto-labelling's) — and ``probabilities`` is the one place where the
members are averaged, blended with the proxy and calibrated. Selection's Prediction rows, the
evaluation the ML page shows and auto-labelling's calibration and decisions all call it, and its
``fingerprint`` is the model version stamped on their rows and the drift key of auto-labelling.

The proxy is part of the predictor only where the blend gives it weight (w < 1): at w = 1 the
probabilities do not depend on it, so neither does the fingerprint.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from predictor.blend import blend
from predictor.calibrate import Calibrator
from scoring.uncertainty import mean_distribution

VERSION = 1  # bump when the meaning of a part (or how probabilities are made from them) changes
FLOAT_DIGITS = 9  # significant digits a float keeps in the fingerprint: no repr or platform noise


class PredictorInputError(ValueError):
    pass


@dataclass(frozen=True)
class ProxyRef:
    """The embedding proxy's identity: the labelled items it is fitted on (sha256 of the sorted
    (item id, class index) pairs) and how many."""

    labels_hash: str
    n_labels: int


def labels_hash(pairs: Iterable[tuple[int, int]]) -> str:
    """sha256 of the sorted (item id, class index) pairs: the same labels give the same hash in any order."""
    payload = json.dumps(sorted((int(i), int(y)) for i, y in pairs), separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()


@dataclass(frozen=True)
class Predictor:
    adapters: tuple[str, ...]  # the members' content hashes in member order; () = the base model alone
    prompt_hash: str  # the rendered prompt prefix (template, labels, tokenizer, model revision, context)
    weight: float = 1.0  # on the adapters' mean; 1 - weight on the proxy
    proxy: ProxyRef | None = None  # required when weight < 1, dropped at weight 1
    calibrator: Calibrator | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.weight <= 1.0:
            raise PredictorInputError(f"the blend weight must be within [0, 1], got {self.weight}")
        if self.weight < 1.0 and self.proxy is None:
            raise PredictorInputError(f"a blend weight of {self.weight} needs the proxy it blends with")
        if self.weight == 1.0 and self.proxy is not None:
            object.__setattr__(self, "proxy", None)  # unused: the same predictor as without it

    @property
    def needs_proxy(self) -> bool:
        return self.weight < 1.0

    def probabilities(self, member_p: np.ndarray, proxy_p: np.ndarray | None = None) -> np.ndarray:
        """The predictor's distributions [N, C] (float64) from the members' [K, N, C] and, when the
        blend gives the proxy weight, the proxy's [N, C] over the same items."""
        p = np.asarray(mean_distribution(member_p), dtype=np.float64)
        if self.needs_proxy:
            if proxy_p is None:
                raise PredictorInputError("this predictor blends with the proxy: pass its probabilities")
            p = blend(p, proxy_p, self.weight)
        if self.calibrator is not None and len(p):
            p = self.calibrator.apply(p)
        return p

    def uncalibrated(self) -> Predictor:
        return replace(self, calibrator=None)

    def calibrated(self, calibrator: Calibrator) -> Predictor:
        return replace(self, calibrator=calibrator)

    def parts(self) -> dict[str, Any]:
        """Canonical plain JSON of every part (floats as fixed-precision strings)."""
        cal = self.calibrator
        return {
            "version": VERSION,
            "adapters": list(self.adapters),
            "prompt_hash": self.prompt_hash,
            "weight": _num(self.weight),
            "proxy": None if self.proxy is None else {"labels": self.proxy.labels_hash, "n": self.proxy.n_labels},
            "calibrator": None
            if cal is None
            else {
                "method": cal.method,
                "temperature": _num(cal.temperature),
                "weights": [_num(x) for x in cal.weights],
                "bias": [_num(x) for x in cal.bias],
            },
        }

    def fingerprint(self) -> str:
        """sha256 of the canonical parts: equal in every process for equal predictors."""
        return hashlib.sha256(json.dumps(self.parts(), sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    def to_json(self) -> dict[str, Any]:
        return {**self.parts(), "fingerprint": self.fingerprint()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Predictor:
        proxy, cal = data.get("proxy"), data.get("calibrator")
        return cls(
            adapters=tuple(str(a) for a in data["adapters"]),
            prompt_hash=str(data["prompt_hash"]),
            weight=float(data["weight"]),
            proxy=None if proxy is None else ProxyRef(str(proxy["labels"]), int(proxy["n"])),
            calibrator=None
            if cal is None
            else Calibrator(
                method=cal["method"],
                temperature=float(cal["temperature"]),
                weights=tuple(float(x) for x in cal["weights"]),
                bias=tuple(float(x) for x in cal["bias"]),
            ),
        )

    def changes(self, other: Predictor) -> list[str]:
        """The parts, in words, in which ``other`` differs from this predictor."""
        mine, theirs = self.parts(), other.parts()
        words = {
            "version": "the predictor's version",
            "adapters": "the adapters",
            "prompt_hash": "the rendered prompt",
            "weight": "the blend weight",
            "proxy": "the proxy's training labels",
            "calibrator": "the calibrator",
        }
        return [words[key] for key in words if mine[key] != theirs[key]]


def _num(x: float) -> str:
    return format(float(x), f".{FLOAT_DIGITS}g")
