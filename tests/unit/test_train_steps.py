"""How many optimiser steps a training run takes: epochs over the labels, floored by min_steps,
capped by max_steps."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from training.lora import TrainConfig, total_steps


@given(
    n=st.integers(1, 5000),
    epochs=st.integers(1, 6),
    batch=st.integers(1, 64),
    min_steps=st.integers(0, 200),
    max_steps=st.integers(0, 200),
)
def test_steps_are_the_epochs_floored_by_min_and_capped_by_max(
    n: int, epochs: int, batch: int, min_steps: int, max_steps: int
) -> None:
    config = TrainConfig(epochs=epochs, batch_size=batch, min_steps=min_steps, max_steps=max_steps)
    steps = total_steps(n, config)
    by_epochs = epochs * math.ceil(n / batch)
    if max_steps:
        assert steps <= max_steps
        assert steps == min(max(by_epochs, min_steps), max_steps)
    else:
        assert steps == max(by_epochs, min_steps)
    assert steps >= min(by_epochs, max_steps or by_epochs)  # the floor never lowers a run


def test_small_label_sets_get_the_floor() -> None:
    config = TrainConfig(epochs=3, batch_size=32, min_steps=48, max_steps=48)
    assert total_steps(100, config) == 48  # 12 by epochs alone
    assert total_steps(1000, config) == 48  # 96 by epochs, capped
    assert total_steps(100, TrainConfig(epochs=3, batch_size=32, max_steps=48)) == 12


def test_a_negative_floor_is_refused() -> None:
    with pytest.raises(ValueError, match="invalid training config"):
        TrainConfig(min_steps=-1)


@given(
    top=st.integers(0, 30),
    wide=st.integers(0, 30),
    n_labels=st.integers(1, 300),
)
def test_wide_layers_replace_a_smaller_top_layer_count_above_the_label_threshold(
    top: int, wide: int, n_labels: int
) -> None:
    from training.lora import WIDE_LABELS

    config = TrainConfig(top_layers=top, wide_top_layers=wide)
    resolved = config.for_labels(n_labels)
    # Only the layer count may change (every other field equal), never downward, never from 0 (every
    # layer is already the most), and never at or under the threshold.
    assert replace(resolved, top_layers=top) == config
    assert resolved.top_layers >= top
    if top == 0 or n_labels <= WIDE_LABELS:
        assert resolved.top_layers == top
    # Concrete cases (the boundary): 50 labels keep 8, 51 take 16; a wider stack or 0 is kept.
    assert TrainConfig(top_layers=8, wide_top_layers=16).for_labels(WIDE_LABELS).top_layers == 8
    assert TrainConfig(top_layers=8, wide_top_layers=16).for_labels(WIDE_LABELS + 1).top_layers == 16
    assert TrainConfig(top_layers=20, wide_top_layers=16).for_labels(151).top_layers == 20
    assert TrainConfig(top_layers=0, wide_top_layers=16).for_labels(151).top_layers == 0


def test_a_negative_wide_layer_count_is_refused() -> None:
    with pytest.raises(ValueError, match="invalid training config"):
        TrainConfig(wide_top_layers=-1)


def test_arm_steps_apply_to_the_comparison_arms_alone() -> None:
    """train.arm_steps: the active and random arms train that many steps a run, alike; prod and scratch
    members keep the config's own rule; 0 (every profile's default) changes nothing."""
    config = TrainConfig(min_steps=48, max_steps=48, batch_size=16, arm_steps=24)
    assert total_steps(200, config.for_arm("active")) == total_steps(183, config.for_arm("random")) == 24
    assert total_steps(200, config.for_arm("prod")) == total_steps(200, config.for_arm("scratch")) == 48
    assert TrainConfig(min_steps=48, max_steps=48).for_arm("random") == TrainConfig(min_steps=48, max_steps=48)
    with pytest.raises(ValueError):
        TrainConfig(arm_steps=-1)
