"""A round's configuration is decided once, when it is requested, and every process reads that one:
workers that see other devices or other options agree on it; a change of options reaches the next
round only; a worker that cannot run it refuses by the option's name (annotate/loopconfig.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from annotate import loopconfig
from annotate.loopconfig import (
    ConfigNotHonouredError,
    config_fingerprint,
    loop_config,
    round_config,
    round_frozen,
    worker_config,
)
from annotate.models import Project, Round
from annotate.services.projects import LabelInput, project_create
from annotate.services.round_state import round_transition
from annotate.services.rounds import RoundError, round_request_start

pytestmark = pytest.mark.django_db

OPTIONS: dict[str, Any] = {"max_context": 192, "train": {"max_steps": 3, "batch_size": 4}}


def _project(**knobs: Any) -> Project:
    return project_create(
        name="frozen", labels=[LabelInput("yes", "Y"), LabelInput("no", "N")], model_dir="/models/m", **knobs
    )


def _as_worker(monkeypatch: Any, settings: Any, *, gpu: bool, options: dict[str, Any]) -> None:
    """This process as a worker that sees a GPU (or not) and has its own ALANN_LOOP_OPTIONS."""
    monkeypatch.setattr("scoring.device.cuda_available", lambda: gpu)
    settings.LOOP_OPTIONS = options


def _finish(row: Round) -> None:
    Round.objects.filter(id=row.id).update(status=Round.Status.DONE)


def test_workers_with_other_devices_and_options_read_the_same_frozen_config(monkeypatch: Any, settings: Any) -> None:
    settings.LOOP_OPTIONS = OPTIONS
    project = _project()
    row = round_request_start(project=project, user=None, run_here=True)
    requested = (row.config_fingerprint, round_config(row))
    assert requested[0] == config_fingerprint(row.config) and len(requested[0]) == 64
    seen = []
    for gpu, options in ((False, {}), (True, {"profile": "gpu"}), (True, {"profile": "gpu", "max_context": 1024})):
        _as_worker(monkeypatch, settings, gpu=gpu, options=options)
        fresh = Round.objects.get(id=row.id)  # a worker re-reads the row
        seen.append((config_fingerprint(round_frozen(fresh)), round_config(fresh)))
        # the deployment's options, as this worker would resolve them itself, differ…
        assert (loop_config(project).max_context == 1024) == (options.get("profile") == "gpu")
    # …but the round's config is the one frozen at the request, in every one of them
    assert seen == [requested] * 3
    config = requested[1]
    assert (config.max_context, config.train.max_steps, config.train.batch_size, config.train.top_layers) == (
        192,
        3,
        4,
        4,  # the CPU profile's top 4 layers
    )
    assert row.config["profile"] == "cpu" and config.model_dir == "/models/m" and config.k == project.ensemble_k
    assert [lab.code for lab in config.prompt.labels] == ["Y", "N"]


def test_an_option_changed_between_rounds_changes_the_next_rounds_fingerprint_only(settings: Any) -> None:
    settings.LOOP_OPTIONS = OPTIONS
    project = _project()
    first = round_request_start(project=project, user=None, run_here=True)
    _finish(first)
    same = round_request_start(project=project, user=None, run_here=True)
    assert same.config_fingerprint == first.config_fingerprint  # nothing changed: the same config
    _finish(same)
    settings.LOOP_OPTIONS = {**OPTIONS, "train": {**OPTIONS["train"], "lr": 5e-4}}
    changed = round_request_start(project=project, user=None, run_here=True)
    assert changed.config_fingerprint != first.config_fingerprint
    assert round_config(changed).train.lr == 5e-4
    for earlier in (first, same):  # rounds already requested keep theirs
        fresh = Round.objects.get(id=earlier.id)
        assert fresh.config_fingerprint == first.config_fingerprint and round_config(fresh).train.lr == 1e-3
    _finish(changed)
    Project.objects.filter(id=project.id).update(batch_size=17)  # a project knob is part of it too
    knob = round_request_start(project=Project.objects.get(id=project.id), user=None, run_here=True)
    assert knob.config_fingerprint != changed.config_fingerprint and round_config(knob).selection.batch_size == 17


def test_a_worker_that_cannot_honour_the_config_names_the_option(monkeypatch: Any, settings: Any) -> None:
    settings.LOOP_OPTIONS = OPTIONS
    project = _project(engine="vllm")
    row = round_request_start(project=project, user=None, run_here=True)
    _as_worker(monkeypatch, settings, gpu=False, options={})
    with pytest.raises(ConfigNotHonouredError, match=r"round 1's frozen config has engine 'vllm', which needs a GPU"):
        worker_config(row)
    _finish(row)
    Project.objects.filter(id=project.id).update(engine="hf")
    settings.LOOP_OPTIONS = {**OPTIONS, "engine_options": {"max_num_seqs": 64}}  # a vLLM option for the hf engine
    row = round_request_start(project=Project.objects.get(id=project.id), user=None, run_here=True)
    with pytest.raises(
        ConfigNotHonouredError, match=r"engine_options\.max_num_seqs, which the hf engine does not take"
    ):
        worker_config(row)
    _finish(row)
    settings.LOOP_OPTIONS = {**OPTIONS, "engine_options": {"device": "cuda:0"}}
    row = round_request_start(project=Project.objects.get(id=project.id), user=None, run_here=True)
    with pytest.raises(ConfigNotHonouredError, match=r"engine_options\.device 'cuda:0'.*has no GPU"):
        worker_config(row)
    _as_worker(monkeypatch, settings, gpu=True, options={})
    assert dict(worker_config(row).engine_options) == {"device": "cuda:0"}  # a GPU worker runs it


def test_a_batch_invariant_round_on_a_worker_whose_vllm_was_imported_without_it_names_the_option(
    monkeypatch: Any, settings: Any
) -> None:
    """vLLM reads VLLM_BATCH_INVARIANT when it is imported (a gpu worker imports it at start): a round frozen
    with batch_invariant cannot be honoured by a worker that imported vLLM without it, and says so."""
    import importlib.util
    import sys
    import types

    settings.LOOP_OPTIONS = {**OPTIONS, "engine_options": {"batch_invariant": True}}
    row = round_request_start(project=_project(engine="vllm"), user=None, run_here=True)
    assert dict(round_config(row).engine_options) == {"batch_invariant": True}  # frozen: a round's option
    _as_worker(monkeypatch, settings, gpu=True, options={})
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else find_spec(name, *a)
    )
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))  # a gpu worker's vLLM, imported at start
    monkeypatch.delenv("VLLM_BATCH_INVARIANT", raising=False)
    with pytest.raises(
        ConfigNotHonouredError, match=r"engine_options\.batch_invariant, and this worker .* imported vLLM"
    ):
        worker_config(row)
    monkeypatch.setenv("VLLM_BATCH_INVARIANT", "1")  # the worker started with it
    assert dict(worker_config(row).engine_options) == {"batch_invariant": True}


def test_a_scoring_task_on_such_a_worker_fails_the_round_with_that_message(
    monkeypatch: Any, settings: Any, tmp_path: Path
) -> None:
    from annotate.services import scoring

    settings.LOOP_OPTIONS = OPTIONS
    project = _project(engine="vllm")
    row = round_request_start(project=project, user=None, run_here=True)
    round_transition(row.id, Round.Status.PENDING, Round.Status.SCORING)
    row.shards.create(shard=0, n_shards=1, n_items=0)
    _as_worker(monkeypatch, settings, gpu=False, options={"profile": "gpu"})
    with pytest.raises(ConfigNotHonouredError, match="engine 'vllm'"):
        scoring.score_shard_run(round_id=row.id, shard=0)
    assert "engine 'vllm'" in row.shards.get().error and "stale" not in row.shards.get().error


def test_the_local_share_of_the_gpu_stays_with_the_worker(monkeypatch: Any, settings: Any) -> None:
    settings.LOOP_OPTIONS = {
        **OPTIONS,
        "engine_options": {"gpu_memory_utilization": 0.5, "batch_size": 32, "cudagraph_mode": "NONE"},
    }
    row = round_request_start(project=_project(), user=None, run_here=True)
    assert row.config["loop"]["engine_options"] == {"batch_size": 32}  # not frozen: the host's business
    own = {"gpu_memory_utilization": 0.15, "cudagraph_mode": "PIECEWISE", "cudagraph_capture_sizes": [1, 512]}
    _as_worker(monkeypatch, settings, gpu=True, options={"engine_options": own})
    monkeypatch.setattr(loopconfig, "check_honourable", lambda config, round_number: None)  # no vLLM here
    assert dict(worker_config(row).engine_options) == {"batch_size": 32, **own}


def test_a_round_of_an_older_release_is_frozen_once_on_first_read(settings: Any) -> None:
    settings.LOOP_OPTIONS = OPTIONS
    project = _project()
    row = Round.objects.create(project=project, number=1)  # no config: requested before they were frozen
    first = round_frozen(row)
    settings.LOOP_OPTIONS = {**OPTIONS, "max_context": 512}
    again = Round.objects.get(id=row.id)
    assert round_frozen(again) == first and again.config_fingerprint == config_fingerprint(first)
    assert round_config(again).max_context == 192


def test_invalid_deployment_options_refuse_the_request_and_write_nothing(settings: Any) -> None:
    project = _project()
    settings.LOOP_OPTIONS = {"profile": "tpu"}
    with pytest.raises(RoundError, match="profile must be one of"):
        round_request_start(project=project, user=None)
    settings.LOOP_OPTIONS = {"train": {"warp_speed": 9}}
    with pytest.raises(RoundError, match="unknown training options"):
        round_request_start(project=project, user=None)
    assert not Round.objects.filter(project=project).exists()


def test_the_ml_page_shows_each_rounds_frozen_config(client: Any, settings: Any, django_user_model: Any) -> None:
    from django.contrib.auth.models import Group

    settings.LOOP_OPTIONS = OPTIONS
    project = _project()
    first = round_request_start(project=project, user=None, run_here=True)
    _finish(first)
    settings.LOOP_OPTIONS = {**OPTIONS, "max_context": 256}
    second = round_request_start(project=project, user=None, run_here=True)
    user = django_user_model.objects.create_user(username="ml", password="pw-123456789")
    user.groups.add(Group.objects.get_or_create(name="ml")[0])
    client.force_login(user)
    page = client.get(f"/p/{project.id}/ml/").content.decode()
    assert page.count('class="round-config"') == 2
    assert first.config_fingerprint[:12] in page and second.config_fingerprint[:12] in page
    assert "context 192 tokens" in page and "context 256 tokens" in page
    assert page.count("<strong>changed</strong>") == 1  # round 2's differs from round 1's
    assert json.dumps(first.config["loop"]["max_context"]) == "192"
