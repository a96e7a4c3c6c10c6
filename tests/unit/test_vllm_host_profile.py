"""bench/vllm_host_profile.py's choose: a deployed run takes a variant's option only where that variant beat
``inproc`` by the gain, round options go into both loops and a worker's local ones into the gpu workers' only."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import vllm_host_profile  # noqa: E402


def _rows(out: Path, rates: dict[str, float]) -> None:
    (out / "adapters.json").write_text(json.dumps(["a0"]))
    for name, rate in rates.items():
        row = {"variant": name, "requests_per_s": rate, "profiled": name.endswith("-profile")}
        (out / f"{name}.json").write_text(json.dumps(row))


GPU = {"profile": "gpu", "engine_options": {"gpu_memory_utilization": 0.12}}


def test_the_fastest_block_size_goes_into_both_loops_and_the_hash_into_the_gpu_workers_only(tmp_path: Path) -> None:
    _rows(tmp_path, {"inproc": 1000, "block64": 1300, "block128": 1400, "xxhash": 1200, "inproc-profile": 5000})
    picked = vllm_host_profile.choose(tmp_path, {"profile": "gpu"}, GPU)
    assert picked["loop"] == {"profile": "gpu", "engine_options": {"block_size": 128}}
    assert picked["gpu_loop"]["engine_options"] == {
        "gpu_memory_utilization": 0.12,
        "block_size": 128,
        "prefix_caching_hash_algo": "xxhash",
    }
    assert GPU["engine_options"] == {"gpu_memory_utilization": 0.12}  # the caller's dicts untouched


def test_gains_under_the_threshold_leave_the_defaults_and_core_process_obeys_the_switch(tmp_path: Path) -> None:
    _rows(tmp_path, {"inproc": 1000, "block64": 1050, "mp": 1500})
    kept = vllm_host_profile.choose(tmp_path, {"profile": "gpu"}, GPU, core_process=False)
    assert kept["loop"] == {"profile": "gpu"}
    assert kept["gpu_loop"] == GPU
    assert any("not applied" in r for r in kept["reasons"])
    taken = vllm_host_profile.choose(tmp_path, {"profile": "gpu"}, GPU)
    assert taken["gpu_loop"]["engine_options"]["engine_core_process"] is True


def test_without_a_baseline_row_nothing_is_chosen(tmp_path: Path) -> None:
    _rows(tmp_path, {"block64": 9999})
    picked = vllm_host_profile.choose(tmp_path, {"profile": "gpu"}, GPU)
    assert picked["loop"] == {"profile": "gpu"} and picked["gpu_loop"] == GPU
