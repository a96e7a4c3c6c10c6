"""bench/batch_invariance.py (issue 35, point 6): the comparison counts bit-identical items exactly, the
shuffled pass scores every item once in calls of many sizes, and on CPU the whole run (a random model of the
tiny shape, two random adapters, the hf engine) writes its report. The vLLM runs are the GPU sitting's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import batch_invariance as bi  # noqa: E402
import llm8b_bench as lb  # noqa: E402


def test_identical_passes_count_every_item_and_one_changed_bit_counts_one() -> None:
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(4), size=(2, 10)).astype(np.float32)  # K=2 adapters, 10 items, 4 labels
    mass = rng.random((2, 10)).astype(np.float32)
    same = bi.compare({"p": p, "mass": mass}, {"p": p.copy(), "mass": mass.copy()})
    assert same["bit_identical_items"] == 10 and same["bit_identical_share"] == 1.0 and same["max_abs_dp"] == 0.0
    q = p.copy()
    q[1, 3, 0] = np.nextafter(q[1, 3, 0], np.float32(1))  # one ulp, one adapter, one item
    moved = bi.compare({"p": p, "mass": mass}, {"p": q, "mass": mass})
    assert moved["bit_identical_items"] == 9 and moved["argmax_agreement"] == 1.0 and 0 < moved["max_abs_dp"] < 1e-6
    other_mass = mass.copy()
    other_mass[0, 7] += 1e-3
    assert bi.compare({"p": p, "mass": mass}, {"p": p, "mass": other_mass})["bit_identical_items"] == 9
    with pytest.raises(ValueError, match="different shapes"):
        bi.compare({"p": p, "mass": mass}, {"p": p[:, :5], "mass": mass[:, :5]})


def test_the_shuffled_pass_scores_each_item_once_in_calls_of_many_sizes() -> None:
    order, calls = bi.shuffled_calls(1000, seed=3)
    assert sorted(np.concatenate(calls).tolist()) == list(range(1000))
    assert [len(c) for c in calls[: len(bi.CHUNKS)]] == list(bi.CHUNKS)
    assert not np.array_equal(order, np.arange(1000))


def test_options_of_vllm_are_refused_for_hf(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="vllm engine's"):
        bi.main(["run", "--engine", "hf", "--batch-invariant", "--model", "x", "--adapters", "a", "--out", "o.json"])


@pytest.mark.slow
def test_a_cpu_run_with_the_hf_engine_reports_both_comparisons(smollm2_dir: Path, tmp_path: Path) -> None:
    model, adapters, out = tmp_path / "model", tmp_path / "adapters", tmp_path / "hf.json"
    assert lb.main(["build", "--out", str(model), "--config", "tiny", "--tokenizer", str(smollm2_dir)]) == 0
    assert lb.main(["adapters", "--model", str(model), "--out", str(adapters), "--k", "2"]) == 0
    argv = ["run", "--engine", "hf", "--model", str(model), "--adapters", str(adapters / "a0"), str(adapters / "a1")]
    assert bi.main([*argv, "--n", "20", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["n"] == 20 and report["adapters"] == 2 and report["calls_shuffled"] == 3  # 1 + 7 + 12
    assert report["prefix_tokens"] > 500  # the news prompt's shared prefix, as the app's prompts have
    for pair in ("whole_vs_shuffled", "first_vs_whole"):
        assert report[pair]["items"] == 20 and 0.0 <= report[pair]["bit_identical_share"] <= 1.0
    assert report["whole_vs_shuffled"]["argmax_agreement"] > 0.9  # float32 on a CPU: equal or near
    assert "| hf |" in bi.table([{**report, "name": "hf"}])
