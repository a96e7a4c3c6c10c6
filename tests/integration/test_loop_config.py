"""loop_config(project): the deployment's loop options resolved for one project. The adapted layers
follow the project's label count (TrainConfig.for_labels): the GPU profile adapts 8 layers, 16 for a
project with more than WIDE_LABELS labels; an option of 0 keeps 8 for every project; the CPU profile
adapts every layer whatever the count."""

from __future__ import annotations

from typing import Any

import pytest

from annotate.loopconfig import loop_config
from annotate.models import Project
from annotate.services.projects import LabelInput, project_create
from training.lora import WIDE_LABELS

pytestmark = pytest.mark.django_db


def _project(name: str, n_labels: int) -> Project:
    return project_create(name=name, labels=[LabelInput(f"label {i}", f"c{i}") for i in range(n_labels)])


def test_the_adapted_layers_follow_the_label_count(settings: Any) -> None:
    few, edge, many = _project("few", 6), _project("edge", WIDE_LABELS), _project("many", WIDE_LABELS + 1)
    settings.LOOP_OPTIONS = {"profile": "gpu"}
    assert [loop_config(p).train.top_layers for p in (few, edge, many)] == [8, 8, 16]
    settings.LOOP_OPTIONS = {"profile": "gpu", "train": {"wide_top_layers": 0}}
    assert loop_config(many).train.top_layers == 8
    settings.LOOP_OPTIONS = {"profile": "gpu", "train": {"top_layers": 20}}  # already wider: kept
    assert loop_config(many).train.top_layers == 20
    settings.LOOP_OPTIONS = {"profile": "cpu"}
    assert loop_config(many).train.top_layers == 0
