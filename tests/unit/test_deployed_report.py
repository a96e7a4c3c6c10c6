"""bench/deployed_report.py: the tables of a deployed run (issue 35) from the files bench/deployed_loop.py
writes: GPU busy share inside a round's machine windows, peak GPU memory per process, the engine-start
lines of the gpu workers' logs, and the deployed curve's area against the simulation's seeds. The real
inputs came from the H200 (bench/raw/*/deployed-*.tgz); these are small hand-made ones whose
answers are known."""

from __future__ import annotations

import gzip
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import deployed_report as dr  # noqa: E402


def test_busy_share_counts_only_the_samples_inside_the_machine_windows() -> None:
    samples = np.array([[10.0, 100.0, 1.0], [11.0, 50.0, 1.0], [15.0, 0.0, 1.0], [20.0, 30.0, 1.0]])
    assert dr.busy_share(samples, [(10.0, 11.0), (19.0, 21.0)]) == pytest.approx(60.0)  # 100, 50, 30
    assert dr.busy_share(samples, [(12.0, 14.0)]) is None  # no sample inside: unknown, not 0 %
    assert dr.busy_share(np.zeros((0, 3)), [(0.0, 1.0)]) is None


def test_gpu_samples_read_nvidia_smi_csv_and_skip_what_is_not_a_sample(tmp_path: Path) -> None:
    path = tmp_path / "gpu.csv"
    path.write_text("2026/12/03 18:12:00.500, 37, 1024\n[Not Supported]\n2026/12/03 18:12:01.000, 40, 2048\n")
    samples = dr.gpu_samples(path)
    assert samples.shape == (2, 3) and samples[1, 0] - samples[0, 0] == pytest.approx(0.5)
    assert list(samples[:, 1]) == [37.0, 40.0]


def test_peak_memory_is_the_largest_sample_per_process_with_its_name(tmp_path: Path) -> None:
    path = tmp_path / "gpu-apps.csv"
    path.write_text("t, 7, 100\nt, 7, 4000\nt, 7, 3000\nt, 9, 50\nt, bad, x\n")
    peaks = dr.peak_memory(path, {"7": "gpu-worker-0 (child, depth 1)"})
    assert peaks == [("9", "?", 50.0), ("7", "gpu-worker-0 (child, depth 1)", 4000.0)]


def test_engine_starts_and_first_tasks_come_from_the_worker_logs(tmp_path: Path) -> None:
    (tmp_path / "gpu-worker-1.log").write_text(
        "[2026-12-03 18:12:37,903: INFO/ForkPoolWorker-1] vllm engine started in 88.8 s (2.5 s waiting for the"
        " GPU's start lock; in-process core: True)\n"
        "[2026-12-03 18:12:40,000: INFO/ForkPoolWorker-1] Task annotate.gpu.score_shard[ab-c] succeeded in 1s\n"
        "[2026-12-03 18:12:50,000: INFO/ForkPoolWorker-1] Task annotate.gpu.score_shard[de-f] succeeded in 1s\n"
    )
    (starts,) = dr.engine_starts(tmp_path)
    assert (starts["worker"], starts["start_s"], starts["lock_wait_s"], starts["in_process"]) == (
        "gpu-worker-1",
        88.8,
        2.5,
        "True",
    )
    firsts = dr.first_tasks(tmp_path)["gpu-worker-1"]
    assert firsts["annotate.gpu.score_shard"] - starts["at"] == pytest.approx(2.097)  # the first one only


def test_a_restarted_worker_is_timed_from_its_own_start_not_from_the_first_engine(tmp_path: Path) -> None:
    (tmp_path / "gpu-worker-0.log").write_text(
        "[2026-12-03 18:00:00,000: INFO/ForkPoolWorker-1] vllm engine started in 150.0 s (0.0 s waiting for the"
        " GPU's start lock; in-process core: True)\n"
        "[2026-12-03 18:00:05,000: INFO/ForkPoolWorker-1] Task annotate.gpu.score_shard[a] succeeded in 1s\n"
        "[2026-12-03 18:10:40,000: INFO/ForkPoolWorker-1] vllm engine started in 35.5 s (1.5 s waiting for the"
        " GPU's start lock; in-process core: True)\n"
        "[2026-12-03 18:10:44,500: INFO/ForkPoolWorker-1] Task annotate.gpu.score_shard[b] succeeded in 1s\n"
    )
    since = dr.log_time("2026-12-03 18:10:00", "0")
    warm = dr.restart_times(tmp_path, "gpu-worker-0", since)
    assert warm == {"engine_ready_s": 40.0, "engine_start_s": 35.5, "lock_wait_s": 1.5, "first_task_s": 44.5}
    assert dr.restart_times(tmp_path, "gpu-worker-9", since) == {}


def _record(labels: int, accuracy: float) -> dict[str, object]:
    return {"labels_total": labels, "metrics": {"accuracy": accuracy}}


def test_the_deployed_area_is_judged_against_the_simulation_seeds_on_a_common_range(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    rows = [_record(50, 0.5), _record(100, 0.8), _record(200, 0.9)]
    (out / "records-trec.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    sim = tmp_path / "sim-records.jsonl.gz"
    with gzip.open(sim, "wt") as f:
        for seed, acc in ((0, 0.85), (1, 0.95)):  # flat curves from 100 labels: areas 85 and 95
            for labels in (100, 150, 200):
                f.write(
                    json.dumps(
                        {
                            "data": "trec",
                            "strategy": "active",
                            "seed": seed,
                            "commit": "abc1234",
                            "labels": labels,
                            "accuracy": acc,
                        }
                    )
                    + "\n"
                )
    table = dr.curve_table(out, [str(sim)], "active")
    # common range 100-200 (the simulation starts at 100): the deployed area is the mean of 80 → 90
    assert "| trec | 85.0 (100–200) |" in table and "| yes |" in table
    with gzip.open(sim, "wt") as f:
        for labels in (100, 200):
            f.write(
                json.dumps({"data": "trec", "strategy": "active", "seed": 0, "labels": labels, "accuracy": 0.99}) + "\n"
            )
    assert "**no**" in dr.curve_table(out, [str(sim)], "active")


def test_an_engine_start_line_with_the_import_outside_the_lock(tmp_path: Path) -> None:
    """Since session 19 the line also says how long vLLM's import took before the lock was taken."""
    (tmp_path / "gpu-worker-0.log").write_text(
        "[2026-12-05 10:00:00,000: INFO/ForkPoolWorker-1] vllm engine started in 36.1 s (0.2 s waiting for the"
        " GPU's start lock; in-process core: True; 21.6 s importing vLLM before the lock)\n"
    )
    (start,) = dr.engine_starts(tmp_path)
    assert (start["start_s"], start["lock_wait_s"], start["in_process"], start["import_s"]) == (36.1, 0.2, "True", 21.6)


def test_an_engine_start_that_took_no_turn(tmp_path: Path) -> None:
    """parallel_start (session 28): the line says whether the start took its turn; older lines read as "its turn"."""
    (tmp_path / "gpu-worker-0.log").write_text(
        "[2026-12-05 10:00:00,000: INFO/ForkPoolWorker-1] vllm engine started in 36.1 s (0.2 s waiting for the"
        " GPU's start lock; in-process core: True; 21.6 s importing vLLM before the lock)\n"
    )
    (tmp_path / "gpu-worker-1.log").write_text(
        "[2026-12-05 10:00:05,000: INFO/ForkPoolWorker-1] vllm engine started in 30.0 s (0.1 s waiting for the"
        " GPU's start lock; in-process core: True; 11.0 s importing vLLM before the lock; no turn: started side by"
        " side, fixed KV cache)\n"
    )
    first, second = dr.engine_starts(tmp_path)
    assert first["turn"] == "its turn" and (second["turn"], second["start_s"], second["import_s"]) == (
        "no turn",
        30.0,
        11.0,
    )


def test_the_wide_label_checks_come_from_the_worker_logs_in_both_forms(tmp_path: Path) -> None:
    """Session 31's check line gave the max |dp| only; later ones give mean / max: both are read, with the verdict."""
    (tmp_path / "gpu-worker-0.log").write_text(
        "[2026-12-07 15:28:34,525: ERROR/ForkPoolWorker-1] label_logprob_width 256: 16 items x 4 adapters scored in"
        " one request and in chunks of 128: max |dp| (distribution and label mass) 1.29e-02, they differ: asking in"
        " chunks from now on\n"
    )
    (tmp_path / "gpu-worker-1.log").write_text(
        "[2026-12-08 10:00:00,000: INFO/ForkPoolWorker-1] label_logprob_width 256: 16 items x 4 adapters scored in"
        " one request and in chunks of 128: mean / max |dp| 0.0021 / 0.0450, mean |dmass| 0.0010, argmax agreement"
        " 0.984: one request per item and adapter from now on\n"
    )
    old, new = dr.wide_checks(tmp_path)
    assert (old["items"], old["mean_dp"], old["max_dp"], old["kept"]) == (16, None, 0.0129, False)
    assert (new["worker"], new["mean_dp"], new["max_dp"], new["kept"]) == ("gpu-worker-1", 0.0021, 0.045, True)


def test_the_autolabel_table_reads_the_bulk_job_steps(tmp_path: Path) -> None:
    """A run of 1,000 items at K=2 done in 10 s with a worker killed at 4 s; the ETA shown at 10 %
    said 12 s left where 9 were (+33 %); the GPU 80 % busy inside the run, 20 % outside it; 870 of the
    900 accepted items right by the oracle; the prompt change's re-score of 999 items in 4.5 s, the GPU
    50 % busy in its window."""
    t0 = 1_800_000_000.0
    shards = [{"shard": 0, "status": "done", "attempts": 2}, {"shard": 1, "status": "done", "attempts": 1}]
    steps = [
        {"step": "project", "commit": "c", "items": 1000, "k": 2, "pool": "trec's train split repeated"},
        {"step": "calibration", "commit": "c"},
        {
            "step": "run",
            "commit": "c",
            "t_request": t0,
            "t_running": 1.0,
            "t_end": 10.0,
            "status": "done",
            "n_items": 1000,
            "k": 2,
            "items_per_s": 100.0,
            "requests_per_s": 200.0,
            "kill": True,
            "killed": {"worker": "gpu-worker-1", "shard": 0, "at": t0 + 4.0},
            "eta": {
                "10%": {"predicted_left": 12.0, "actual_left": 9.0, "error": 0.333},
                "25%": None,
                "50%": {"predicted_left": 5.0, "actual_left": 5.0, "error": 0.0},
            },
        },
        {
            "step": "checks",
            "commit": "c",
            "n_lost": 0,
            "duplicate_rows": 0,
            "progress_overcount": 0,
            "shards": shards,
            "decisions": {"accepted": 900, "escalated": 100},
            "audit_pending": 18,
            "oracle_correct": 870,
            "oracle_checked": 900,
            "tiers": [{"tier": "model", "tried": 1000, "accepted": 900, "escalated": 100}],
            "dead_letters": {
                "n": 1,
                "by_reason": {"low_mass": 1},
                "first": [{"item": "al-7", "reason": "low_mass", "detail": "label mass 0.010"}],
            },
            "budget_vs_actual": {"estimate": {"workers": 2, "wall_s": 8.0, "n": 1000}, "actual_wall": 10.0},
        },
        {"step": "rerun", "commit": "c", "status": "done", "n_items": 0},
        {
            "step": "prompt_change",
            "commit": "c",
            "t_request": t0 + 15,
            "t_running": 0.5,
            "t_end": 4.5,
            "status": "done",
            "n_items": 999,
            "items_per_s": 249.75,
            "requests_per_s": 499.5,
            "eta": {"10%": {"predicted_left": 4.0, "actual_left": 3.6, "error": 0.111}},
        },
        {"step": "prompt_change_checks", "commit": "c", "rows_written": 999, "expected": {"to_score": 999}},
    ]
    (tmp_path / "autolabel.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    stamp = "%Y/%m/%d %H:%M:%S.%f"
    samples = [(t0 - 5, 20), (t0 + 2, 80), (t0 + 6, 80), (t0 + 17, 60), (t0 + 18, 40), (t0 + 22, 20)]
    (tmp_path / "gpu-autolabel.csv").write_text(
        "".join(f"{datetime.fromtimestamp(t, UTC).strftime(stamp)[:-3]}, {u}, 5000\n" for t, u in samples)
    )
    table = dr.autolabel_table(tmp_path)
    cells = [line[2:-2].split(" | ", 1) for line in table.splitlines() if line.startswith("| ") and line != "| | |"]
    rows = dict((name, value) for name, value in cells)
    assert rows["items scored / K"] == "1000 / 2" and rows["items/s"] == "**100.0**"
    assert rows["requests/s (items × K)"] == "200"
    assert rows["GPU busy % (run) / peak memory MiB"] == "80 / 5000"
    assert rows["ETA error at 10% (predicted vs actual left)"] == "+33 % (12 s vs 9 s)"
    assert rows["ETA error at 25% (predicted vs actual left)"] == "–"
    assert rows["budget estimate vs actual wall"].startswith("8.0 s (2 workers, 1000 items) vs 10.0 s")
    assert rows["kill"].startswith("gpu-worker-1 (shard 0) at 4.0 s; run done, shard 0: 2 claims")
    assert rows["lost / written twice"] == "0 / 0"
    assert rows["dead letters"] == "1 {'low_mass': 1}" and "al-7: low_mass: label mass 0.010" in table
    assert rows["re-run"] == "done, 0 items"
    assert rows["accepted items right by the oracle labels"] == "870/900 (96.7%)"
    # the prompt change's re-score of the whole pool: its own window (t0 + 15.5 .. t0 + 19.5) of GPU samples
    rescore = rows["prompt change's full re-score: wall s / items/s / requests/s / GPU busy %"]
    assert rescore == "4.5 / **249.8** / 500 / 50"
    assert rows["prompt change's re-score: ETA error at 10%"] == "+11 % (4 s vs 4 s)"
    assert rows["prompt change: rows written / expected"] == "999 / 999"
    assert dr.autolabel_table(tmp_path / "none") == ""
