from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from scoring.cache import ScoreCache, StaleScoresError, require_current, text_hash


def arrays(k: int, n: int, c: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(c), size=(k, n)).astype(np.float32)
    return p, rng.uniform(0, 1, size=(k, n)).astype(np.float32)


def test_roundtrip_and_partial_hits(tmp_path: Path) -> None:
    cache = ScoreCache(tmp_path)
    hashes = [text_hash(t) for t in ("a", "b", "c")]
    p, mass = arrays(4, 3, 5, 0)
    cache.put(hashes[:2], "prompt1", "set1", p[:, :2], mass[:, :2])
    hit, got_p, got_mass = cache.get([hashes[1], hashes[2], hashes[0]], "prompt1", "set1")
    assert hit.tolist() == [True, False, True]
    np.testing.assert_array_equal(got_p[:, 0], p[:, 1])
    np.testing.assert_array_equal(got_p[:, 2], p[:, 0])
    np.testing.assert_array_equal(got_mass[:, [0, 2]], mass[:, [1, 0]])
    assert np.isnan(got_p[:, 1]).all()


def test_any_other_key_is_a_miss(tmp_path: Path) -> None:
    cache = ScoreCache(tmp_path)
    p, mass = arrays(2, 1, 3, 1)
    cache.put(["h"], "prompt1", "set1", p, mass)
    for prompt, adapters in (("prompt2", "set1"), ("prompt1", "set2")):
        hit, got_p, got_mass = cache.get(["h"], prompt, adapters)
        assert not hit.any()
        assert got_p.shape == (0, 1, 0) and got_mass.shape == (0, 1)


def test_later_put_wins_and_shards_do_not_overwrite_each_other(tmp_path: Path) -> None:
    cache = ScoreCache(tmp_path)
    old_p, old_mass = arrays(1, 2, 3, 2)
    new_p, new_mass = arrays(1, 1, 3, 3)
    cache.put(["x", "y"], "pr", "set", old_p, old_mass)
    cache.put(["y"], "pr", "set", new_p, new_mass)  # a second shard rescored y
    hit, p, _ = cache.get(["x", "y"], "pr", "set")
    assert hit.all()
    np.testing.assert_array_equal(p[:, 0], old_p[:, 0])
    np.testing.assert_array_equal(p[:, 1], new_p[:, 0])


def test_put_validates_shapes(tmp_path: Path) -> None:
    p, mass = arrays(2, 3, 4, 4)
    with pytest.raises(ValueError, match="do not match"):
        ScoreCache(tmp_path).put(["a", "b"], "pr", "set", p, mass)


def test_require_current_fails_closed() -> None:
    require_current("set2", "set2")
    with pytest.raises(StaleScoresError, match="rescore"):
        require_current("set1", "set2")
