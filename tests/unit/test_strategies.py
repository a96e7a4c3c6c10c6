"""The acquisition strategies' contract (acquisition/strategies.py), checked the same way for every
registered strategy, as scikit-learn's check_estimator does for estimators: given only the inputs it
declares, a strategy returns b distinct eligible positions (all of them when fewer are eligible) as
int64 with a random flag each, the same ones under the same seed, never a labelled or test item, and a
sentence saying why; without a declared input it refuses by name."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from acquisition.batch import COLD_MODES, SelectionInputError
from acquisition.strategies import INPUT_NAMES, REGISTRY, STRATEGIES, Inputs, Strategy, cold_strategy, strategy

N_ITEMS, N_LABELLED, N_TEST, DIM, CLASSES = 120, 20, 20, 8, 3


def _world(seed: int = 0) -> tuple[np.ndarray, set[int], Inputs]:
    """A pool of N_ITEMS ids: the first N_LABELLED labelled, the next N_TEST the test set, the rest
    eligible. The labelled and test items are the most uncertain and each has a near-duplicate among
    the eligible ones, so a strategy that looked past its eligible rows would pick them. Returns the
    eligible ids, the ids never to pick, and every input over the eligible rows."""
    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((N_ITEMS, DIM)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    p = rng.dirichlet(np.ones(CLASSES), size=N_ITEMS)
    u = 1.0 - np.sort(p, axis=1)[:, -1]
    u[: N_LABELLED + N_TEST] = 2.0
    labelled = np.arange(N_LABELLED)
    eligible = np.arange(N_LABELLED + N_TEST, N_ITEMS)
    emb[eligible[: N_LABELLED + N_TEST]] = emb[: N_LABELLED + N_TEST] + 0.01
    inputs = Inputs(
        n=len(eligible),
        uncertainty=u[eligible],
        committee_p=p[eligible],
        emb=emb[eligible],
        labeled_emb=emb[labelled],
        shares={"margin": 0.5, "softrank": 0.3, "random": 0.2},
        random_share=0.25,
        oversample=3.0,
    )
    return eligible, set(range(N_LABELLED + N_TEST)), inputs


def _declared_only(s: Strategy, inputs: Inputs) -> Inputs:
    """``inputs`` with every input the strategy does not declare taken away."""
    dropped: dict[str, Any] = {name: None for name in INPUT_NAMES if name not in s.needs}
    return replace(inputs, **dropped)


@pytest.fixture(params=sorted(REGISTRY))
def registered(request: pytest.FixtureRequest) -> Strategy:
    return REGISTRY[request.param]


@pytest.mark.parametrize("b", [1, 8, 37])
def test_a_strategy_returns_b_distinct_eligible_positions_and_says_why(registered: Strategy, b: int) -> None:
    eligible, forbidden, inputs = _world()
    choice = registered.choose(_declared_only(registered, inputs), b=b, rng=0)
    assert choice.indices.dtype == np.int64 and choice.indices.shape == (b,)
    assert choice.is_random.dtype == np.bool_ and choice.is_random.shape == (b,)
    assert choice.arms == () or len(choice.arms) == b
    assert len(set(choice.indices.tolist())) == b
    assert ((choice.indices >= 0) & (choice.indices < inputs.n)).all()
    assert not set(eligible[choice.indices].tolist()) & forbidden  # never a labelled or test item
    assert isinstance(choice.explanation, str) and choice.explanation.strip()


def test_a_strategy_is_deterministic_under_a_seed(registered: Strategy) -> None:
    _, _, inputs = _world()
    inputs = _declared_only(registered, inputs)
    first, again = (registered.choose(inputs, b=10, rng=np.random.default_rng(7)) for _ in range(2))
    np.testing.assert_array_equal(first.indices, again.indices)
    np.testing.assert_array_equal(first.is_random, again.is_random)
    assert (first.arms, first.explanation) == (again.arms, again.explanation)
    assert registered.choose(inputs, b=10, rng=7).indices.tolist() == first.indices.tolist()


def test_a_batch_larger_than_the_pool_takes_every_eligible_item(registered: Strategy) -> None:
    _, _, inputs = _world()
    head: dict[str, Any] = {name: getattr(inputs, name)[:30] for name in ("uncertainty", "committee_p", "emb")}
    small = replace(inputs, n=30, **head)
    choice = registered.choose(_declared_only(registered, small), b=100, rng=1)
    assert sorted(choice.indices.tolist()) == list(range(30))


def test_a_strategy_refuses_without_a_declared_input_and_a_bad_b(registered: Strategy) -> None:
    _, _, inputs = _world()
    inputs = _declared_only(registered, inputs)
    for name in sorted(registered.needs):
        with pytest.raises(SelectionInputError, match=INPUT_NAMES[name].replace("'", ".")):
            dropped: dict[str, Any] = {name: None}
            registered.choose(replace(inputs, **dropped), b=5, rng=0)
    with pytest.raises(SelectionInputError, match="b must be positive"):
        registered.choose(inputs, b=0, rng=0)


def test_the_registry_names_what_a_round_may_run_and_what_each_reads() -> None:
    assert STRATEGIES == ("active", "random", "uncertainty-only", "kcenter-only", "margin-kcenter", "portfolio")
    assert set(REGISTRY) == {*STRATEGIES, *(f"cold-start:{mode}" for mode in COLD_MODES)}
    # A round of a strategy that reads no scores is not scored at all (planning).
    assert {s for s in STRATEGIES if strategy(s).needs_scores} == {
        "active", "uncertainty-only", "margin-kcenter", "portfolio",
    }  # fmt: skip
    assert {s for s in STRATEGIES if strategy(s).needs_embeddings} == {
        "active", "kcenter-only", "margin-kcenter", "portfolio",
    }  # fmt: skip
    assert {s for s in STRATEGIES if strategy(s).needs_labels} == {"active", "portfolio"}
    assert all(cold_strategy(m).cold and not cold_strategy(m).needs_scores for m in COLD_MODES)
    assert cold_strategy("random").needs == frozenset()
    with pytest.raises(SelectionInputError, match="unknown strategy"):
        strategy("greedy")
    with pytest.raises(SelectionInputError, match="unknown cold-start mode"):
        cold_strategy("greedy")
