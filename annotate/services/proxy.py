"""The embedding side of a round, shared by the selection and evaluation steps and auto-labelling:
items' texts, the sentence embeddings of items (the encoder cache) and the embedding proxy's label
distributions (logistic regression, predictor.embedding_proxy) — on the labels so far, the selection's committee
member; on the labels a round's adapters trained on (its plan), the predictor's blend partner
(predictor/model.py). Step services import this, never each other."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
from django.conf import settings

_EMBEDDINGS: dict[str, Any] = {}
# Proxies fitted in this process, by a digest of what they were fitted on (fitted_proxy). A selection
# fits the committee's proxy on the labels so far and its predictor's on the labels the adapters trained
# on: the same labels unless some came in since, and on CLINC150 each fit took 0.7 s of the step.
_FITTED: dict[bytes, Any] = {}
FITTED_KEPT = 4  # the selection's two and the evaluation's, with room for a project beside


def embeddings(texts: list[str], hashes: list[str]) -> np.ndarray:
    from scoring.bundled import encoder_path
    from scoring.embeddings import EmbeddingCache

    if "cache" not in _EMBEDDINGS:
        _EMBEDDINGS["cache"] = EmbeddingCache(settings.EMBEDDING_DIR, encoder_path(settings.ENCODER_DIR or None))
    if not texts:
        return np.zeros((0, _EMBEDDINGS["cache"].dim), np.float32)
    return np.asarray(_EMBEDDINGS["cache"].embed(texts, hashes))


def item_texts(ids: Sequence[int]) -> dict[int, tuple[str, str]]:
    """(text, text hash) of the items among ``ids`` that exist, by id."""
    from annotate.models import Item

    rows = Item.objects.filter(id__in=[int(i) for i in ids]).values_list("id", "text", "text_hash")
    return {i: (text, h) for i, text, h in rows}


def plan_proxy(row: Any, n_classes: int, exclude: set[int] | None = None) -> tuple[list[tuple[int, int]], Any]:
    """The embedding proxy fitted on the labels the round's prod adapters trained on (its frozen plan,
    less ``exclude``): the (item id, class index) pairs it learned from and the fitted proxy (None
    without labels: uniform)."""
    from annotate.services.round_state import read_plan

    pairs = [(int(i), int(y)) for i, y in read_plan(row)["prod:0"] if not exclude or int(i) not in exclude]
    known = item_texts([i for i, _ in pairs])
    pairs = [(i, y) for i, y in pairs if i in known]  # an item deleted since trains nothing
    if not pairs:
        return pairs, None
    train = embeddings([known[i][0] for i, _ in pairs], [known[i][1] for i, _ in pairs])
    return pairs, fitted_proxy(train, np.asarray([y for _, y in pairs]), n_classes)


def plan_proxy_probabilities(
    row: Any, texts: list[str], hashes: list[str], n_classes: int, exclude: set[int] | None = None
) -> np.ndarray:
    """``plan_proxy``'s distributions over ``texts`` (uniform without labels)."""
    _, proxy = plan_proxy(row, n_classes, exclude)
    if proxy is None:
        return np.full((len(texts), n_classes), 1.0 / n_classes)
    return np.asarray(proxy.predict_proba(embeddings(texts, hashes)))


def proxy_probabilities(labeled_emb: np.ndarray, labels: list[int], emb: np.ndarray, n_classes: int) -> np.ndarray:
    """The embedding proxy (logistic regression on ``labels`` of ``labeled_emb``) over the rows of ``emb``;
    uniform without labels."""
    if not labels:
        return np.full((len(emb), n_classes), 1.0 / n_classes)
    return fitted_proxy(labeled_emb, np.asarray(labels), n_classes).predict_proba(emb)


def fitted_proxy(emb: np.ndarray, y: np.ndarray, n_classes: int) -> Any:
    """``fit_proxy(emb, y, n_classes)``, fitted once per process for the same rows (the fit is
    deterministic, so the kept one is the one a new fit would give)."""
    from predictor.embedding_proxy import fit_proxy

    x, labels = np.ascontiguousarray(emb), np.ascontiguousarray(y, dtype=np.int64)
    digest = hashlib.sha256(f"{x.dtype.str}{x.shape}{labels.shape}{n_classes}".encode())
    digest.update(x.data)
    digest.update(labels.data)
    key = digest.digest()
    if key not in _FITTED:
        while len(_FITTED) >= FITTED_KEPT:
            _FITTED.pop(next(iter(_FITTED)))  # the oldest
        _FITTED[key] = fit_proxy(x, labels, n_classes)
    return _FITTED[key]
