"""The selection rules on the cheap learner (annotate/simulation/proxy_loop.py) on synthetic blobs:
every strategy runs to its label target, every seed shares the seed set, the picks are new items,
and the portfolio's records carry its split once its arms have evidence."""

from __future__ import annotations

import numpy as np
import pytest

from acquisition.strategies import STRATEGIES
from annotate.simulation.proxy_loop import ProxyData, ProxySpec, run_job


def _data() -> ProxyData:
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(4, 16)) * 2
    y = rng.integers(0, 4, 700)
    x = centres[y] + rng.normal(size=(700, 16))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return ProxyData("blobs", np.arange(600) * 3, x[:600], y[:600], x[600:], y[600:], 4)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_reaches_its_labels_with_new_items(strategy: str) -> None:
    data = _data()
    records = run_job(data, strategy, 1, ProxySpec(max_labels=200, commit="abc"))
    assert [r["labels"] for r in records] == [20, *range(45, 200, 25), 200]
    ids = [i for r in records for i in r["batch_ids"]]
    assert len(ids) == len(set(ids)) == 200 and all(int(i.split("-")[1]) % 3 == 0 for i in ids)
    assert all(0.0 <= r["accuracy"] <= 1.0 and r["commit"] == "abc" for r in records)
    assert all(r["loop_options"]["batch"] == 25 and r["loop_options"]["seed_labels"] == 20 for r in records)
    assert records[-1]["accuracy"] > 0.6  # well-separated blobs: the learner learns
    seeds = run_job(data, "random", 1, ProxySpec(max_labels=20))[0]["batch_ids"]
    assert records[0]["batch_ids"] == seeds  # the same seed set for every strategy of a seed
    if strategy == "portfolio":
        splits = [r["selection"] for r in records if "selection" in r]
        assert splits[0]["reason"].startswith("gathering evidence")
        assert any(s["gains"]["margin"]["mean"] is not None for s in splits)  # evidence arrives
        assert all(abs(sum(s["shares"].values()) - 1) < 1e-3 for s in splits)
