"""bench/engine_parity.py: the comparison of two engines' label distributions (agreement, |Δp|, near
ties), the bounds and the exit code a GPU sitting relies on, the variant and set syntax, and, on the
tiny model, a whole compare run with the hf engine on both sides. vLLM cannot run here: its worker
branch runs against a fake engine (start figures, adapter ids); the real vLLM side ran on the H200
(bench/gpu_parity.sh, bench/RESULTS.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import engine_parity as ep  # noqa: E402


def write_scores(work: Path, variant: str, set_name: str, p: np.ndarray, y: np.ndarray | None = None) -> None:
    meta = {"variant": variant, "set": {"name": set_name}, "codes": ["A", "B", "C"], "n_items": p.shape[1]}
    path = ep.score_path(work, variant, set_name)
    path.parent.mkdir(parents=True, exist_ok=True)
    y = np.full(p.shape[1], -1) if y is None else y
    np.savez(path, p=p, mass=np.ones(p.shape[:2]) * 0.9, y=y, meta=np.array(json.dumps(meta)))


def dirichlet(seed: int, k: int = 2, n: int = 200, c: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).dirichlet(np.full(c, 0.5), size=(k, n))


# -- variants and sets --------------------------------------------------------------------------


def test_variants_are_the_app_engines_with_one_changed_option_each() -> None:
    assert ep.parse_variant("hf") == ep.Variant("hf", "hf", ())
    assert dict(ep.parse_variant("hf-fp32-full").options) == {"dtype": "float32", "prefix_cache": False}
    assert dict(ep.parse_variant("hf-bf16-unpacked").options) == {"dtype": "bfloat16", "packed_scoring": False}
    assert (
        dict(ep.parse_variant("vllm-fp16").options) == dict(ep.parse_variant("hf-fp16").options) == {"dtype": "float16"}
    )
    assert dict(ep.parse_variant("vllm-wide").options) == {"label_logprob_width": 256}  # one request, every label
    warm = ep.parse_variant("vllm@warm")
    assert (warm.kind, warm.options, warm.name) == ("vllm", (), "vllm@warm")
    for bad in ("tgi", "hf-eager", "vllm-full", "vllm-fp32", "hf-fp32-bf16", "vllm@two words", "hf-", "hf-wide"):
        with pytest.raises(ep.ParityInputError):
            ep.parse_variant(bad)


def test_vllm_host_options_say_where_the_engine_runs_never_what_it_computes() -> None:
    assert ep.vllm_host_options("") == {}
    assert ep.vllm_host_options('{"gpu_memory_utilization": 0.3, "cudagraph_mode": "PIECEWISE"}') == {
        "gpu_memory_utilization": 0.3,
        "cudagraph_mode": "PIECEWISE",
    }
    with pytest.raises(ep.ParityInputError, match=r"takes only .* not \['dtype'\]"):
        ep.vllm_host_options('{"dtype": "float32"}')  # a variant's business (hf-fp32; vLLM refuses float32 with LoRA)
    for bad in ("{gpu", "[0.3]"):
        with pytest.raises(ep.ParityInputError, match="--vllm-options"):
            ep.vllm_host_options(bad)


def test_sets_name_a_prompt_and_adapter_dirs() -> None:
    assert ep.parse_set("trained=data:/a/prod_0,/a/prod_1") == ep.SetSpec("trained", "data", ("/a/prod_0", "/a/prod_1"))
    assert ep.parse_set("base=news:") == ep.SetSpec("base", "news", ())
    for bad in ("trained", "x=tweets:/a", "=data:/a", "a b=data:/a"):
        with pytest.raises(ep.ParityInputError):
            ep.parse_set(bad)


def test_adapter_ids_are_unique_across_the_sets_of_one_process() -> None:
    """vLLM caches LoRA weights and prefixes by id: a repeated id would score one set's adapters
    with another's weights."""
    sets = [ep.parse_set("a=data:/x/0,/x/1,/x/2,/x/3"), ep.parse_set("b=news:/y/0,/y/1"), ep.parse_set("c=data:")]
    refs = [ref for index, spec in enumerate(sets) for ref in ep.adapter_refs(index, spec)]
    assert len(refs) == 6
    assert len({r.int_id for r in refs}) == 6 and len({r.name for r in refs}) == 6
    assert all(r.int_id > 0 for r in refs)


# -- metrics, bounds, exit codes ----------------------------------------------------------------


def test_agreement_dp_and_near_ties_on_known_distributions() -> None:
    ref = np.array(
        [
            [[0.70, 0.30], [0.52, 0.48], [0.10, 0.90], [0.50, 0.50]],
            [[0.60, 0.40], [0.20, 0.80], [0.95, 0.05], [0.30, 0.70]],
        ]
    )
    cand = ref.copy()
    cand[0, 1] = [0.48, 0.52]  # a near tie (margin 0.04) flips: |Δp| 0.04
    cand[1, 2] = [0.90, 0.10]  # a confident item moves but keeps its argmax: |Δp| 0.05
    mass = np.ones((2, 4))
    m = ep.pair_metrics(cand, ref, mass, mass * 0.9, thresholds=(0.05, 0.1))

    assert (m["overall"]["agree"], m["overall"]["n"]) == (7, 8)
    assert m["overall"]["mean_dp"] == pytest.approx((0.04 + 0.05) / 8)
    assert m["overall"]["max_dp"] == pytest.approx(0.05)
    assert m["overall"]["mean_dmass"] == pytest.approx(0.1)
    assert [a["agree"] for a in m["per_adapter"]] == [3, 4]
    first = m["near_ties"][0]  # items with margin ≤ 0.05: (0, 1) at 0.04 and (0, 3) at 0.0
    assert first["share_at_or_below"] == pytest.approx(2 / 8)
    assert (first["n_above"], first["agreement_above"], first["disagree_above"]) == (6, 1.0, 0)
    assert m["disagreement_margin_max"] == pytest.approx(0.04)


def test_the_margin_can_come_from_a_third_engine() -> None:
    ref, cand = dirichlet(1), dirichlet(2)
    margin = np.zeros(ref.shape[:2])  # every item a tie in the margin source: nothing is above 0.05
    m = ep.pair_metrics(cand, ref, ref[..., 0], ref[..., 0], margin=margin)
    assert m["near_ties"][0]["n_above"] == 0 and np.isnan(m["near_ties"][0]["agreement_above"])


def test_bounds_pass_at_the_limits_and_fail_past_them_or_on_nan() -> None:
    bounds = ep.Bounds()
    assert (bounds.min_agreement, bounds.max_mean_dp) == (0.99, 0.01)
    assert ep.bound_failures({"agreement": 0.99, "mean_dp": 0.01}, bounds) == []
    assert len(ep.bound_failures({"agreement": 0.9899, "mean_dp": 0.001}, bounds)) == 1
    assert len(ep.bound_failures({"agreement": 1.0, "mean_dp": 0.0101}, bounds)) == 1
    assert len(ep.bound_failures({"agreement": float("nan"), "mean_dp": float("nan")}, bounds)) == 2
    assert ep.exit_status([], []) == 0
    assert ep.exit_status(["agreement"], ["no scores"]) == 1
    assert ep.exit_status([], ["no scores"]) == 3
    with pytest.raises(ep.ParityInputError):
        ep.Bounds(min_agreement=1.5)


def test_scores_of_other_shapes_or_with_nan_are_refused() -> None:
    p = dirichlet(0)
    with pytest.raises(ep.ParityInputError, match="both be"):
        ep.pair_metrics(p, p[:, :10], p[..., 0], p[:, :10, 0])
    bad = p.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(ep.ParityInputError, match="NaN"):
        ep.pair_metrics(bad, p, p[..., 0], p[..., 0])


def test_report_exits_by_the_bounds_and_says_what_is_missing(tmp_path: Path) -> None:
    ref = dirichlet(3)
    close = ref + np.random.default_rng(4).normal(0, 1e-4, ref.shape)
    y = ref.mean(0).argmax(-1)
    write_scores(tmp_path / "ok", "hf", "trained", ref, y)
    write_scores(tmp_path / "ok", "vllm", "trained", close)
    assert ep.main(["report", "--work", str(tmp_path / "ok"), "--check", "trained"]) == 0
    report = json.loads((tmp_path / "ok" / "report.json").read_text())
    assert report["pairs"][0]["candidate"] == "vllm" and report["pairs"][0]["failures"] == []
    assert report["accuracy"]["hf/trained"]["ensemble"] == 1.0
    assert "every bound met" in (tmp_path / "ok" / "report.md").read_text()

    write_scores(tmp_path / "far", "hf", "trained", ref)
    write_scores(tmp_path / "far", "vllm", "trained", dirichlet(5))  # unrelated distributions
    assert ep.main(["report", "--work", str(tmp_path / "far"), "--check", "trained"]) == 1
    failures = json.loads((tmp_path / "far" / "report.json").read_text())["failures"]
    assert any("agreement" in f for f in failures) and any("mean |dp|" in f for f in failures)

    write_scores(tmp_path / "half", "hf", "trained", ref)
    assert ep.main(["report", "--work", str(tmp_path / "half"), "--check", "trained"]) == 3
    assert json.loads((tmp_path / "half" / "report.json").read_text())["missing"] == ["trained: no vllm scores"]


def test_the_copied_gpu_profile_and_prompt_defaults_match_the_app() -> None:
    from annotate.loopconfig import GPU_PROFILE
    from annotate.models import Project

    assert GPU_PROFILE["train"] == ep.GPU_TRAIN
    assert GPU_PROFILE["max_context"] == ep.GPU_MAX_CONTEXT
    assert Project._meta.get_field("instructions").default == ep.APP_INSTRUCTIONS
    assert Project._meta.get_field("item_template").default == ep.APP_ITEM_TEMPLATE


# -- runs on the tiny model -----------------------------------------------------------------------


def labelled_csv(path: Path, n: int) -> Path:
    words = {"weather": ["rain", "sun", "storm"], "sport": ["goal", "match", "coach"], "food": ["bread", "soup"]}
    names = list(words)
    rows = [f"{words[names[i % 3]][i % 2]} today number {i},{names[i % 3]}" for i in range(n)]
    path.write_text("text,label\n" + "\n".join(rows) + "\n")
    return path


@pytest.mark.slow
def test_compare_runs_hf_against_hf_on_trained_and_random_adapters(tiny_llama_dir: Path, tmp_path: Path) -> None:
    """The whole compare path on the CPU: train (the GPU profile's options, 2 steps), random top-layer
    adapters, both engines' workers, the report. Full prompts against the prefix-KV / trunk-cache
    path in float32 agree to rounding; bf16 against float32 cannot meet a zero |Δp| bound."""
    model, data = str(tiny_llama_dir), labelled_csv(tmp_path / "data.csv", 12)
    assert (
        ep.main(
            [
                "train",
                "--model",
                model,
                "--data",
                str(data),
                "--n",
                "8",
                "--k",
                "1",
                "--max-steps",
                "2",
                "--out",
                str(tmp_path / "trained"),
            ]
        )
        == 0
    )
    summary = json.loads((tmp_path / "trained" / "train.json").read_text())
    assert summary["labels"] == ["food", "sport", "weather"] and summary["members"][0]["steps"] == 2
    assert ep.main(["random", "--model", model, "--k", "1", "--top-layers", "1", "--out", str(tmp_path / "rnd")]) == 0
    config = json.loads((tmp_path / "rnd" / "random_0" / "adapter_config.json").read_text())
    assert config["layers_to_transform"] == [1]

    work = tmp_path / "work"
    trained, top = tmp_path / "trained" / "prod_0", tmp_path / "rnd" / "random_0"
    common = ["--model", model, "--data", str(data), "--work", str(work), "--adapters", str(trained)]
    common += ["--set", f"top=data:{top}", "--set", "base=data:"]
    assert ep.main(["compare", *common, "--candidate", "hf-fp32-full", "--reference", "hf-fp32"]) == 0
    report = json.loads((work / "report.json").read_text())
    by_set = {row["set"]: row for row in report["pairs"] if row["candidate"] == "hf-fp32-full"}
    assert set(by_set) == {"adapters", "top", "base"}
    for row in by_set.values():
        assert row["overall"]["agreement"] == 1.0 and row["overall"]["mean_dp"] < 1e-4
    assert report["header"]["script_sha256"] and report["sets"]["adapters"]["codes"] == summary["codes"]

    assert ep.main(["compare", *common, "--candidate", "hf-bf16", "--reference", "hf-fp32", "--max-mean-dp", "0"]) == 1


class FakeVLLM:
    """Stands in for VLLMEngine: uniform distributions, a record of every score() call."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, list[Any]]] = []
        self.last_timings = {"generate_s": 0.0}

    def score(self, renderer: Any, texts: list[str], adapters: list[Any]) -> Any:
        from scoring.engines import ScoreResult

        self.calls.append((len(texts), list(adapters)))
        c, k = len(renderer.label_token_ids), max(1, len(adapters))
        p = np.full((k, len(texts), c), 1.0 / c, dtype=np.float32)
        return ScoreResult(p=p, mass=p[..., 0], truncated=np.zeros(len(texts), bool), tokens=len(texts) * 10)


@pytest.mark.slow
def test_the_vllm_worker_times_its_start_and_first_shard(
    tiny_llama_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scoring import engines

    fake, started, given = FakeVLLM(), [], []

    def get_engine(kind: str, model_dir: str, **options: object) -> FakeVLLM:
        started.append(kind)
        given.append(options)
        return fake

    monkeypatch.setattr(engines, "get_engine", get_engine)
    cache = tmp_path / "vllm-cache"
    (cache / "torch_compile_cache").mkdir(parents=True)
    (cache / "torch_compile_cache" / "x.py").write_text("compiled")
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(cache))
    dirs = []
    for name in ("a0", "a1", "b0"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "adapter_config.json").write_text("{}")
        dirs.append(str(tmp_path / name))
    data, work = labelled_csv(tmp_path / "data.csv", 9), tmp_path / "work"
    argv = [
        "score",
        "--model",
        str(tiny_llama_dir),
        "--data",
        str(data),
        "--work",
        str(work),
        "--variant",
        "vllm",
        "--set",
        f"a=data:{dirs[0]},{dirs[1]}",
        "--set",
        f"b=data:{dirs[2]}",
        "--first-shard-items",
        "4",
        "--vllm-options",
        '{"gpu_memory_utilization": 0.3}',  # beside running gpu workers: a smaller share
    ]
    assert ep.main(argv) == 0

    assert started == ["vllm"] and given == [{"gpu_memory_utilization": 0.3}]
    start = json.loads((work / "start-vllm.json").read_text())
    assert (start["shard_set"], start["shard_items"], start["requests"]) == ("a", 4, 8)
    assert start["cache_before"]["files"] == 1 and start["launch_to_first_shard_s"] >= start["engine_start_s"]
    assert [n for n, _ in fake.calls] == [4, 9, 9]  # the first shard, then each set
    ids = [ref.int_id for _, refs in fake.calls[1:] for ref in refs]
    assert len(ids) == len(set(ids)) == 3
    assert ep.score_path(work, "vllm", "a").is_file() and ep.score_path(work, "vllm", "b").is_file()
