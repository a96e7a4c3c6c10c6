"""The deployment's loop options: read from the environment once (settings), checked and typed once
(annotate.loopconfig.loop_options), merged over the machine's profile; a typo is an error."""

from __future__ import annotations

from typing import Any

import pytest

from annotate.loopconfig import CPU_PROFILE, GPU_PROFILE, loop_options, parse_loop_options


def test_options_merge_over_the_profile_key_by_key() -> None:
    opts = parse_loop_options({"profile": "cpu", "n_shards": 3, "train": {"max_steps": 2}})
    assert (opts.profile, opts.n_shards, opts.max_context, opts.arms) == ("cpu", 3, CPU_PROFILE["max_context"], True)
    assert opts.train.max_steps == 2 and opts.train.lr == CPU_PROFILE["train"]["lr"]  # the rest of the profile stays
    gpu = parse_loop_options({"profile": "gpu", "arms": False, "engine_options": {"b": 1, "a": 2}})
    assert gpu.max_context == GPU_PROFILE["max_context"] and gpu.train.max_steps == 48 and not gpu.arms
    assert gpu.train.top_layers == 8 and gpu.train.min_steps == 48
    cpu = parse_loop_options({"profile": "cpu"})
    assert (cpu.train.top_layers, cpu.train.max_steps, cpu.train.batch_size, cpu.arms_every) == (4, 48, 16, 5)
    assert (gpu.arms_every, parse_loop_options({"arms_every": 1}).arms_every) == (1, 1)
    assert gpu.engine_options == (("a", 2), ("b", 1))


def test_the_cpu_profile_trains_the_comparison_arms_every_fifth_round() -> None:
    """Issue 32, problem 5: the arms (two more adapters, two more test-set passes) every 5th round."""
    from training.ensemble import is_arms_round

    assert [n for n in range(1, 12) if is_arms_round(n, 5)] == [5, 10]
    assert all(is_arms_round(n, 1) for n in range(1, 5))
    with pytest.raises(ValueError, match="arms_every must be 1 or more"):
        parse_loop_options({"arms_every": 0})


def test_the_cpu_profile_trains_the_comparison_arms_after_the_round_and_the_gpu_profile_in_it() -> None:
    """Issue 32, problem 5: an arms round took 95-107 s on the 2-core machine, 68 s of it the arms."""
    assert parse_loop_options({}).arms_timing == "deferred"
    assert parse_loop_options({"profile": "gpu"}).arms_timing == "in_round"
    assert parse_loop_options({"arms_timing": "in_round"}).arms_timing == "in_round"
    assert parse_loop_options({"profile": "gpu", "arms_timing": "deferred"}).arms_timing == "deferred"
    with pytest.raises(ValueError, match="arms_timing must be one of"):
        parse_loop_options({"arms_timing": "later"})


def test_an_unknown_option_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown loop options \['n_shard'\] \(known: \['arms'"):
        parse_loop_options({"n_shard": 2})
    with pytest.raises(ValueError, match="unknown training options"):
        parse_loop_options({"train": {"max_step": 2}})


def test_the_setting_is_parsed_once_per_value(settings: Any) -> None:
    settings.LOOP_OPTIONS = {"profile": "cpu", "max_context": 99}
    first = loop_options()
    assert first.max_context == 99 and loop_options() is first
    settings.LOOP_OPTIONS = {"profile": "cpu", "max_context": 77}  # the simulation overrides it per job
    assert loop_options().max_context == 77


def test_the_stop_set_size_defaults_to_500_and_zero_turns_it_off() -> None:
    assert parse_loop_options({"profile": "cpu"}).stop_set_size == 500
    assert parse_loop_options({"profile": "gpu", "stop_set_size": 0}).stop_set_size == 0
    with pytest.raises(ValueError, match="stop_set_size must be 0 .off. or positive"):
        parse_loop_options({"profile": "cpu", "stop_set_size": -1})


def test_the_blend_is_on_by_default_and_off_or_a_typo_is_checked() -> None:
    assert parse_loop_options({"profile": "cpu"}).blend == "auto"
    assert parse_loop_options({"profile": "gpu", "blend": "off"}).blend == "off"
    with pytest.raises(ValueError, match=r"blend must be one of \['auto', 'off'\], got 'of'"):
        parse_loop_options({"profile": "cpu", "blend": "of"})


def test_the_soft_rank_exponent_is_checked() -> None:
    opts = parse_loop_options({"profile": "gpu", "engine_options": {"packed_scoring": False}})
    assert opts.engine_options == (("packed_scoring", False),)
    with pytest.raises(ValueError, match="loop option engine_options: .*packed_scoring must be true, false, 0 or 1"):
        parse_loop_options({"profile": "gpu", "engine_options": {"packed_scoring": "false"}})
    assert parse_loop_options({"profile": "cpu"}).committee == "members"
    assert parse_loop_options({"profile": "gpu", "committee": "blend"}).committee == "blend"
    with pytest.raises(ValueError, match='committee "blend" needs blend "auto"'):
        parse_loop_options({"profile": "cpu", "committee": "blend", "blend": "off"})
    for wrong in ("proxy", None, ["blend"]):
        with pytest.raises(ValueError, match=r"committee must be one of \['members', 'blend'\]"):
            parse_loop_options({"profile": "cpu", "committee": wrong})
    assert parse_loop_options({"profile": "cpu"}).softrank_beta == 1.0
    assert parse_loop_options({"profile": "gpu", "softrank_beta": 2}).softrank_beta == 2.0
    for bad in (-1, 9):
        with pytest.raises(ValueError, match=r"softrank_beta must be within \[0, 8\]"):
            parse_loop_options({"profile": "cpu", "softrank_beta": bad})
    with pytest.raises(ValueError, match=r"softrank_beta must be within \[0, 8\], got nan"):
        parse_loop_options({"profile": "cpu", "softrank_beta": "nan"})
    for not_a_number in ("greedy", None, [2]):
        with pytest.raises(ValueError, match="softrank_beta must be a number, got"):
            parse_loop_options({"profile": "cpu", "softrank_beta": not_a_number})


def test_the_gpu_profile_replays_tf32_graph_steps_and_the_cpu_profile_does_not() -> None:
    gpu = parse_loop_options({"profile": "gpu"}).train
    assert (gpu.graph_step, gpu.precision, gpu.micro_batch_tokens) == ("auto", "tf32", 4096)
    cpu = parse_loop_options({"profile": "cpu"}).train
    assert (cpu.graph_step, cpu.precision) == ("off", "float32")
    off = parse_loop_options({"profile": "gpu", "train": {"graph_step": "off", "precision": "float32"}}).train
    assert (off.graph_step, off.precision) == ("off", "float32")


def test_consolidation_is_off_by_default_and_retrains_from_scratch_every_n_rounds() -> None:
    """Loop option consolidate_every: 0 (the default) keeps warm starts; N retrains the prod members
    from scratch at rounds N, 2N, ...; the first adapters and the final model are always from scratch."""
    from training.ensemble import prod_training_mode

    assert parse_loop_options({"profile": "cpu"}).consolidate_every == 0
    assert parse_loop_options({"profile": "cpu", "consolidate_every": 3}).consolidate_every == 3
    with pytest.raises(ValueError, match="consolidate_every must be 0 .off. or positive"):
        parse_loop_options({"profile": "cpu", "consolidate_every": -2})

    def modes(every: int, *, final_at: int = 0) -> list[str]:
        return [
            prod_training_mode(number=n, consolidate_every=every, final=n == final_at, has_previous=n > 1)
            for n in range(1, 8)
        ]

    assert modes(0) == ["scratch"] + ["warm"] * 6
    assert modes(3) == ["scratch", "warm", "scratch", "warm", "warm", "scratch", "warm"]
    assert modes(0, final_at=5) == ["scratch", "warm", "warm", "warm", "scratch", "warm", "warm"]


def test_cuda_graph_options_are_checked_when_the_options_are_read() -> None:
    """A misspelt cudagraph_mode or a bad capture-size list fails at start-up, not when a gpu worker first
    builds its engine mid-round."""
    good = {"cudagraph_mode": "PIECEWISE", "cudagraph_capture_sizes": [1, 8, 512]}
    opts = parse_loop_options({"profile": "gpu", "engine_options": good})
    assert dict(opts.engine_options) == good
    with pytest.raises(ValueError, match=r"engine_options: cudagraph_mode must be one of \[.*got 'piecewise'"):
        parse_loop_options({"profile": "gpu", "engine_options": {"cudagraph_mode": "piecewise"}})
    for sizes in ([], [0, 8], [8, "64"], 512, [True], [1.5]):
        with pytest.raises(ValueError, match="cudagraph_capture_sizes must be a non-empty list of positive whole"):
            parse_loop_options({"profile": "gpu", "engine_options": {"cudagraph_capture_sizes": sizes}})


def test_a_fixed_kv_cache_is_a_positive_whole_number_of_bytes() -> None:
    opts = parse_loop_options({"profile": "gpu", "engine_options": {"kv_cache_memory_bytes": 8 * 2**30}})
    assert dict(opts.engine_options) == {"kv_cache_memory_bytes": 8 * 2**30}
    for bad in (0, -1, 1.5, "8G", True):
        with pytest.raises(ValueError, match="kv_cache_memory_bytes must be a positive whole number"):
            parse_loop_options({"profile": "gpu", "engine_options": {"kv_cache_memory_bytes": bad}})


def test_batch_invariance_is_a_round_option_given_as_true_or_false() -> None:
    """batch_invariant changes the scores (by rounding), so it is frozen into the round like K or the dtype,
    never a worker's local option; anything but a JSON boolean is refused at start-up."""
    from annotate.loopconfig import LOCAL_ENGINE_OPTIONS

    assert "batch_invariant" not in LOCAL_ENGINE_OPTIONS
    opts = parse_loop_options({"profile": "gpu", "engine_options": {"batch_invariant": True}})
    assert dict(opts.engine_options) == {"batch_invariant": True}
    for bad in (1, "true", "yes"):
        with pytest.raises(ValueError, match="batch_invariant must be true or false"):
            parse_loop_options({"profile": "gpu", "engine_options": {"batch_invariant": bad}})


def test_block_size_is_a_round_option_and_the_prefix_hash_a_local_one() -> None:
    """The KV block size decides which prompt tokens come from the cache (scores may move by rounding): frozen
    into the round. The prefix-cache hash changes no score: a worker's own. Bad values fail at start-up."""
    from annotate.loopconfig import LOCAL_ENGINE_OPTIONS

    assert "block_size" not in LOCAL_ENGINE_OPTIONS and "prefix_caching_hash_algo" in LOCAL_ENGINE_OPTIONS
    opts = parse_loop_options(
        {"profile": "gpu", "engine_options": {"block_size": 64, "prefix_caching_hash_algo": "xxhash"}}
    )
    assert dict(opts.engine_options) == {"block_size": 64, "prefix_caching_hash_algo": "xxhash"}
    for bad in (0, 48, "64", 256):
        with pytest.raises(ValueError, match="block_size must be one of"):
            parse_loop_options({"profile": "gpu", "engine_options": {"block_size": bad}})
    with pytest.raises(ValueError, match="prefix_caching_hash_algo must be one of"):
        parse_loop_options({"profile": "gpu", "engine_options": {"prefix_caching_hash_algo": "md5"}})


def test_the_engine_core_process_is_a_workers_own_choice_given_as_true_or_false() -> None:
    from annotate.loopconfig import LOCAL_ENGINE_OPTIONS

    assert "engine_core_process" in LOCAL_ENGINE_OPTIONS  # where vLLM's core runs changes no score
    opts = parse_loop_options({"profile": "gpu", "engine_options": {"engine_core_process": True}})
    assert dict(opts.engine_options) == {"engine_core_process": True}
    with pytest.raises(ValueError, match="engine_core_process must be true or false"):
        parse_loop_options({"profile": "gpu", "engine_options": {"engine_core_process": "yes"}})


def test_parallel_start_is_a_workers_own_choice_given_as_true_or_false() -> None:
    from annotate.loopconfig import LOCAL_ENGINE_OPTIONS

    assert "parallel_start" in LOCAL_ENGINE_OPTIONS  # how engines take turns starting changes no score
    opts = parse_loop_options({"profile": "gpu", "engine_options": {"parallel_start": True}})
    assert dict(opts.engine_options) == {"parallel_start": True}
    with pytest.raises(ValueError, match="parallel_start must be true or false"):
        parse_loop_options({"profile": "gpu", "engine_options": {"parallel_start": 1}})


def test_the_label_logprob_width_is_a_workers_own_whole_number() -> None:
    """How many label ids a vLLM request asks for (one wide request or 128-label chunks) changes no score (the
    engine checks that on its first call): a worker's own option; bad values fail at start-up."""
    from annotate.loopconfig import LOCAL_ENGINE_OPTIONS

    assert "label_logprob_width" in LOCAL_ENGINE_OPTIONS
    opts = parse_loop_options({"profile": "gpu", "engine_options": {"label_logprob_width": 256}})
    assert dict(opts.engine_options) == {"label_logprob_width": 256}
    for bad in (0, 257, "256", 1.5, True):
        with pytest.raises(ValueError, match="label_logprob_width must be a whole number"):
            parse_loop_options({"profile": "gpu", "engine_options": {"label_logprob_width": bad}})
