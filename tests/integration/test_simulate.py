"""The simulation harness end to end on CPU, tiny: a 2-layer random llama, 60 pool rows and 20 test
rows of three labels, every strategy × 2 seeds × 2 rounds (a seed set of 5, then a batch of 10),
plus the full-data run. Checks
the records and the plot, not the numbers (a random tiny model learns nothing in 2 steps)."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest
from django.core.management import call_command

from acquisition.strategies import strategy as registered
from predictor.blend import GRID

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

TOPICS = {
    "sport": ["The {} won the match in extra time", "A late goal gave the {} the cup"],
    "weather": ["Heavy rain hit {} this morning", "{} expects snow and strong wind tonight"],
    "food": ["The {} bakery sells fresh bread", "Try the soup at the {} diner"],
}
PLACES = ["Oslo", "Lima", "Cork", "Kyiv", "Pune", "Bern", "Oran", "Riga", "Hue", "Nice", "Graz", "Baku", "Ulm", "Vigo"]
ROUND_KEYS = {"data", "strategy", "seed", "round", "labels", "batch", "accuracy", "macro_f1", "ece", "seconds"}


def write_data(folder: Path) -> None:
    """60 train rows (10 places) and 20 test rows (the other places): every label on both sides."""
    rows = [(t.format(p), label) for p in PLACES for label, ts in TOPICS.items() for t in ts][:80]
    folder.mkdir()
    for name, part in (("train.csv", rows[:60]), ("test.csv", rows[60:])):
        with (folder / name).open("w", newline="") as f:
            csv.writer(f).writerows([("text", "label"), *part])


def test_simulate_records_and_plot(tiny_llama_dir: Path, tmp_path: Path) -> None:
    from annotate.simulation.harness import ARMS, round_strategy  # every production strategy and random-coldstart

    write_data(tmp_path / "tiny")
    out, plots = tmp_path / "out", tmp_path / "plots"
    faiss_before = "faiss" in sys.modules
    call_command(
        "simulate",
        "--data", str(tmp_path / "tiny"),
        "--strategy", "all",
        "--seeds", "2",
        "--rounds", "2",
        "--batch", "10",
        "--test-sample", "15",  # a fixed 15 of the 20 test rows, the same for every job
        "--seed-labels", "5",
        "--k", "1",
        "--model", str(tiny_llama_dir),
        "--mass-threshold", "0",  # an untrained random model puts almost no mass on the labels
        "--full-data",
        "--loop-options", json.dumps({"max_context": 128, "train": {"max_steps": 2, "batch_size": 4}}),
        "--out", str(out),
        "--plots-dir", str(plots),
        "--baselines", str(tmp_path / "none.md"),
    )  # fmt: skip
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    rounds = [r for r in records if r["strategy"] != "full-data"]
    assert sorted((r["strategy"], r["seed"], r["round"]) for r in rounds) == sorted(
        (s, seed, n) for s in ARMS for seed in (0, 1) for n in (1, 2)
    )
    for r in rounds:
        assert set(r) >= ROUND_KEYS, ROUND_KEYS - set(r)
        assert r["labels"] == {1: 5, 2: 15}[r["round"]] and r["batch"] == {1: 5, 2: 10}[r["round"]]
        assert r["test_n"] == 15 == r["test_sample"]
        assert 0.0 <= r["accuracy"] <= 1.0 and {"training", "evaluating", "labeling"} <= set(r["seconds"])
        assert all(i.startswith("train-") for i in r["batch_ids"])  # test items are never selected
        # The resolved configuration, defaults included, next to the overrides it came from.
        assert r["config"]["train"]["max_steps"] == 2 and r["config"]["train"]["batch_size"] == 4
        assert {"top_layers", "min_steps", "packed", "lr"} <= set(r["config"]["train"]) and r["config"]["k"] == 1
        assert r["config"]["selection"]["random_share"] == 0.15  # the project default
        assert r["config"]["selection"]["committee"] == "members"  # (the report names any other)
    for strategy in ARMS:
        for seed in (0, 1):
            first, second = (
                next(r for r in rounds if (r["strategy"], r["seed"], r["round"]) == (strategy, seed, n)) for n in (1, 2)
            )
            assert not set(first["batch_ids"]) & set(second["batch_ids"])
            assert first["sources"] == {"cold": 5}  # the round service's cold start, whatever the strategy
            # Round 2 is the strategy's own pick, by the round service: scored only when it reads scores.
            asked = round_strategy(strategy, number=2, cold_start_batches=1)
            assert (second["items_scored"] > 0) == registered(asked).needs_scores, second
            assert set(second["sources"]) <= ({"random"} if strategy == "random" else {"active", "random"})
            # The stopping signal from round 2 on; the portfolio's split where it chose the batch.
            assert first["stop_kappa"] is None and second["stop_kappa"] is not None, second
            assert -1.0 <= second["stop_kappa"] <= 1.0
            # The predictor: the adapters alone in the seed round (nothing held out yet); from round 2
            # on blended with the proxy at the weight the batch's held-out labels fit (10 of them).
            assert first["blend"]["weight"] == 1.0 and first["blend"]["heldout_n"] == 0, first["blend"]
            assert first["accuracy"] == first["blend"]["accuracy_llm"]
            assert second["blend"]["heldout_n"] == 10 and second["blend"]["weight"] in GRID, second["blend"]
            for part in ("accuracy_llm", "accuracy_proxy"):
                assert 0.0 <= second["blend"][part] <= 1.0
            if second["blend"]["weight"] in (0.0, 1.0):
                assert (
                    second["accuracy"]
                    == second["blend"]["accuracy_proxy" if second["blend"]["weight"] == 0.0 else "accuracy_llm"]
                )
            if strategy == "portfolio":
                assert second["selection"]["reason"].startswith("gathering evidence"), second["selection"]
                assert set(second["selection"]["shares"]) == {"margin", "softrank", "random"}
            else:
                assert second["selection"] is None
    # The default cold start: every strategy of a seed shares one typical seed set; random draws its own.
    first_rounds = [r for r in rounds if r["round"] == 1]
    assert all(r["cold_mode"] == ("random" if r["strategy"] == "random" else "typical") for r in rounds)
    paired = {r["seed"]: r["batch_ids"] for r in first_rounds if r["strategy"] == "active"}
    assert all(r["batch_ids"] == paired[r["seed"]] for r in first_rounds if r["strategy"] != "random")
    uniform = {r["seed"]: r["batch_ids"] for r in first_rounds if r["strategy"] == "random"}
    assert all(uniform[seed] != paired[seed] for seed in paired)
    (full,) = [r for r in records if r["strategy"] == "full-data"]
    assert full["labels"] == 60 and full["test_n"] == 15
    assert full["config"]["train"]["max_steps"] == full["train_steps"]  # what the full-data run trained with
    for png in (out / "sim-tiny.png", plots / "sim-tiny.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (out / "report.md").read_text()
    named = [s if s == "random" else f"{s}+typical" for s in ARMS]  # a typical start is its own curve
    assert all(f"| tiny | {name} | 2 |" in report for name in named), report
    assert faiss_before or "faiss" not in sys.modules  # the GPU machine has no faiss
    # The blend's per-weight counts replay the recorded predictor exactly (bench/blend_rules.py).
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import blend_rules

    by_job = blend_rules.jobs(records)
    assert len(by_job) == 2 * len(ARMS)
    for job_rounds in by_job.values():
        default = blend_rules.replay(job_rounds, blend_rules.RULES[blend_rules.DEFAULT])
        alone = blend_rules.replay(job_rounds, blend_rules.RULES["adapters alone (w = 1)"])
        for r, (_, w, acc), (_, _, acc_llm) in zip(job_rounds, default, alone, strict=True):
            assert w == r["blend"]["weight"] and acc == pytest.approx(100 * r["accuracy"])
            assert acc_llm == pytest.approx(100 * r["blend"]["accuracy_llm"])
    n_rounds = 2 * 2 * len(ARMS)
    text = blend_rules.tables(records)
    assert f"of their {n_rounds} rounds" in text and f"the default's in {n_rounds} (" in text


def test_a_negative_sample_size_is_a_clear_error_before_any_job(tiny_llama_dir: Path, tmp_path: Path) -> None:
    from django.core.management.base import CommandError

    write_data(tmp_path / "tiny")
    out = tmp_path / "out"
    with pytest.raises(CommandError, match="--test-sample"):
        call_command("simulate", "--data", str(tmp_path / "tiny"), "--model", str(tiny_llama_dir),
                     "--test-sample", "-1", "--out", str(out), "--work", str(tmp_path / "work"))  # fmt: skip
    assert not (out / "records.jsonl").exists() and not (tmp_path / "work").exists()


def test_first_seed_runs_later_seeds_and_bad_seed_counts_are_refused(tiny_llama_dir: Path, tmp_path: Path) -> None:
    from django.core.management.base import CommandError

    from annotate.management.commands.simulate import Command

    opts = {"strategy": "active,random", "full_data": False, "seeds": 2, "first_seed": 3}
    jobs = Command()._jobs(opts)
    assert [(j.strategy, j.seed) for j in jobs] == [("active", 3), ("random", 3), ("active", 4), ("random", 4)]
    write_data(tmp_path / "tiny")
    for flag, value in (("--seeds", "0"), ("--first-seed", "-1")):
        with pytest.raises(CommandError, match="--first-seed"):
            call_command("simulate", "--data", str(tmp_path / "tiny"), "--model", str(tiny_llama_dir), flag, value,
                         "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work"))  # fmt: skip
    assert not (tmp_path / "out").exists() and not (tmp_path / "work").exists()


def test_the_default_shape_is_a_new_projects() -> None:
    """Without --batch / --seed-labels a simulation runs a new project's shape: B = Project.batch_size
    and a seed set of cold_start_batches such batches (50 and 100), the shape the GPU results report;
    the seed set follows a --batch given alone."""
    from annotate.management.commands.simulate import Command, seed_labels
    from annotate.models import Project

    parser = Command().create_parser("manage.py", "simulate")
    opts = vars(parser.parse_args([]))
    project = Project()
    assert opts["batch"] == project.batch_size == 50
    assert seed_labels(opts) == project.batch_size * project.cold_start_batches == 100
    assert seed_labels(vars(parser.parse_args(["--batch", "25"]))) == 50  # the cold start follows B
    assert seed_labels(vars(parser.parse_args(["--batch", "25", "--seed-labels", "300"]))) == 300


def test_a_pool_labelled_to_its_end_stops_the_job_cleanly(tiny_llama_dir: Path, tmp_path: Path) -> None:
    """Issue 33: a 60-item pool, a seed set of 20 and batches of 20 under a round budget of 6. Rounds 1-3
    label the pool; round 4 finds nothing left, trains the final model and is recorded; the job stops
    there and the command returns (before, round 4 failed and the command ended "1 jobs failed")."""
    write_data(tmp_path / "tiny")
    out = tmp_path / "out"
    call_command(
        "simulate",
        "--data", str(tmp_path / "tiny"),
        "--strategy", "active",
        "--seeds", "1",
        "--rounds", "6",
        "--batch", "20",
        "--seed-labels", "20",
        "--k", "1",
        "--model", str(tiny_llama_dir),
        "--mass-threshold", "0",
        "--loop-options", json.dumps({"max_context": 128, "train": {"max_steps": 2, "batch_size": 4}}),
        "--out", str(out),
        "--no-report",
    )  # fmt: skip
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert [(r["round"], r["labels"], r["batch"], r.get("pool_exhausted")) for r in records] == [
        (1, 20, 20, False),
        (2, 40, 20, False),
        (3, 60, 20, False),
        (4, 60, 0, True),
    ]


def test_cold_rounds_give_the_seed_set_a_projects_shape(tiny_llama_dir: Path, tmp_path: Path) -> None:
    """--cold-rounds 2: the seed set of 10 arrives as a project's does, in two cold-start rounds of 5, each
    trained (session 19's deployed run against the simulation: one seed round of 100 against the app's
    two of 50 explained most of the gap at 100 labels); B from round 3 on. A count that does not divide the
    seed set is refused before any job."""
    from django.core.management.base import CommandError

    write_data(tmp_path / "tiny")
    out = tmp_path / "out"
    options = json.dumps({"max_context": 128, "train": {"max_steps": 2, "batch_size": 4}})
    common = ["--data", str(tmp_path / "tiny"), "--model", str(tiny_llama_dir), "--k", "1", "--seeds", "1",
              "--seed-labels", "10", "--batch", "10", "--mass-threshold", "0", "--no-report",
              "--loop-options", options]  # fmt: skip
    with pytest.raises(CommandError, match="--cold-rounds"):
        call_command("simulate", *common, "--cold-rounds", "3", "--out", str(tmp_path / "refused"))
    assert not (tmp_path / "refused" / "records.jsonl").exists()
    call_command("simulate", *common, "--strategy", "active", "--rounds", "3", "--cold-rounds", "2", "--out", str(out))
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert [(r["round"], r["labels"], r["batch"], r["cold_rounds"]) for r in records] == [
        (1, 5, 5, 2),
        (2, 10, 5, 2),
        (3, 20, 10, 2),
    ]
    assert all(r["accuracy"] is not None for r in records)  # every round trained and was evaluated


def test_autolabel_targets_measure_what_the_bulk_job_accepts(tiny_llama_dir: Path, tmp_path: Path) -> None:
    """Issue 31: after the last round, a calibration split of 20 drawn from the pool and labelled by the
    simulated annotator, then per target a calibration and a bulk run over the rest of the pool (60 pool
    items - 5 trained on - 20 in the split = 35), one record each in autolabel.jsonl (records.jsonl keeps
    the rounds only). --deadline (a sitting's time box) passed after round 1: no round 2 of the 3 asked,
    and the auto-labelling still runs, on round 1's adapters. 20 calibration items are too few for any
    class's bound: nothing is accepted, and each class says how many more it needs."""
    write_data(tmp_path / "tiny")
    out = tmp_path / "out"
    call_command(
        "simulate",
        "--data", str(tmp_path / "tiny"),
        "--strategy", "active",
        "--seeds", "1",
        "--rounds", "3",
        "--labels", "25",
        "--deadline", "0.001",
        "--batch", "10",
        "--seed-labels", "5",
        "--k", "2",
        "--model", str(tiny_llama_dir),
        "--mass-threshold", "0",
        "--loop-options", json.dumps({"max_context": 128, "train": {"max_steps": 2, "batch_size": 4}}),
        "--autolabel-targets", "0.90,0.95",
        "--autolabel-calibration", "20",
        "--out", str(out),
        "--no-report",
    )  # fmt: skip
    rounds = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rounds] == [1]
    found = [json.loads(line) for line in (out / "autolabel.jsonl").read_text().splitlines()]
    assert [r["target"] for r in found] == [0.90, 0.95]
    for r in found:
        assert (r["kind"], r["data"], r["strategy"], r["round"], r["labels"]) == ("autolabel", "tiny", "active", 1, 5)
        assert (r["labels_asked"], r["deadline_s"]) == (25, 0.001)
        assert r["calibration_items"] == r["n_calibration"] == 20 and r["n_eval_items"] == 20  # the test split
        assert r["run_status"] == "done" and r["n_items"] == r["decided"] == 35 and not r["dead_letters"]
        assert r["accepted"] == 0 and r["coverage"] == 0.0 and r["precision"] is None
        assert [c["label"] for c in r["per_class"]] == ["food", "sport", "weather"]
        assert all(c["threshold"] is None and c["needed"] > 0 and c["accepted"] == 0 for c in r["per_class"])
        assert sum(c["calibration_predicted"] for c in r["per_class"]) == 20
        assert r["seconds"]["calibrate"] > 0 and r["seconds"]["run"] > 0 and r["commit"] == rounds[0]["commit"]
