"""Evaluation metrics and agreement statistics on hand-computed examples."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score, f1_score, precision_recall_fscore_support

from annotate.selectors.agreement import cohen_kappa, fleiss_kappa, per_class_agreement
from predictor.evaluate import confusion, evaluate, gain_with_uncertainty, reliability_bins

NAMES = ["ham", "spam", "other"]


def test_evaluate_matches_hand_counts_and_sklearn() -> None:
    y = np.array([0, 0, 1, 1, 2, 2, 0, 1])
    pred = np.array([0, 1, 1, 1, 2, 0, 0, 2])
    p = np.full((8, 3), 0.1)
    p[np.arange(8), pred] = 0.8

    result = evaluate(p, y, label_names=NAMES)

    assert result["accuracy"] == pytest.approx(5 / 8)
    assert result["macro_f1"] == pytest.approx(f1_score(y, pred, average="macro"))
    precision, recall, f1, support = precision_recall_fscore_support(y, pred)
    for c, row in enumerate(result["per_class"]):
        assert row["label"] == NAMES[c]
        assert (row["precision"], row["recall"], row["f1"]) == pytest.approx((precision[c], recall[c], f1[c]))
        assert row["support"] == support[c]
    assert result["confusion"] == [[2, 1, 0], [0, 2, 1], [1, 0, 1]]
    # every prediction has confidence 0.8 (bin [0.8, 0.9)); accuracy 5/8 → ECE = |0.625 − 0.8|
    assert result["ece"] == pytest.approx(0.175)
    assert result["reliability"][8]["count"] == 8 and result["reliability"][0]["count"] == 0


def test_macro_f1_ignores_a_class_absent_from_gold_and_predictions() -> None:
    y = np.array([0, 1, 0, 1])
    p = np.array([[0.9, 0.1, 0.0], [0.2, 0.8, 0.0], [0.6, 0.4, 0.0], [0.7, 0.3, 0.0]])

    assert evaluate(p, y, label_names=NAMES)["macro_f1"] == pytest.approx(f1_score(y, p.argmax(1), average="macro"))


def test_ece_by_hand_over_two_bins() -> None:
    confidence = np.array([0.95, 0.95, 0.95, 0.95, 0.55, 0.55])
    correct = np.array([True, True, True, False, True, False])

    bins = reliability_bins(confidence, correct)

    assert [b["count"] for b in bins] == [0, 0, 0, 0, 0, 2, 0, 0, 0, 4]
    assert bins[9]["accuracy"] == 0.75 and bins[5]["confidence"] == pytest.approx(0.55)
    p = np.column_stack([confidence, 1 - confidence])
    y = np.where(correct, 0, 1)
    # (4/6)·|0.75 − 0.95| + (2/6)·|0.5 − 0.55|
    assert evaluate(p, y, label_names=["a", "b"])["ece"] == pytest.approx(4 / 6 * 0.2 + 2 / 6 * 0.05)


def test_evaluate_rejects_mismatched_inputs() -> None:
    with pytest.raises(ValueError):
        evaluate(np.ones((3, 2)) / 2, np.array([0, 1]), label_names=["a", "b"])
    with pytest.raises(ValueError):
        evaluate(np.ones((2, 2)) / 2, np.array([0, 2]), label_names=["a", "b"])


def test_cohen_kappa_known_values() -> None:
    a = np.array([0, 1, 2, 0, 1, 2, 0, 0])
    b = np.array([0, 1, 2, 1, 1, 0, 0, 2])

    assert cohen_kappa(a, a, 3) == 1.0
    assert cohen_kappa(a, b, 3) == pytest.approx(cohen_kappa_score(a, b))
    # constant identical raters: p_e = 1, reported as perfect agreement
    assert cohen_kappa(np.zeros(5, int), np.zeros(5, int), 3) == 1.0
    # independent raters agree at chance level
    rng = np.random.default_rng(0)
    assert abs(cohen_kappa(rng.integers(0, 3, 20000), rng.integers(0, 3, 20000), 3)) < 0.02


def test_fleiss_kappa_textbook_example() -> None:
    # Fleiss (1971), as tabulated on Wikipedia: 10 subjects, 14 raters, 5 categories → κ ≈ 0.210
    counts = np.array(
        [
            [0, 0, 0, 0, 14],
            [0, 2, 6, 4, 2],
            [0, 0, 3, 5, 6],
            [0, 3, 9, 2, 0],
            [2, 2, 8, 1, 1],
            [7, 7, 0, 0, 0],
            [3, 2, 6, 3, 0],
            [2, 5, 3, 2, 2],
            [6, 5, 2, 1, 0],
            [0, 2, 2, 3, 7],
        ]
    )

    assert fleiss_kappa(counts) == pytest.approx(0.20993, abs=1e-4)
    assert fleiss_kappa(np.array([[3, 0], [0, 3], [3, 0]])) == pytest.approx(1.0)


def test_fleiss_kappa_with_varying_raters_drops_single_ratings() -> None:
    two_raters = np.array([[2, 0], [1, 1], [0, 2], [2, 0]])
    with_singletons = np.vstack([two_raters, [[1, 0], [0, 1]]])

    assert fleiss_kappa(with_singletons) == pytest.approx(fleiss_kappa(two_raters))
    assert np.isnan(fleiss_kappa(np.array([[1, 0], [0, 1]])))


def test_confusion_and_per_class_agreement() -> None:
    a = np.array([0, 0, 1, 1, 2])
    b = np.array([0, 1, 1, 1, 0])

    assert confusion(a, b, 4).tolist() == [[1, 1, 0, 0], [0, 2, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]]
    # class 0: 2·1/(2+2); class 1: 2·2/(2+3); class 2: 0/(1+0); class 3 unused
    assert per_class_agreement(a, b, 4) == pytest.approx([0.5, 0.8, 0.0, None])


def test_gain_independent_binomial_interval_and_sentence() -> None:
    gain = gain_with_uncertainty(0.80, 0.75, 1000, labels=200)

    se = np.sqrt(0.8 * 0.2 / 1000 + 0.75 * 0.25 / 1000)
    assert gain["gain"] == pytest.approx(0.05) and gain["se"] == pytest.approx(se)
    assert gain["ci_low"] == pytest.approx(0.05 - 1.96 * se, abs=1e-4)
    assert gain["sentence"] == "active beats random by 5.0 points (95% CI 1.3\u20138.7) at 200 labels"


def test_gain_paired_is_narrower_and_says_when_unclear() -> None:
    rng = np.random.default_rng(1)
    random_arm = rng.uniform(size=400) < 0.7
    active_arm = random_arm.copy()
    active_arm[np.flatnonzero(~random_arm)[:8]] = True  # active fixes 8 items, breaks none

    paired = gain_with_uncertainty(
        active_arm.mean(), random_arm.mean(), 400, correct_active=active_arm, correct_random=random_arm
    )
    unpaired = gain_with_uncertainty(active_arm.mean(), random_arm.mean(), 400)

    assert paired["method"] == "paired" and paired["se"] < unpaired["se"]
    assert paired["ci_low"] > 0 > unpaired["ci_low"]
    assert unpaired["sentence"].startswith("no clear difference")
    assert gain_with_uncertainty(0.6, 0.7, 1000, labels=50)["sentence"].startswith("random beats active by 10.0")
