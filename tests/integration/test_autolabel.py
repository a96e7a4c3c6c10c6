"""Auto-labelling services against the real database and the real hf engine (tiny llama, CPU), run
inline (no broker): calibration, refusal without evidence, the bulk job and its re-run, template
drift, dead letters and their retry, the audit alarm, the gold set, export with provenance. Also run on
PostgreSQL by `make test` (the audit settles with UPDATEs filtered through a join; budgets read JSON keys)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from annotate.models import AutoLabel, AutolabelRun, BatchItem, Calibration, DeadLetter, GoldItem, Item, Label
from annotate.selectors import autolabel as auto_sel
from annotate.services import autolabel as auto
from annotate.services.imports import import_items
from annotate.services.labeling import label_submit, next_item_for
from tests.integration.round_helpers import TEST_OPTIONS, annotator, trec_project

pytestmark = [pytest.mark.django_db, pytest.mark.slow, pytest.mark.data, pytest.mark.postgres]


@pytest.fixture(autouse=True)
def _tiny_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALANN_LOOP_OPTIONS", TEST_OPTIONS)


def calibrated(project, **options) -> Calibration:  # type: ignore[no-untyped-def]
    holder: list[Calibration] = []
    auto.run_inline(lambda send: holder.append(auto.calibration_request(project=project, dispatch=send, **options)))
    row = Calibration.objects.get(id=holder[0].id)
    assert row.status == "done", row.error
    return row


def run(project, **options) -> AutolabelRun:  # type: ignore[no-untyped-def]
    holder: list[AutolabelRun] = []
    auto.run_inline(lambda send: holder.append(auto.run_request(project=project, dispatch=send, **options)))
    return AutolabelRun.objects.get(id=holder[0].id)


def accept_everything(calibration: Calibration) -> None:
    """Test state: thresholds of 0 for every class (the fitting rule is tested on arrays)."""
    rules = calibration.thresholds
    rules["model"] = [{**r, "threshold": 0.0} for r in rules["model"]]
    Calibration.objects.filter(id=calibration.id).update(thresholds=rules)


def test_calibration_refuses_classes_without_evidence(shared_data: Path, tiny_llama_dir: Path, tmp_path: Path) -> None:
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    row = calibrated(project, cascade="agreement")
    assert row.n_items == 16 and row.calibrator["method"] == "temperature"
    assert 0.0 <= row.after["ece"] <= 1.0 and len(row.before["bins"]) == 10
    assert row.after["nll"] <= row.before["nll"] + 1e-9  # the fitted temperature never makes NLL worse
    for rules in row.thresholds.values():
        assert all(r["threshold"] is None for r in rules)  # no calibration split: nothing to fit on
        assert all(r["needed"] == 59 and "59 more needed" in r["reason"] for r in rules)  # 0.95^59 < δ
    assert row.n_calibration == 0 and row.delta == 0.05
    assert 0.0 <= row.bias["flip_rate"] <= 1.0 and len(row.bias["code_prior"]) == 6
    assert row.rate["tokens_per_second"] > 0 and row.fingerprint["instructions"]
    budget = auto_sel.budget(project=project, calibration=row)
    assert budget["n_items"] == 44 and budget["rows"][0]["gpu_hours"] > 0


def test_run_decides_every_item_and_a_rerun_is_a_no_op(shared_data: Path, tiny_llama_dir: Path, tmp_path: Path) -> None:
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    calibrated(project, cascade="agreement")
    first = run(project)
    assert first.status == "done" and first.n_items == 44 and first.items_done == 44
    rows = {r.item_id: (r.label_id, r.decision, r.tier) for r in AutoLabel.objects.filter(run=first)}
    assert len(rows) == 44 and {d for _, d, _ in rows.values()} == {"escalated"}  # no class has a threshold
    cascade = BatchItem.objects.filter(source="cascade")
    assert set(cascade.values_list("item_id", flat=True)) == set(rows)
    assert cascade.first().round.status == "labeling"  # type: ignore[union-attr]  # people get them
    progress = auto_sel.run_progress(run=first)
    assert progress.percent == 100 and progress.tiers[0] == {
        "tier": "model",
        "tried": 44,
        "accepted": 0,
        "escalated": 44,
    }
    assert progress.tiers[1]["tier"] == "agreement" and progress.tiers[1]["tried"] == 44

    again = run(project)
    assert again.status == "done" and again.n_items == 0 and again.items_done == 0
    assert AutoLabel.objects.count() == 44 and BatchItem.objects.filter(source="cascade").count() == 44


def test_drifted_prefix_refuses_auto_accept(shared_data: Path, tiny_llama_dir: Path, tmp_path: Path) -> None:
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    calibrated(project, cascade="none")
    project.instructions = "Classify the question by the kind of answer it expects."
    project.save()
    refused = run(project)
    assert refused.status == "refused"
    assert "instructions changed" in refused.reason and "recalibrate" in refused.reason
    assert not AutoLabel.objects.exists()


def test_dead_letters_are_written_and_retried(shared_data: Path, tiny_llama_dir: Path, tmp_path: Path) -> None:
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir, mass_threshold=0.5)
    long_file = tmp_path / "long.csv"
    long_file.write_text("id,text\nlong1," + "why is the sky blue " * 600 + "\n")  # past a 2,048-token window
    import_items(project=project, path=long_file)
    calibrated(project, cascade="none")
    first = run(project)
    assert first.status == "done"  # dead letters never stall the run
    letters = {d.item.external_id: d for d in auto_sel.dead_letters(project=project)}
    assert letters["long1"].reason == "over_context"
    assert {d.reason for k, d in letters.items() if k != "long1"} == {"low_mass"}  # random model: mass ≈ 0
    assert "under the threshold" in letters["t0"].detail if "t0" in letters else True
    assert len(letters) == 45 and not AutoLabel.objects.exists()
    again = run(project)  # the same prompt and adapters: the open dead letters wait for their retry
    assert again.status == "done" and again.n_items == 0 and DeadLetter.objects.count() == 45

    project.mass_threshold = 0.0
    project.save()
    picked: list[int] = []
    auto.run_inline(lambda send: picked.append(auto.dead_letter_retry(project=project, dispatch=send)))
    assert picked == [45]
    assert not auto_sel.dead_letters(project=project).exists()
    assert AutoLabel.objects.filter(run=first).count() == 45  # the long item scored on its cut text
    assert DeadLetter.objects.filter(resolved=True).count() == 45


def test_audit_alarm_stops_auto_accepting_a_class(shared_data: Path, tiny_llama_dir: Path, tmp_path: Path) -> None:
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    calibration = calibrated(project, cascade="none")
    accept_everything(calibration)
    first = run(project, audit_share=0.5)
    accepted = AutoLabel.objects.filter(run=first, decision="accepted")
    assert accepted.count() == 44
    audited = list(accepted.filter(audit="pending").select_related("label", "item"))
    assert len(audited) >= 10 and BatchItem.objects.filter(source="audit").count() == len(audited)
    # the annotator, served the audit items by the queue, disagrees with every audited auto label
    user = annotator()
    labels = list(Label.objects.filter(project=project))
    auto_label_of = {r.item_id: r.label_id for r in audited}
    while (item := next_item_for(project=project, annotator=user)) is not None:
        wrong = next(lab for lab in labels if lab.pk != auto_label_of[item.id])
        label_submit(item=item, annotator=user, label=wrong)
    statuses = {s.label: s for s in auto.audit_refresh(calibration=calibration)}
    worst = max(statuses.values(), key=lambda s: s.audited)
    assert worst.audited >= 3 and worst.precision == 0.0 and worst.alarm
    calibration.refresh_from_db()
    assert worst.label in calibration.blocked and "under the 95% target" in calibration.blocked[worst.label]
    assert set(AutoLabel.objects.filter(audit="failed").values_list("id", flat=True)) == {r.id for r in audited}

    extra = tmp_path / "more.csv"
    extra.write_text("id,text\n" + "".join(f"m{i},What is question number {i} about ?\n" for i in range(20)))
    import_items(project=project, path=extra)
    second = run(project, audit_share=0.0)
    blocked_label = Label.objects.get(project=project, name=worst.label)
    assert not AutoLabel.objects.filter(run=second, decision="accepted", label=blocked_label).exists()
    assert AutoLabel.objects.filter(run=second, decision="escalated", label=blocked_label).exists() or not (
        AutoLabel.objects.filter(run=second, label=blocked_label).exists()
    )


def test_gold_set_is_stratified_double_labelled_and_never_trained_on(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path
) -> None:
    from annotate.selectors import loop as loop_sel

    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    added = auto.gold_draw(project=project, per_class=2)
    assert added == 12 and GoldItem.objects.count() == 12
    gold_ids = set(GoldItem.objects.values_list("item_id", flat=True))
    assert set(Item.objects.filter(id__in=gold_ids).values_list("required_labels", flat=True)) == {2}
    assert set(BatchItem.objects.filter(source="gold").values_list("item_id", flat=True)) == gold_ids
    assert not gold_ids & set(loop_sel.eligible_ids(project=project).tolist())
    for name in ("g1", "g2"):  # two annotators, each served every gold item by the queue
        user = annotator(name)
        while (item := next_item_for(project=project, annotator=user)) is not None:
            label_submit(item=item, annotator=user, label=Label.objects.get(pk=item.gold_label_id or 0))
    assert not gold_ids & set(loop_sel.labeled_items(project=project).item_ids)
    assert set(auto_sel.eval_items(project=project).item_ids) >= gold_ids
    true_counts = [Item.objects.filter(id__in=gold_ids, final_label=lab).count() for lab in Label.objects.all()]
    short = sum(max(0, 2 - n) for n in true_counts)  # a second draw tops up the true classes still short
    assert auto.gold_draw(project=project, per_class=2) == short
    assert GoldItem.objects.count() == 12 + short
    row = calibrated(project, cascade="none")
    report = row.gold_report
    assert report["n"] == 12 and report["n_pairs"] == 12 and report["kappa_human_human"] == 1.0
    assert len(report["confusion"]) == 6


def test_export_carries_provenance(shared_data: Path, tiny_llama_dir: Path, tmp_path: Path) -> None:
    from annotate.services.exports_autolabel import export_dataset, export_dataset_parquet

    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    calibration = calibrated(project, cascade="none")
    accept_everything(calibration)
    first = run(project, audit_share=0.0)
    out = io.StringIO()
    for chunk in export_dataset(project=project, fmt="csv"):
        out.write(chunk)
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    by_source: dict[str, int] = {}
    for r in rows:
        by_source[r["source"]] = by_source.get(r["source"], 0) + 1
    assert by_source == {"human": 16, "auto:model": 44}
    auto_row = next(r for r in rows if r["source"] == "auto:model")
    assert auto_row["prompt_hash"] == first.prompt_hash and auto_row["adapter_set"] == first.adapter_set_hash
    assert 0 < float(auto_row["confidence"]) <= 1 and auto_row["audit"] == ""
    lines = "".join(export_dataset(project=project, fmt="jsonl")).splitlines()
    assert len(lines) == 60 and json.loads(lines[0])["item_id"]
    import pyarrow.parquet as pq

    path = tmp_path / "out.parquet"
    with path.open("wb") as f:
        for part in export_dataset_parquet(project=project):
            f.write(part)
    table = pq.read_table(path)
    assert table.num_rows == 60 and "source" in table.column_names


@pytest.mark.parametrize("cascade", ["permuted", "second_model"])
def test_each_cascade_tier_is_calibrated_and_tried(
    cascade: str, shared_data: Path, tiny_llama_dir: Path, tmp_path: Path
) -> None:
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    second = str(tiny_llama_dir) if cascade == "second_model" else ""
    row = calibrated(project, cascade=cascade, second_model_dir=second)
    assert set(row.thresholds) == {"model", cascade} and len(row.thresholds[cascade]) == 6
    assert ("second_model" in row.tier_calibrators) == (cascade == "second_model")
    done = run(project)
    tiers = {t["tier"]: t for t in auto_sel.run_progress(run=done).tiers}
    assert tiers["model"]["tried"] == 44 and tiers[cascade]["tried"] == tiers["model"]["escalated"] == 44
    assert set(AutoLabel.objects.filter(run=done).values_list("tier", flat=True)) == {cascade}
