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
from training.lora import ADAPTER_CONFIG, TRAINING_INFO, WIDE_LABELS

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
    settings.LOOP_OPTIONS = {"profile": "cpu"}  # the top 4, 8 for many labels (issue 32, problem 5)
    assert [loop_config(p).train.top_layers for p in (few, many)] == [4, 8]


def test_the_round_reports_the_layers_its_adapters_really_have(settings: Any, tmp_path: Path) -> None:
    """The ML page's "Adapters" line reads the adapters' own files: a warm start keeps the shape of
    the project's first adapters, so the options alone could say 16 where 8 were trained."""
    settings.LOOP_OPTIONS = {"profile": "gpu"}
    many = _project("many", WIDE_LABELS + 1)
    rows = [Round.objects.create(project=many, number=1)]  # the last one is the round under test

    def adapter(k: int, layers: list[int] | None, info: dict[str, Any] | None = None) -> None:
        folder = tmp_path / f"adapter-{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        if layers is not None:
            (folder / ADAPTER_CONFIG).write_text(json.dumps({"r": 8, "layers_to_transform": layers}))
            (folder / TRAINING_INFO).write_text(json.dumps(info or {"steps": 48}))
        AdapterVersion.objects.update_or_create(
            round=rows[-1], arm="prod", k=k, defaults={"project": many, "path": str(folder), "content_hash": f"h{k}"}
        )

    def summary() -> tuple[Any, ...]:
        info = _adapters(rows[-1])
        return info["k"], info["rank"], info["layers"], info["steps"], info["wide"], info["unreadable"]

    for k in range(2):
        adapter(k, list(range(14, 30)))
    assert summary() == (2, 8, [16], 48, True, 0)
    for k in range(2):  # warm-started from 8-layer adapters: 8 layers, and no "more labels" reason
        adapter(k, list(range(22, 30)))
    assert summary() == (2, 8, [8], 48, False, 0)
    adapter(1, None)  # one member's files are gone: said, not guessed
    assert summary() == (2, 8, [8], 48, False, 1)
    settings.LOOP_OPTIONS = {"profile": "gpu", "train": {"top_layers": 16}}  # 16 by option: no label reason
    rows.append(Round.objects.create(project=many, number=2))  # options apply from the next round on
    for k in range(2):
        adapter(k, list(range(14, 30)))
    assert summary()[4] is False
    assert _adapters(rows[-1])["step_modes"] == []  # training.json from before "fixed_step" was recorded
    adapter(0, list(range(14, 30)), {"steps": 48, "fixed_step": "graph"})
    adapter(1, list(range(14, 30)), {"steps": 48, "fixed_step": None})  # the per-batch step
    assert _adapters(rows[-1])["step_modes"] == ["graph", "per-batch"]
    adapter(1, list(range(14, 30)), {"steps": 48, "fixed_step": "eager"})  # a capture that fell back
    assert _adapters(rows[-1])["step_modes"] == ["eager", "graph"]


def test_a_round_trains_every_arm_on_its_lineages_layer_count(settings: Any, tmp_path: Path) -> None:
    """The prod members warm-start (and so keep the first adapters' shape); the from-scratch member
    and the comparison arms of the same round get that shape too, so their comparisons stay like for
    like after a deployment changes the layer count a project's labels resolve to."""
    from annotate.services.training import _lineage_config

    settings.LOOP_OPTIONS = {"profile": "gpu"}
    many = _project("many", WIDE_LABELS + 1)
    first = Round.objects.create(project=many, number=1, status=Round.Status.DONE)
    second = Round.objects.create(project=many, number=2)
    config = loop_config(many)
    assert config.train.top_layers == 16
    assert _lineage_config(first, config) is config  # no earlier adapters: the options decide
    folder = tmp_path / "first-prod-0"
    folder.mkdir()
    (folder / ADAPTER_CONFIG).write_text(json.dumps({"r": 8, "layers_to_transform": list(range(22, 30))}))
    AdapterVersion.objects.create(project=many, round=first, arm="prod", k=0, path=str(folder), content_hash="h")
    resolved = _lineage_config(second, config)
    assert resolved.train.top_layers == 8 and resolved.train.lr == config.train.lr  # only the layer count
    (folder / ADAPTER_CONFIG).write_text(json.dumps({"r": 8, "layers_to_transform": list(range(14, 30))}))
    assert _lineage_config(second, config) is config  # the same count: nothing to change
