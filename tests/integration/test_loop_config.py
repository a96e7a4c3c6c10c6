"""loop_config(project): the deployment's loop options resolved for one project. The adapted layers
follow the project's label count (TrainConfig.for_labels): the GPU profile adapts 8 layers, 16 for a
project with more than WIDE_LABELS labels; an option of 0 keeps 8 for every project; the CPU profile
adapts every layer whatever the count."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from annotate.loopconfig import loop_config
from annotate.models import AdapterVersion, Project, Round
from annotate.services.evaluation import _adapters
from annotate.services.projects import LabelInput, project_create
from training.lora import ADAPTER_CONFIG, WIDE_LABELS

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


def test_the_round_reports_the_layers_its_adapters_really_have(settings: Any, tmp_path: Path) -> None:
    """The ML page's "Adapters" line reads the adapters' own config: a warm start keeps the shape of
    its first round, so the option alone could say 16 where 8 were trained."""
    settings.LOOP_OPTIONS = {"profile": "gpu"}
    many = _project("many", WIDE_LABELS + 1)
    row = Round.objects.create(project=many, number=1)

    def adapter(k: int, layers: list[int]) -> None:
        folder = tmp_path / f"a{layers[0]}-{k}"
        folder.mkdir()
        (folder / ADAPTER_CONFIG).write_text(json.dumps({"r": 8, "layers_to_transform": layers}))
        AdapterVersion.objects.update_or_create(
            round=row, arm="prod", k=k, defaults={"project": many, "path": str(folder), "content_hash": f"h{k}"}
        )

    for k in range(2):
        adapter(k, list(range(14, 30)))
    info = _adapters(row, labels_used=500)
    assert info | {"wide_labels": 0} == {
        "k": 2, "rank": 8, "layers": 16, "steps": 48, "batch_size": 32, "wide": True, "wide_labels": 0
    }  # fmt: skip
    for k in range(2):  # warm-started from 8-layer adapters: 8 layers, and no "wide" reason
        adapter(k, list(range(22, 30)))
    assert (_adapters(row, labels_used=500)["layers"], _adapters(row, labels_used=500)["wide"]) == (8, False)
