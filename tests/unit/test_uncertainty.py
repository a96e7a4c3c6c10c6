from __future__ import annotations

import math

import numpy as np
import pytest

from scoring.uncertainty import (
    SignalInputError,
    ensemble_disagreement,
    entropy_with_tail,
    margin,
    mean_distribution,
    uncertainty,
)

# Two adapters, two items, three labels. Item 0: both members agree; item 1: confident but opposed.
P = np.array(
    [
        [[0.7, 0.2, 0.1], [0.9, 0.05, 0.05]],
        [[0.7, 0.2, 0.1], [0.05, 0.9, 0.05]],
    ]
)
MASS = np.array([[1.0, 0.5], [1.0, 0.5]])


def h(*q: float) -> float:
    return -sum(x * math.log(x) for x in q if x > 0)


def test_mean_distribution_averages_members() -> None:
    np.testing.assert_allclose(mean_distribution(P), [[0.7, 0.2, 0.1], [0.475, 0.475, 0.05]])


def test_margin_is_top_two_gap_of_the_mean() -> None:
    np.testing.assert_allclose(margin(P), [0.5, 0.0], atol=1e-12)
    np.testing.assert_allclose(uncertainty("margin", P, MASS), [0.5, 1.0], atol=1e-12)


def test_entropy_with_tail_adds_the_leftover_mass_as_an_outcome() -> None:
    # Item 0: mass 1 → plain entropy. Item 1: labels at half their probability, tail 0.5.
    expected = [h(0.7, 0.2, 0.1), h(0.2375, 0.2375, 0.025, 0.5)]
    np.testing.assert_allclose(entropy_with_tail(P, MASS), expected, rtol=1e-9)
    np.testing.assert_allclose(uncertainty("entropy", P, MASS), expected, rtol=1e-9)


def test_low_label_mass_raises_entropy() -> None:
    p = np.array([[[0.9, 0.1]]])
    assert entropy_with_tail(p, np.array([[0.1]]))[0] > entropy_with_tail(p, np.array([[1.0]]))[0]


def test_bald_is_zero_on_agreement_and_high_on_confident_disagreement() -> None:
    expected_1 = h(0.475, 0.475, 0.05) - h(0.9, 0.05, 0.05)
    np.testing.assert_allclose(ensemble_disagreement(P), [0.0, expected_1], atol=1e-12)
    np.testing.assert_allclose(uncertainty("bald", P, MASS), [0.0, expected_1], atol=1e-12)


def test_two_dimensional_p_is_one_member() -> None:
    np.testing.assert_allclose(margin(P[0]), [0.5, 0.85], atol=1e-12)
    np.testing.assert_allclose(entropy_with_tail(P[0], MASS[0]), entropy_with_tail(P[:1], MASS[:1]))


def test_bald_of_a_single_member_is_zero() -> None:
    np.testing.assert_array_equal(ensemble_disagreement(P[:1]), [0.0, 0.0])


def test_bad_inputs_are_named_errors() -> None:
    with pytest.raises(SignalInputError, match="mass shape"):
        entropy_with_tail(P, MASS[:, :1])
    with pytest.raises(SignalInputError, match="unknown"):
        uncertainty("variance", P, MASS)  # type: ignore[arg-type]
