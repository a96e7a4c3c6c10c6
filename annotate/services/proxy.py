"""The embedding side of a round, shared by the selection and evaluation steps: items' texts, the
sentence embeddings of items (the encoder cache) and the embedding proxy's label distributions (logistic
regression on the labels so far, scoring.proxy) — the selection's committee member and the
evaluation's blend partner (training/blend.py). Step services import this, never each other."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from django.conf import settings

_EMBEDDINGS: dict[str, Any] = {}


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


def proxy_probabilities(labeled_emb: np.ndarray, labels: list[int], emb: np.ndarray, n_classes: int) -> np.ndarray:
    """The embedding proxy (logistic regression on ``labels`` of ``labeled_emb``) over the rows of ``emb``;
    uniform without labels."""
    from scoring.proxy import fit_proxy

    if not labels:
        return np.full((len(emb), n_classes), 1.0 / n_classes)
    return fit_proxy(labeled_emb, np.asarray(labels), n_classes).predict_proba(emb)
