"""The managed-batch road, against the real database: export the manifest of the items still to
label, answer it as a batch API would, import the results — idempotent on a second import, a file
from another prompt version refused whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from annotate.models import BatchApiAnswer, Label
from annotate.selectors import autolabel as auto_sel
from annotate.services import batch_api
from scoring import batch_manifest
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
