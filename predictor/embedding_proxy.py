"""A cheap proxy classifier over the cached sentence embeddings: multinomial logistic regression.

Selection-via-Proxy (Coleman et al., 2020): a model that trains in milliseconds on the frozen
MiniLM embeddings the loop already caches ranks items nearly as well as the big model in early
rounds, and it does not share the LLM ensemble's blind spots. The default strategy uses it as one
more committee member (acquisition.batch.select_committee). Pure numpy/torch, no Django.

The objective is scikit-learn's ``LogisticRegression(C=C)`` with the lbfgs solver and a
multinomial loss: Σ_i CE(W x_i + b, y_i) + ||W||² / (2C), rows L2-normalised first, the
intercept unpenalised. It is the cheap loop of ../shared/design/BASELINES.md, so the proxy is
exactly the yardstick the loop is compared with.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# C = 1: scikit-learn's default and the baseline's setting; on unit-norm 384-d embeddings it keeps
# the proxy's probabilities soft, so it nudges the committee rather than overruling it.
DEFAULT_C = 1.0
# L-BFGS iterations: the problem is smooth and strongly convex; 200 reach |grad| < 1e-6 on 1,000
# labels × 151 classes in well under a second on one CPU core.
MAX_ITER = 200


class ProxyInputError(ValueError):
    pass


@dataclass(frozen=True)
class Proxy:
    weights: np.ndarray  # float64[d, C]
    bias: np.ndarray  # float64[C]

    def predict_proba(self, emb: np.ndarray) -> np.ndarray:
        """float64[N, C] label distributions for embedding rows (L2-normalised here)."""
        logits = _unit(np.asarray(emb, dtype=np.float64)) @ self.weights + self.bias
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        return p / p.sum(axis=1, keepdims=True)


def fit_proxy(emb: np.ndarray, y: np.ndarray, n_classes: int, *, c: float = DEFAULT_C) -> Proxy:
    """Multinomial logistic regression on (emb, y); classes absent from ``y`` keep zero weights and
    a bias driven down by the loss, so they get little probability. Deterministic."""
    import torch

    x = _unit(np.asarray(emb, dtype=np.float64))
    labels = np.asarray(y, dtype=np.int64)
    if x.ndim != 2 or len(x) != len(labels) or len(x) == 0:
        raise ProxyInputError(f"need matching non-empty emb [N, d] and y [N], got {x.shape} and {labels.shape}")
    if labels.min() < 0 or labels.max() >= n_classes:
        raise ProxyInputError(f"labels must lie in 0..{n_classes - 1}")
    if c <= 0:
        raise ProxyInputError(f"C must be positive, got {c}")
    xt, yt = torch.from_numpy(x), torch.from_numpy(labels)
    w = torch.zeros((x.shape[1], n_classes), dtype=torch.float64, requires_grad=True)
    b = torch.zeros(n_classes, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=MAX_ITER, tolerance_grad=1e-7, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(xt @ w + b, yt, reduction="sum") + (w * w).sum() / (2 * c)
        loss.backward()
        return loss

    opt.step(closure)
    return Proxy(weights=w.detach().numpy().copy(), bias=b.detach().numpy().copy())


def _unit(x: np.ndarray) -> np.ndarray:
    if x.ndim != 2:
        raise ProxyInputError(f"embeddings must be 2-D, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ProxyInputError("embeddings contain NaN or inf")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.clip(norms, 1e-12, None)
