"""The managed-batch road, against the real database: export the manifest of the items still to
label, answer it as a batch API would, import the results — idempotent on a second import, a file
from another prompt version refused whole. Answers with logprobs become AutoLabel decisions through the
latest calibration (the real one, fitted with the tiny model on CPU), its per-class thresholds, the
audit's blocked classes, the label mass and the random audit, exactly as the engine's scores would;
an import repeated changes nothing, a calibration fitted under another prompt decides nothing."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from annotate.loopconfig import prompt_spec
from annotate.models import AutoLabel, AutolabelRun, BatchApiAnswer, BatchItem, Calibration, Label
from annotate.selectors import autolabel as auto_sel
from annotate.services import autolabel as auto
from annotate.services import batch_api
from predictor import calibrate as cal
from scoring import batch_manifest
from scoring.prompts import PromptSpec
from tests.integration.round_helpers import TEST_OPTIONS, trec_project

pytestmark = [pytest.mark.django_db, pytest.mark.data]


@pytest.fixture(autouse=True)
def _tiny_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALANN_LOOP_OPTIONS", TEST_OPTIONS)


def answer(manifest: list[str], *, chat_format: bool = False) -> list[str]:
    """A batch API's results: the first allowed label for every request."""
    out = []
    for line in manifest:
        request = json.loads(line)
        code = request["allowed_labels"][0]
        if chat_format:
            record = {
                "custom_id": request["custom_id"],
                "response": {"body": {"choices": [{"message": {"content": code}}]}},
            }
        else:
            record = {"custom_id": request["custom_id"], "label": code}
        out.append(json.dumps(record) + "\n")
    return out


def test_manifest_round_trip(shared_data: Path, tiny_llama_dir: Path, tmp_path: Path) -> None:
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    manifest = list(batch_api.manifest_export(project=project, model="some-model"))
    pool = set(auto_sel.unlabelled_pool(project=project).values_list("id", flat=True))
    assert len(manifest) == len(pool) == 44
    first = json.loads(manifest[0])
    assert first["body"]["max_tokens"] == 1 and first["body"]["model"] == "some-model"
    assert first["body"]["messages"][-1]["role"] == "user" and first["body"]["messages"][0]["role"] == "system"
    codes = [lab.code for lab in Label.objects.filter(project=project).order_by("order", "id")]
    assert first["allowed_labels"] == codes
    version, _, item_id = first["custom_id"].rpartition(":")
    assert int(item_id) in pool and len(version) == 16

    results = answer(manifest[:30]) + answer(manifest[30:], chat_format=True)
    done = batch_api.results_import(project=project, lines=results)
    assert done.answers == 44 and done.added == 44
    assert set(BatchApiAnswer.objects.values_list("label__code", flat=True)) == {codes[0]}
    again = batch_api.results_import(project=project, lines=results)
    assert again.answers == 44 and again.added == 0 and BatchApiAnswer.objects.count() == 44  # idempotent
    assert list(batch_api.manifest_export(project=project)) == []  # nothing left to ask under this prompt

    project.instructions = "Classify the question by the kind of answer it expects."
    project.save()
    with pytest.raises(batch_manifest.ManifestError, match="prompt version"):
        batch_api.results_import(project=project, lines=results)  # answered under the old prompt: refused
    assert BatchApiAnswer.objects.count() == 44
    assert len(list(batch_api.manifest_export(project=project))) == 44  # the new prompt asks again


def test_a_bad_answer_refuses_the_whole_file(shared_data: Path, tiny_llama_dir: Path, tmp_path: Path) -> None:
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    manifest = list(batch_api.manifest_export(project=project))[:3]
    results = answer(manifest)
    results[2] = json.dumps({"custom_id": json.loads(manifest[2])["custom_id"], "label": "not-a-code"})
    with pytest.raises(batch_manifest.ManifestError, match="not one of the allowed labels"):
        batch_api.results_import(project=project, lines=results)
    assert not BatchApiAnswer.objects.exists()


def test_the_command_exports_and_imports(shared_data: Path, tiny_llama_dir: Path, tmp_path: Path) -> None:
    from django.core.management import call_command

    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    manifest, results = tmp_path / "manifest.jsonl", tmp_path / "results.jsonl"
    call_command("autolabel", "batch-manifest", str(project.pk), "-o", str(manifest))
    lines = manifest.read_text().splitlines(keepends=True)
    assert len(lines) == 44
    results.write_text("".join(answer(lines)))
    call_command("autolabel", "batch-results", str(project.pk), "-i", str(results))
    call_command("autolabel", "batch-results", str(project.pk), "-i", str(results))
    assert BatchApiAnswer.objects.count() == 44


def answer_with_logprobs(
    manifest: list[str], spec: PromptSpec
) -> tuple[list[str], dict[int, tuple[list[float], float | None]]]:
    """Results with logprobs, varied: label n % C; a confident answer (0.97), an unsure one (0.45), one
    whose label mass is low (0.9 of 0.3 on the codes), the answered code's logprob alone, and every
    eighth line without logprobs. Returns the lines and {item id: (probs, mass)} sent."""
    out, sent = [], {}
    for n, raw in enumerate(manifest):
        request = json.loads(raw)
        codes, item_id = request["allowed_labels"], int(request["custom_id"].rpartition(":")[2])
        code, other = codes[n % len(codes)], codes[(n + 1) % len(codes)]
        record: dict = {"custom_id": request["custom_id"], "label": code}
        kind = n % 8
        if kind in (0, 1, 2):
            record["logprobs"] = {code: math.log(0.97), other: math.log(0.03)}
        elif kind in (3, 4):
            record["logprobs"] = {code: math.log(0.45), other: math.log(0.40)}
        elif kind == 5:  # 0.3 of the probability on the codes: under the project's label-mass threshold
            record["logprobs"] = {code: math.log(0.27), other: math.log(0.03)}
        elif kind == 6:
            record["logprob"] = math.log(0.99)
        if kind != 7:
            parsed = batch_manifest.parse_results([json.dumps(record)], spec)[0]
            sent[item_id] = (list(parsed.probs), parsed.mass)
        out.append(json.dumps(record) + "\n")
    return out, sent


def expected(calibration: Calibration, probs: list[float], mass: float | None, mass_threshold: float) -> tuple:
    """What the engine's path decides for this distribution: calibrated argmax and confidence, accepted
    when the class has a threshold it reaches (none for a blocked class) and the mass is not low."""
    q = cal.Calibrator.from_json(calibration.calibrator).apply(np.array([probs]))[0]
    pred = int(q.argmax())
    rule = calibration.thresholds["model"][pred]
    threshold = None if rule["label"] in calibration.blocked else rule["threshold"]
    ok = threshold is not None and q[pred] >= threshold and (mass is None or mass >= mass_threshold)
    return pred, ("accepted" if ok else "escalated")


@pytest.mark.slow
@pytest.mark.postgres  # the upserts and the row lock, on PostgreSQL too (make test)
def test_answers_become_decisions_through_the_calibration_idempotently(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path
) -> None:
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir, mass_threshold=0.5)
    manifest = list(batch_api.manifest_export(project=project))
    results, sent = answer_with_logprobs(manifest, prompt_spec(project))

    first = batch_api.results_import(project=project, lines=results, audit_share=0.5)
    assert first.added == 44 and first.decided.refused.startswith("no finished calibration")
    assert not AutoLabel.objects.exists()  # the answers are kept, nothing decided

    holder: list[Calibration] = []
    auto.run_inline(
        lambda send: holder.append(auto.calibration_request(project=project, cascade="agreement", dispatch=send))
    )
    calibration = Calibration.objects.get(id=holder[0].id)
    assert calibration.status == "done", calibration.error
    assert calibration.fingerprint["prompt version"] == first.version
    # test state: every class auto-accepted from a calibrated 0.6 (the threshold rule is tested on arrays),
    # one class blocked by the audit alarm
    rules = [{**r, "threshold": 0.6} for r in calibration.thresholds["model"]]
    blocked = rules[1]["label"]
    Calibration.objects.filter(id=calibration.id).update(
        thresholds={**calibration.thresholds, "model": rules}, blocked={blocked: "audit alarm (test)"}
    )
    calibration.refresh_from_db()

    second = batch_api.results_import(project=project, lines=results, audit_share=0.5)  # the same file again
    assert second.added == 0 and second.decided.refused == "" and second.decided.without_probs == 5
    assert second.decided.run is not None
    run = AutolabelRun.objects.get(id=second.decided.run)
    assert (run.source, run.status, run.prompt_hash, run.adapter_set_hash) == (
        "batch_api",
        "done",
        first.version,
        "batch-api",
    )
    assert run.calibration_id == calibration.id and run.n_items == len(sent) == 39
    labels = list(Label.objects.filter(project=project).order_by("order", "id").values_list("id", flat=True))
    rows = {r.item_id: r for r in AutoLabel.objects.filter(run=run)}
    assert set(rows) == set(sent)
    for item_id, (probs, mass) in sent.items():
        pred, decision = expected(calibration, probs, mass, 0.5)
        row = rows[item_id]
        assert (row.label_id, row.decision, row.tier) == (labels[pred], decision, "model"), item_id
    decisions = [r.decision for r in rows.values()]
    assert 0 < decisions.count("accepted") == second.decided.accepted < len(rows)
    assert second.decided.escalated == decisions.count("escalated")
    assert not any(r.decision == "accepted" for r in rows.values() if r.label_id == labels[1])  # blocked class
    low = [i for i, (_, mass) in sent.items() if mass is not None and mass < 0.5]
    assert low and all(rows[i].decision == "escalated" for i in low)  # under the label mass: people
    audited = {i for i, r in rows.items() if r.audit == "pending"}
    assert audited and all(rows[i].decision == "accepted" for i in audited) and len(audited) == second.decided.audited
    people = BatchItem.objects.filter(item__project=project)
    assert set(people.filter(source="audit").values_list("item_id", flat=True)) == audited
    escalated = {i for i, r in rows.items() if r.decision == "escalated"}
    assert set(people.filter(source="cascade").values_list("item_id", flat=True)) == escalated

    state = (AutoLabel.objects.count(), AutolabelRun.objects.count(), people.count(), BatchApiAnswer.objects.count())
    third = batch_api.results_import(project=project, lines=results, audit_share=0.5)
    assert third.added == 0 and third.decided.run is None and third.decided.without_probs == 5
    assert (
        AutoLabel.objects.count(),
        AutolabelRun.objects.count(),
        people.count(),
        BatchApiAnswer.objects.count(),
    ) == state


@pytest.mark.slow
@pytest.mark.postgres  # the upserts and the row lock, on PostgreSQL too (make test)
def test_a_calibration_of_another_prompt_decides_nothing(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path
) -> None:
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    results, _ = answer_with_logprobs(list(batch_api.manifest_export(project=project))[:12], prompt_spec(project))
    holder: list[Calibration] = []
    auto.run_inline(
        lambda send: holder.append(auto.calibration_request(project=project, cascade="none", dispatch=send))
    )
    calibration = Calibration.objects.get(id=holder[0].id)
    Calibration.objects.filter(id=calibration.id).update(
        fingerprint={**calibration.fingerprint, "prompt version": "0123abcd"}
    )
    done = batch_api.results_import(project=project, lines=results)
    assert done.added == 12 and done.decided.run is None
    assert (
        "prompt version" in done.decided.refused
        and "0123abcd" in done.decided.refused
        and "recalibrate" in done.decided.refused
    )
    assert not AutoLabel.objects.exists() and not AutolabelRun.objects.exists()
    project.instructions = "Classify the question by the kind of answer it expects."
    project.save()
    with pytest.raises(batch_manifest.ManifestError, match="prompt version"):  # the file's own version: refused whole
        batch_api.results_import(project=project, lines=results)
    assert BatchApiAnswer.objects.count() == 12 and not AutoLabel.objects.exists()
