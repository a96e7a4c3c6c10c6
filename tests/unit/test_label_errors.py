"""predictor/label_errors.py: the confident-learning rule on small arrays whose answer is known, and the
out-of-fold probabilities (no row judged by a model that saw its label)."""

from __future__ import annotations

import numpy as np
import pytest

from predictor.label_errors import LabelErrorInputError, find_label_errors, out_of_fold_proba


def test_a_label_the_predictor_confidently_contradicts_is_the_one_suspect() -> None:
    probs = np.array(
        [
            [0.9, 0.1, 0.0],
            [0.8, 0.2, 0.0],
            [0.1, 0.9, 0.0],
            [0.2, 0.8, 0.0],
            [0.88, 0.12, 0.0],  # labelled 1, the predictor is sure it is 0
            [0.4, 0.6, 0.0],  # labelled 1, unsure: not a suspect (p of 1 above nothing it should be)
        ]
    )
    given = np.array([0, 0, 1, 1, 1, 1])
    found = find_label_errors(probs, given)
    assert found.index.tolist() == [4] and found.suggested.tolist() == [0] and found.given.tolist() == [1]
    assert found.p_suggested[0] == pytest.approx(0.88) and found.p_given[0] == pytest.approx(0.12)
    assert np.isnan(found.thresholds[2])  # nobody labelled class 2: no threshold, never suggested
    assert found.thresholds[0] == pytest.approx(0.85)


def test_suspects_are_ranked_by_how_strongly_they_are_contradicted() -> None:
    probs = np.array([[0.7, 0.3], [0.7, 0.3], [0.2, 0.8], [0.1, 0.9], [0.8, 0.2], [0.95, 0.05]])
    given = np.array([0, 0, 1, 1, 1, 1])
    assert find_label_errors(probs, given).index.tolist() == [5, 4]


def test_out_of_fold_rows_come_from_models_that_never_saw_their_label() -> None:
    rng = np.random.default_rng(0)
    centers = np.eye(3, 8) * 5
    y = np.repeat(np.arange(3), 20)
    emb = centers[y] + rng.normal(0, 0.3, (60, 8))
    noisy = y.copy()
    noisy[7] = 2  # a class-0 point labelled 2: judged out of fold, the others outvote its label
    probs = out_of_fold_proba(emb, noisy, 3, rng=np.random.default_rng(1))
    assert probs.shape == (60, 3) and np.allclose(probs.sum(axis=1), 1)
    assert probs[7].argmax() == 0
    found = find_label_errors(probs, noisy)
    assert 7 in found.index.tolist() and found.suggested[found.index.tolist().index(7)] == 0


def test_bad_inputs_are_named() -> None:
    with pytest.raises(LabelErrorInputError, match="probs"):
        find_label_errors(np.ones((3, 2)), np.array([0, 1]))
    with pytest.raises(LabelErrorInputError, match="labels must lie"):
        find_label_errors(np.ones((2, 2)) / 2, np.array([0, 2]))
    with pytest.raises(LabelErrorInputError, match="at least 5"):
        out_of_fold_proba(np.ones((3, 4)), np.array([0, 1, 0]), 2, rng=np.random.default_rng(0))
