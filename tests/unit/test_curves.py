"""Plots come out as well-formed SVG / PNG and are reproducible."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from predictor.evaluate import reliability_bins
from training.curves import learning_curve_png, learning_curve_svg, reliability_svg

SERIES = {"active": [(50, 0.61), (100, 0.70), (150, 0.76)], "random": [(50, 0.60), (100, 0.65), (150, 0.69)]}


def _svg_root(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    return root


def test_learning_curve_svg_is_valid_and_reproducible() -> None:
    svg = learning_curve_svg(SERIES, title="Accuracy vs labels")

    _svg_root(svg)
    assert "active" in svg and "random" in svg and "Accuracy vs labels" in svg
    assert learning_curve_svg(SERIES, title="Accuracy vs labels") == svg


def test_learning_curve_png_with_spread(tmp_path: Path) -> None:
    import matplotlib.image

    series = {
        "bald": [(20, 0.55, 0.03), (40, 0.66, 0.02)],
        "random": [(20, 0.54, 0.04), (40, 0.60, 0.03)],
    }
    path = learning_curve_png(series, tmp_path / "plots" / "curves.png", title="TREC")

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


def test_reliability_svg_from_evaluation_bins() -> None:
    rng = np.random.default_rng(0)
    confidence = rng.uniform(0.3, 1.0, 200)
    bins = reliability_bins(confidence, rng.uniform(size=200) < confidence)

    root = _svg_root(reliability_svg(bins, title="Round 3"))
    assert root.get("width") and root.get("height")


def test_empty_learning_curve_still_renders() -> None:
    _svg_root(learning_curve_svg({}, title="No rounds yet"))


def test_load_records_reads_plain_and_gzipped_files_and_skips_a_torn_line(tmp_path: Path) -> None:
    import gzip
    import json

    from annotate.simulation.report import load_records

    lines = [json.dumps({"data": "d", "strategy": "random", "seed": s, "labels": 20, "accuracy": 0.5}) for s in (0, 1)]
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + '\n{"torn')
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    assert (
        load_records([tmp_path / "a.jsonl"])
        == load_records([tmp_path / "b.jsonl.gz"])
        == [json.loads(x) for x in lines]
    )


def test_the_readme_block_is_computed_from_the_records_and_replaces_only_its_markers(tmp_path: Path) -> None:
    import pytest

    from annotate.simulation.report import README_BEGIN, README_END, readme_block, update_readme

    records = []
    for seed in (0, 1):
        for labels, (act, rnd) in zip((50, 100, 150), ((0.5, 0.5), (0.7, 0.6), (0.8, 0.7)), strict=True):
            for strategy, acc in (("active", act), ("random", rnd)):
                records.append({"data": "toy", "strategy": strategy, "seed": seed, "labels": labels,
                                "accuracy": acc, "commit": "abc1234", "test_n": 40, "test_sample": 40})  # fmt: skip
    records.append(
        {"data": "toy", "strategy": "active", "seed": 1, "labels": 200, "accuracy": 0.9, "commit": "abc1234"}
    )
    block = readme_block(records, [], ["recs.jsonl"])
    assert block.startswith(README_BEGIN) and block.endswith(README_END)
    assert "toy active 150–200" in block and "toy random 150" in block and "abc1234" in block
    # Δ mean accuracy over 50..150 per seed: trapezoids of the gaps (0, 10, 10) = (250 + 500) / 100 = 7.5 points
    assert "| toy | active | 2 | 7.5±0.0 | 7.5±0.0 | 4/4 |" in block  # a uniform seed set: random is its peer
    assert "Test items: toy 40 (a fixed random sample of the test split)." in block
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\nbefore\n{README_BEGIN}\nold table\n{README_END}\nafter\n")
    update_readme(readme, block)
    text = readme.read_text()
    assert text.startswith("# x\nbefore\n") and text.endswith("\nafter\n") and "old table" not in text
    readme.write_text("no markers\n")
    with pytest.raises(ValueError, match="must hold"):
        update_readme(readme, block)


def test_labels_to_95_needs_a_full_data_run_of_ours() -> None:
    from annotate.simulation.report import markdown_table, summary_rows

    records = [
        {"data": "toy", "strategy": s, "seed": 0, "labels": n, "accuracy": a}
        for s in ("active", "random")
        for n, a in ((50, 0.5), (100, 0.8), (150, 0.9))
    ]
    without = markdown_table(summary_rows(records), [])
    assert "labels to 95 % of full" not in without and "not shown" in without
    records.append({"data": "toy", "strategy": "full-data", "seed": 0, "labels": 900, "accuracy": 0.9})
    with_full = markdown_table(summary_rows(records), [])
    assert "labels to 95 % of full" in with_full and "not shown" not in with_full
    # 95 % of 90.0 = 85.5, reached between 100 (80) and 150 (90) labels: at 127.5 by interpolation.
    assert "| 90.0 | 128±0 |" in with_full


def test_the_summary_is_one_table_per_data_set_with_its_baseline_rows() -> None:
    from annotate.simulation.report import markdown_table, summary_rows

    records = [
        {"data": d, "strategy": s, "seed": 0, "labels": n, "accuracy": a}
        for d in ("trec", "sst2")
        for s in ("active", "random")
        for n, a in ((100, 0.5), (200, 0.8))
    ]
    baselines = [{"data": "SST-2", "strategy": "baseline: MiniLM + LR, margin", "acc@200": "70.0"}]
    text = markdown_table(summary_rows(records), baselines)
    assert text.count("| data | strategy |") == 2
    sst2, trec = text.split("**trec**")  # the sets in the summary's (sorted) order
    assert "**sst2**" in sst2 and "| sst2 | random |" in sst2 and "| SST-2 | baseline: MiniLM + LR, margin |" in sst2
    assert "| trec | active |" in trec and "SST-2" not in trec
    alone = markdown_table(summary_rows([r for r in records if r["data"] == "trec"]), [])
    assert "**trec**" not in alone and alone.startswith("| data | strategy |")


def test_the_stopping_rule_is_replayed_on_the_curves() -> None:
    from annotate.simulation.report import stopping_table

    kappas = {0: [None, 0.9, 0.99, 0.995, 1.0, 1.0], 1: [None, 0.9, 0.99, 0.98, 0.99, 0.99]}
    records = [
        {"data": "toy", "strategy": "active", "seed": seed, "round": i + 1, "labels": 100 * (i + 1),
         "accuracy": 0.5 + 0.05 * i, "stop_kappa": k}
        for seed, ks in kappas.items() for i, k in enumerate(ks)
    ]  # fmt: skip
    table = stopping_table(records + [dict(records[3])])  # a repeated round counts once
    # Seed 0: κ ≥ 0.99 for the pairs of rounds 3, 4, 5 → fires at round 5 (500 labels, 70 %); seed 1 never.
    assert "| toy | active | 500, > 600 | 70.0±0.0 (1/2) | 75.0±0.0 | 0.995 |" in table, table


def test_first_stable_is_the_first_round_the_rule_holds() -> None:
    from hypothesis import given
    from hypothesis import strategies as st

    from predictor.stopping_rule import first_stable, predictions_stable

    @given(st.lists(st.one_of(st.none(), st.floats(0.9, 1.0)), max_size=12))
    def check(kappas: list[float | None]) -> None:
        i = first_stable(kappas)
        holds = [predictions_stable(kappas[: j + 1]) for j in range(len(kappas))]
        assert i == (holds.index(True) if True in holds else None)

    check()
    assert first_stable([None, 0.99, 0.99, 0.99]) == 3 and first_stable([1.0, 1.0]) is None


def test_drop_entries_name_a_strategy_at_a_commit_everywhere_or_in_one_set() -> None:
    from annotate.simulation.report import _dropped

    def record(data: str, strategy: str, commit: str) -> dict[str, str]:
        return {"data": data, "strategy": strategy, "commit": commit}

    everywhere, one_set = ["active@e6a2"], ["clinc150/active@e6a2"]
    assert _dropped(record("trec", "active", "e6a244b"), everywhere)
    assert _dropped(record("clinc150", "active", "e6a244b"), one_set)
    assert not _dropped(record("trec", "active", "e6a244b"), one_set)  # another set
    assert not _dropped(record("clinc150", "random", "e6a244b"), one_set)  # another strategy
    assert not _dropped(record("clinc150", "active", "4259b47"), one_set)  # another commit
    assert _dropped(record("clinc150", "active", "e6a244b"), ["CLINC150/active@e6a2"])  # the report's own spelling


def test_a_job_run_again_counts_once_and_a_typical_start_is_its_own_curve(tmp_path: Path) -> None:
    import json

    from annotate.simulation.report import curves, selected_records

    def write(name: str, rows: list[tuple[str, int, int, float, str]]) -> Path:
        path = tmp_path / name
        lines = [
            {"data": "trec", "strategy": s, "seed": seed, "labels": n, "accuracy": a, "commit": "c1", "cold_mode": m}
            for s, seed, n, a, m in rows
        ]
        path.write_text("".join(json.dumps(r) + "\n" for r in lines))
        return path

    first = write("a.jsonl", [("active", 0, 100, 0.5, "typical"), ("active", 0, 200, 0.6, "typical")])
    first_random = ("random", 0, 100, 0.4, "random")
    second = write("b.jsonl", [("active", 0, 100, 0.55, "typical"), ("active", 0, 200, 0.7, "typical"), first_random])
    old = write("c.jsonl", [("active", 1, 100, 0.3, "random")])  # no typical start: plain "active"
    records = selected_records([first, second, old], [])
    got = curves(records)
    labels, acc = got[("trec", "active+typical")][0]
    assert labels.tolist() == [100, 200] and acc.tolist() == pytest.approx([55.0, 70.0])  # the later run, once
    assert set(got) == {("trec", "active+typical"), ("trec", "random"), ("trec", "active")}
    assert selected_records([first, second], ["active+typical@c1"]) == [
        r for r in selected_records([second], []) if r["strategy"] == "random"
    ]


def test_a_soft_rank_exponent_other_than_one_is_its_own_curve() -> None:
    """Records of an active run drawn at softrank_beta 2 (in the GPU records' resolved config or the
    proxy's own field) are "active+typical+β2"; β 1 and records from before the option keep their name."""
    from annotate.simulation.report import _named_by_start

    base = {"data": "trec", "strategy": "active", "seed": 0, "labels": 100, "accuracy": 0.5, "cold_mode": "typical"}
    gpu = {**base, "config": {"selection": {"softrank_beta": 2.0}}}
    assert _named_by_start(gpu)["strategy"] == "active+typical+β2"
    assert _named_by_start({**base, "softrank_beta": 0.5})["strategy"] == "active+typical+β0.5"
    assert _named_by_start({**base, "config": {"selection": {"softrank_beta": 1.0}}})["strategy"] == "active+typical"
    assert _named_by_start(base)["strategy"] == "active+typical"
    random = {**base, "strategy": "random", "cold_mode": "random", "softrank_beta": 2.0}
    assert _named_by_start(random)["strategy"] == "random"  # random draws no soft rank
    blend = {**gpu, "config": {"selection": {"softrank_beta": 1.0, "committee": "blend"}}}
    assert _named_by_start(blend)["strategy"] == "active+typical+blend-committee"
    assert _named_by_start({**random, "config": {"selection": {"committee": "blend"}}})["strategy"] == "random"


def test_the_paired_comparison_is_per_seed_and_its_mean() -> None:
    """Δ area of each seed is its strategy curve's area minus its own random curve's over the labels
    both reached; the row's mean ± std and the per-seed column come from the same numbers."""
    from annotate.simulation.report import paired_rows, per_seed_table

    def rec(strategy: str, seed: int, labels: int, acc: float) -> dict[str, object]:
        return {"data": "trec", "strategy": strategy, "seed": seed, "labels": labels, "accuracy": acc, "commit": "c1"}

    records = [
        # seed 0: active +10 points at 200 → area over [100, 200] +5.0; seed 1: active −2 at 200 → −1.0
        rec("random", 0, 100, 0.5), rec("random", 0, 200, 0.6), rec("active", 0, 100, 0.5), rec("active", 0, 200, 0.7),
        rec("random", 1, 100, 0.5), rec("random", 1, 200, 0.6), rec("active", 1, 100, 0.5), rec("active", 1, 200, 0.58),
        rec("active", 2, 100, 0.5), rec("active", 2, 200, 0.9),  # no random curve for seed 2: not paired
    ]  # fmt: skip
    (row,) = paired_rows(records, [])
    assert row["per_seed"] == "0: +5.0, 1: -1.0"
    assert row["delta_auc"] == "2.0±4.2" and row["seeds"] == "2" and row["wins"] == "1/2"
    assert "| trec | active | 0: +5.0, 1: -1.0 |" in per_seed_table([row])


def test_the_paired_rows_commits_are_the_pairs_and_superseded_ones_are_marked() -> None:
    """A paired row names the commits of its own strategy's and random's records (not another
    strategy's of the same set), and marks those of code that no longer exists "(earlier code)"."""
    from annotate.simulation.report import paired_rows

    def rec(strategy: str, seed: int, labels: int, acc: float, commit: str) -> dict[str, object]:
        return {"data": "trec", "strategy": strategy, "seed": seed, "labels": labels, "accuracy": acc, "commit": commit}

    records = [
        rec("random", 0, 100, 0.5, "aaa1111"), rec("random", 0, 200, 0.6, "aaa1111"),
        rec("active", 0, 100, 0.5, "bbb2222"), rec("active", 0, 200, 0.7, "bbb2222"),
        rec("portfolio", 0, 100, 0.5, "ccc3333"), rec("portfolio", 0, 200, 0.65, "ccc3333"),
        rec("random", 1, 100, 0.5, "ddd4444"), rec("random", 1, 200, 0.6, "ddd4444"),  # no strategy's seed 1
    ]  # fmt: skip
    plain = {r["strategy"]: r["commits"] for r in paired_rows(records, [])}
    assert plain == {"active": "aaa1111, bbb2222", "portfolio": "aaa1111, ccc3333"}  # random's seed 1 unpaired
    full_hash = "ccc3333" + "0" * 33
    marked = {r["strategy"]: r["commits"] for r in paired_rows(records, [], superseded=[full_hash, "aaa1"])}
    assert marked["active"] == "aaa1111 (earlier code), bbb2222"
    assert marked["portfolio"] == "aaa1111 (earlier code), ccc3333 (earlier code)"


def test_a_data_set_run_at_two_batch_sizes_is_two_data_sets(tmp_path: Path) -> None:
    """Records of one set at B=100 and B=50 (two inputs) are never averaged or deduplicated into one
    curve: each B is "<data>-B<B>", paired with random at its own B; one B keeps the plain name."""
    import json

    from annotate.simulation.report import paired_rows, selected_records, source_set

    def rec(strategy: str, seed: int, labels: int, acc: float, b: int) -> dict[str, object]:
        return {"data": "trec", "strategy": strategy, "seed": seed, "labels": labels, "accuracy": acc, "batch_size": b,
                "seed_labels": 100}  # fmt: skip

    b100 = [rec("random", 0, 100, 0.5, 100), rec("random", 0, 200, 0.6, 100),
            rec("active", 0, 100, 0.5, 100), rec("active", 0, 200, 0.7, 100)]  # fmt: skip
    b50 = [rec("random", 0, 100, 0.5, 50), rec("random", 0, 200, 0.6, 50),
           rec("active", 0, 100, 0.5, 50), rec("active", 0, 200, 0.58, 50)]  # fmt: skip
    for name, rows in (("b100.jsonl", b100), ("b50.jsonl", b50)):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    alone = selected_records([tmp_path / "b100.jsonl"], [])
    assert {r["data"] for r in alone} == {"trec"}
    both = selected_records([tmp_path / "b100.jsonl", tmp_path / "b50.jsonl"], [])
    assert len(both) == 8 and {r["data"] for r in both} == {"trec-B100", "trec-B50"}
    paired = {r["data"]: r for r in paired_rows(both, [])}
    assert paired["trec-B100"]["per_seed"] == "0: +5.0" and paired["trec-B50"]["per_seed"] == "0: -1.0"
    # the cheap learner's records (bench/proxy_sim.py) name their B in loop_options
    proxy = [
        {k: v for k, v in r.items() if k not in ("batch_size", "seed_labels")} | {"loop_options": {"batch": 25}}
        for r in b50
    ]
    (tmp_path / "proxy.jsonl").write_text("".join(json.dumps(r) + "\n" for r in proxy))
    mixed = selected_records([tmp_path / "b100.jsonl", tmp_path / "proxy.jsonl"], [])
    assert {r["data"] for r in mixed} == {"trec-B100", "trec-B25"}
    # a seed set of another size at the same B is its own curve too; --drop may name one shape
    s50 = [r | {"seed_labels": 50} for r in b100]
    (tmp_path / "s50.jsonl").write_text("".join(json.dumps(r) + "\n" for r in s50))
    shapes = selected_records([tmp_path / "b100.jsonl", tmp_path / "s50.jsonl", tmp_path / "b50.jsonl"], [])
    assert len(shapes) == 12 and {r["data"] for r in shapes} == {"trec-B100-S100", "trec-B100-S50", "trec-B50-S100"}
    kept = selected_records([tmp_path / "b100.jsonl", tmp_path / "b50.jsonl"], ["trec-B50/active@"])
    assert {(r["data"], r["strategy"]) for r in kept if r["strategy"] == "active"} == {("trec-B100", "active")}
    assert source_set("trec-B100-S50") == source_set("trec-B50") == source_set("trec") == "trec"


def test_the_memory_table_takes_the_largest_peak_over_seeds_and_says_how_steps_ran() -> None:
    from annotate.simulation.report import memory_table

    def rec(seed: int, n: int, labels: int, mib: float | None, modes: list[str]) -> dict[str, object]:
        return {"data": "trec", "strategy": "active", "seed": seed, "round": n, "labels": labels,
                "accuracy": 0.5, "gpu_peak_mib": mib, "adapters": {"step_modes": modes}}  # fmt: skip

    records = [rec(0, 1, 100, 1700, ["graph"]), rec(1, 1, 100, 1750, ["graph"]), rec(0, 6, 600, 2200, ["graph"]),
               rec(1, 6, 600, 2100, ["eager"]), rec(0, 10, 1000, 2300, ["graph"])]  # fmt: skip
    table = memory_table(records)
    assert "| trec | active | 1,750 MiB | 2,200 MiB | 2,300 MiB | eager, graph |" in table
    assert memory_table([rec(0, 1, 100, None, [])]) == ""  # a CPU run records no GPU memory: no table


def test_the_gain_is_reported_against_both_random_baselines(tmp_path: Path) -> None:
    """Active (typical seed set) against uniform random and against random-coldstart (the same typical
    seed set, then random batches), seed by seed: the first Δ is the cold start's and the selection's
    gain together, the second the selection's alone, and random-coldstart's own Δ vs uniform random is
    the cold start's, so the two parts add up to the whole."""
    import json

    from annotate.simulation.report import paired_rows, paired_table, per_seed_table, seed_set_peer, selected_records

    def rec(strategy: str, mode: str, seed: int, labels: int, acc: float) -> dict[str, object]:
        return {"data": "trec", "strategy": strategy, "cold_mode": mode, "seed": seed, "labels": labels,
                "accuracy": acc, "commit": "c1"}  # fmt: skip

    curves = {  # accuracy at 100 and 200 labels, per (strategy, cold mode) and seed
        ("random", "random"): {0: (0.50, 0.60), 1: (0.50, 0.60)},
        ("random-coldstart", "typical"): {0: (0.55, 0.62), 1: (0.55, 0.64)},
        ("active", "typical"): {0: (0.55, 0.70), 1: (0.55, 0.66)},
    }
    records = [
        rec(strategy, mode, seed, labels, acc)
        for (strategy, mode), by_seed in curves.items()
        for seed, accs in by_seed.items()
        for labels, acc in zip((100, 200), accs, strict=True)
    ]
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    rows = {r["strategy"]: r for r in paired_rows(selected_records([tmp_path], []), [])}
    assert set(rows) == {"active+typical", "random-coldstart+typical"}
    active, cold = rows["active+typical"], rows["random-coldstart+typical"]
    # areas over [100, 200]: random 55.0; random-coldstart 58.5 / 59.5; active 62.5 / 60.5
    assert (active["per_seed"], active["delta_auc"]) == ("0: +7.5, 1: +5.5", "6.5±1.4")
    assert (active["per_seed_selection"], active["delta_auc_selection"]) == ("0: +4.0, 1: +1.0", "2.5±2.1")
    assert (cold["per_seed"], cold["delta_auc"], cold["delta_auc_selection"]) == ("0: +3.5, 1: +4.5", "4.0±0.7", "–")
    assert "| trec | active+typical | 2 | 6.5±1.4 | 2.5±2.1 | 2/2 |" in paired_table(list(rows.values()))
    assert "| trec | active+typical | 0: +7.5, 1: +5.5 | 0: +4.0, 1: +1.0 |" in per_seed_table([active])
    # Without random-coldstart records the selection-only column says so ("–"), never a made-up value;
    # a strategy whose seed set was uniform is its own selection-only comparison with random.
    no_peer = [r for r in records if r["strategy"] != "random-coldstart"]
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in no_peer))
    (alone,) = paired_rows(selected_records([tmp_path], []), [])
    assert (alone["delta_auc"], alone["delta_auc_selection"]) == ("6.5±1.4", "–")
    assert seed_set_peer("active") == "random" and seed_set_peer("active+typical+β2") == "random-coldstart+typical"


def test_a_consolidation_sweep_is_one_data_set_per_period_paired_within(tmp_path: Path) -> None:
    """Records of one set with loop option consolidate_every 0 and 3 (a sweep, two inputs) are two data
    sets, "<data>-C0" and "<data>-C3", each strategy paired with random of the same period; records
    made before the option (no value) keep the plain name, as one period alone does."""
    import json

    from annotate.simulation.report import paired_rows, selected_records, source_set

    def rec(strategy: str, labels: int, acc: float, every: int | None) -> dict[str, object]:
        config = {} if every is None else {"config": {"consolidate_every": every}}
        return {"data": "trec", "strategy": strategy, "seed": 0, "labels": labels, "accuracy": acc} | config

    for every, active_end in ((0, 0.70), (3, 0.62)):
        rows = [rec("random", 100, 0.5, every), rec("random", 200, 0.6, every),
                rec("active", 100, 0.5, every), rec("active", 200, active_end, every)]  # fmt: skip
        (tmp_path / f"c{every}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    both = selected_records([tmp_path / "c0.jsonl", tmp_path / "c3.jsonl"], [])
    assert len(both) == 8 and {r["data"] for r in both} == {"trec-C0", "trec-C3"}
    paired = {r["data"]: r["per_seed"] for r in paired_rows(both, [])}
    assert paired == {"trec-C0": "0: +5.0", "trec-C3": "0: +1.0"}
    assert {r["data"] for r in selected_records([tmp_path / "c3.jsonl"], [])} == {"trec"}
    kept = selected_records([tmp_path / "c0.jsonl", tmp_path / "c3.jsonl"], ["trec-C3/active@"])
    assert {r["data"] for r in kept if r["strategy"] == "active"} == {"trec-C0"}
    assert source_set("trec-B50-S100-C3") == "trec"
