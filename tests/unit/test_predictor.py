"""The predictor on tiny arrays: where the members are averaged, blended and calibrated, and a
fingerprint that names exactly the parts the probabilities depend on, equal in every process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from predictor.blend import blend
from predictor.calibrate import Calibrator
from predictor.model import Predictor, PredictorInputError, ProxyRef, labels_hash

ROOT = Path(__file__).resolve().parents[2]
MEMBERS = np.array([[[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]], [[0.5, 0.4, 0.1], [0.3, 0.3, 0.4]]], np.float32)
PROXY_P = np.array([[0.1, 0.8, 0.1], [0.2, 0.2, 0.6]])
PROXY = ProxyRef(labels_hash([(3, 1), (1, 0), (2, 2)]), 3)
BLENDED = Predictor(adapters=("a" * 64, "b" * 64), prompt_hash="p" * 64, weight=0.3, proxy=PROXY)


def test_the_adapters_alone_are_their_mean_and_the_proxy_plays_no_part() -> None:
    alone = Predictor(adapters=("a" * 64, "b" * 64), prompt_hash="p" * 64, weight=1.0, proxy=PROXY)
    assert alone.proxy is None and not alone.needs_proxy  # unused at w = 1: the same predictor as without it
    np.testing.assert_array_equal(alone.probabilities(MEMBERS), MEMBERS.astype(np.float64).mean(axis=0))
    assert alone.fingerprint() == Predictor(adapters=alone.adapters, prompt_hash="p" * 64).fingerprint()


def test_blend_then_calibrate_in_one_place() -> None:
    mean = MEMBERS.astype(np.float64).mean(axis=0)
    np.testing.assert_allclose(BLENDED.probabilities(MEMBERS, PROXY_P), blend(mean, PROXY_P, 0.3))
    temperature = Calibrator(method="temperature", temperature=2.0)
    calibrated = BLENDED.calibrated(temperature)
    np.testing.assert_allclose(
        calibrated.probabilities(MEMBERS, PROXY_P), temperature.apply(blend(mean, PROXY_P, 0.3)), rtol=1e-12
    )
    assert calibrated.uncalibrated() == BLENDED
    with pytest.raises(PredictorInputError, match="proxy"):
        BLENDED.probabilities(MEMBERS)
    with pytest.raises(PredictorInputError, match="needs the proxy"):
        Predictor(adapters=(), prompt_hash="p", weight=0.5)
    with pytest.raises(PredictorInputError, match="within"):
        Predictor(adapters=(), prompt_hash="p", weight=1.5)


def test_every_part_changes_the_fingerprint_and_is_named() -> None:
    other_labels = ProxyRef(labels_hash([(3, 0), (1, 0), (2, 2)]), 3)
    variants = {
        "the blend weight": replace(BLENDED, weight=0.4),
        "the proxy's training labels": replace(BLENDED, proxy=other_labels),
        "the adapters": replace(BLENDED, adapters=("a" * 64, "c" * 64)),
        "the rendered prompt": replace(BLENDED, prompt_hash="q" * 64),
        "the calibrator": BLENDED.calibrated(Calibrator(method="temperature", temperature=1.5)),
    }
    prints = {BLENDED.fingerprint(), *(v.fingerprint() for v in variants.values())}
    assert len(prints) == len(variants) + 1
    for words, variant in variants.items():
        assert BLENDED.changes(variant) == [words]
    assert labels_hash([(1, 0), (2, 2), (3, 1)]) == PROXY.labels_hash  # order of the pairs is not a part


def test_json_round_trip_keeps_the_fingerprint() -> None:
    calibrated = BLENDED.calibrated(Calibrator(method="vector", temperature=1.3, weights=(1.0, 0.9), bias=(0.1, -0.1)))
    data = json.loads(json.dumps(calibrated.to_json()))
    shuffled = dict(reversed(list(data.items())))  # key order is not a part either
    assert Predictor.from_json(shuffled) == calibrated
    assert Predictor.from_json(shuffled).fingerprint() == data["fingerprint"] == calibrated.fingerprint()


def test_the_fingerprint_is_the_same_in_another_process() -> None:
    """Another interpreter, another hash seed, a weight reached by float arithmetic: the same print."""
    code = (
        "from predictor.model import Predictor, ProxyRef\n"
        "from predictor.calibrate import Calibrator\n"
        "p = Predictor(adapters=('a' * 64, 'b' * 64), prompt_hash='p' * 64, weight=0.1 + 0.2,"
        f" proxy=ProxyRef({PROXY.labels_hash!r}, 3)).calibrated(Calibrator(method='temperature', temperature=1 / 3))\n"
        "print(p.fingerprint())\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    here = replace(BLENDED, weight=0.3).calibrated(Calibrator(method="temperature", temperature=0.3333333333))
    assert out.stdout.strip() == here.fingerprint()
