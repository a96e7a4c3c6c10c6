"""The run's shard index: every shard's items computed once, linear in the run's size."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from scoring import pipeline


def test_the_index_holds_each_shard_exactly_as_the_hash_assigns_it(tmp_path: Path) -> None:
    ids = np.random.default_rng(0).permutation(5000).astype(np.int64) + 10
    by_shard, offsets = pipeline.write_shard_index(tmp_path, ids, 7)
    shards = pipeline.shard_of(ids, 7)
    for s in range(7):
        expected = np.sort(ids[shards == s])
        assert (pipeline.read_shard(tmp_path, s) == expected).all()
        assert (by_shard[offsets[s] : offsets[s + 1]] == expected).all()
    assert offsets[-1] == len(ids) and sorted(by_shard.tolist()) == sorted(ids.tolist())


def test_two_million_ids_are_sharded_in_seconds(tmp_path: Path) -> None:
    ids = np.arange(2_000_000, dtype=np.int64) * 3 + 1
    started = time.perf_counter()
    _, offsets = pipeline.write_shard_index(tmp_path, ids, 1000)  # 2,000 items a shard, as the bulk job
    middle = pipeline.read_shard(tmp_path, 500)
    elapsed = time.perf_counter() - started
    # one pass: ~2 s here; filtering the run's list for each of the 1,000 shards would hash it 1,000 times
    assert elapsed < 20, elapsed
    assert len(middle) == offsets[501] - offsets[500] and 1500 < len(middle) < 2500


def test_an_empty_run_has_no_shards(tmp_path: Path) -> None:
    by_shard, offsets = pipeline.write_shard_index(tmp_path, np.zeros(0, np.int64), 0)
    assert len(by_shard) == 0 and offsets.tolist() == [0]
