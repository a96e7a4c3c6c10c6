"""vLLM ↔ hf parity on given LoRA adapters, what makes the two engines disagree, and the vLLM engine's
start (issue 35, points 3 and 4). Plain Python: no Django.

    python bench/engine_parity.py train --model DIR --data train.csv --out ADAPTERS  # the app's GPU profile
    python bench/engine_parity.py random --model DIR --out RANDOM [--top-layers 8]  # the old bench's
    python bench/engine_parity.py compare --model DIR --adapters ADAPTERS/prod_* --data test.csv --work WORK
    python bench/engine_parity.py report --work WORK --check adapters                # the tables again, from WORK

``compare`` scores every (variant, set) that WORK lacks, one worker process per engine kind (the vLLM
worker first, in a process that did no torch work: ../shared/device/README.md), then reports and exits
1 when the candidate (default: vllm) and the reference (default: hf) disagree beyond a bound on the
checked set (argmax agreement < --min-agreement, mean |Δp| > --max-mean-dp), 3 when scores are missing.

Variants name an engine and its options: ``hf`` and ``vllm`` are the app's engines with their default
options (what ``scoring.engines.get_engine(kind, model_dir)`` builds); tokens after a dash change one
option: ``fp32`` / ``bf16`` / ``fp16`` (dtype), ``full`` (hf: prefix_cache off, every prompt whole: no prefix KV,
no trunk cache), ``unpacked`` (hf: packed_scoring off), ``eager`` (vllm: enforce_eager), ``wide`` (vllm: every
label in one request, label_logprob_width 256, instead of 128-label chunks). ``@tag`` names a
second run of the same options (``vllm@warm``: another process, the same compile cache).

Sets are ``NAME=PROMPT:DIR,DIR,...`` (no DIR: the base model). PROMPT ``data``: the app's prompt for
the label names of --labels-from (default --data): its default instructions and item template, codes
from ``scoring.labels.suggest_codes``, no few-shot, scored on the first --n items of --data. PROMPT
``news``: the old scoring bench's prompt (bench/score_bench.py: an 866-token few-shot prefix, synthetic
news items, 4 codes), on its first --news-n items, the shape of its 88 % (1797/2048) agreement.

|Δp| of an item is the largest absolute difference of its label probabilities (L∞ over the labels, as
score_bench.parity): "mean |Δp|" is its mean over (adapter, item), "max |Δp|" its maximum. Near ties:
agreement restricted to items whose reference top-2 margin (p₁ − p₂; hf-fp32's when scored) exceeds
each of --margins.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

IMPORTED_AT = time.time()  # first thing the process records: the start of "process start → first shard"
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_MODEL = ROOT / "var" / "models" / "smollm2-135m-instruct"
EngineKind = Literal["hf", "vllm"]

# annotate/loopconfig.py's GPU_PROFILE, copied: that module imports Django at module level, this
# script must not (tests/unit/test_engine_parity.py fails when the two drift apart). The reasons
# for each value are given in full there; in short:
GPU_MAX_CONTEXT = 1024  # prompt tokens the GPU profile allows: TREC's prefix + longest item fit
GPU_TRAIN: dict[str, Any] = {
    "epochs": 3,  # passes over the labels; max_steps caps them at 500+ labels
    "min_steps": 48,  # every round takes the 48 steps a 500-label round takes (small rounds were starved)
    "max_steps": 48,  # bounds the round's latency as the labelled set grows
    "batch_size": 32,  # items a step on the GPU
    "lr": 1e-3,  # a few dozen steps at 2e-4 barely move a LoRA
    "dropout": 0.0,  # none: needed for the CUDA-graph step
    "top_layers": 8,  # LoRA in the last 8 of 30 layers: the trunk below runs once and stays cached
    "wide_top_layers": 16,  # > 50 labels adapt 16 layers (CLINC150); TREC's 6 keep 8
    "graph_step": "auto",  # each step replayed from one CUDA graph on a GPU
    "precision": "tf32",  # float32 weights, TensorFloat-32 matmuls on a GPU
    "micro_batch_tokens": 4096,  # a step's batch must fit whole for the graph
}
# annotate/models.py Project's defaults (no Django here): the prompt a new project starts with.
APP_INSTRUCTIONS = "Classify the text into exactly one label."
APP_ITEM_TEMPLATE = "Text: {text}\nLabel:"
# The old scoring bench's prompt (bench/score_bench.py, bench/HISTORY.md "Scoring engine"):
NEWS_PREFIX_TOKENS = 800  # few-shot examples are added until the prefix reaches this (866 tokens)
NEWS_SEED = 0  # score_bench's default seed: the same items and few-shot examples as that run
ADAPTER_ID_STRIDE = 100  # int ids: set index × 100 + k + 1 — unique per process, as vLLM's prefix cache needs
DEFAULT_VARIANTS = ("hf-fp32", "hf-bf16-full", "hf-bf16-unpacked", "hf-fp32-full")
# Pairs the report shows when both sides were scored (candidate, reference), after the checked pair.
REPORT_PAIRS = (
    ("vllm", "hf"),
    ("vllm", "hf-fp32"),
    ("hf", "hf-fp32"),
    ("vllm", "hf-bf16-full"),
    ("hf-bf16-full", "hf"),
    ("hf-bf16-unpacked", "hf"),
    ("hf-fp32-full", "hf-fp32"),
    ("vllm@warm", "vllm"),
    ("vllm@warm", "hf"),
)
EXIT_OK, EXIT_BOUND, EXIT_INCOMPLETE = 0, 1, 3


class ParityInputError(ValueError):
    """Scores, bounds, a variant or a set that cannot be compared as given."""


# -- variants and sets (pure) ---------------------------------------------------------------------

_OPTION_TOKENS: dict[str, tuple[str, Any, frozenset[str]]] = {
    # not vllm: its LoRA kernels take bfloat16 / float16 only (scoring/engines/vllm.py LORA_DTYPES)
    "fp32": ("dtype", "float32", frozenset({"hf"})),
    "bf16": ("dtype", "bfloat16", frozenset({"hf", "vllm"})),
    # float16: 3 more mantissa bits than bfloat16, and vLLM's LoRA kernels take it: CLINC150's near ties (session 26:
    # 6.8 % of items within 0.05 of a tie) are what bfloat16 rounding moved in both engines
    "fp16": ("dtype", "float16", frozenset({"hf", "vllm"})),
    "full": ("prefix_cache", False, frozenset({"hf"})),
    "unpacked": ("packed_scoring", False, frozenset({"hf"})),
    "eager": ("enforce_eager", True, frozenset({"vllm"})),
    # every label in one request (vLLM's 128-id cap raised; scoring/engines/vllm.py widen_logprob_token_ids) rather
    # than 128-label chunks: vllm-wide against vllm and hf says whether the wide requests score as the chunked do
    "wide": ("label_logprob_width", 256, frozenset({"vllm"})),
}
_NAME = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True)
class Variant:
    name: str
    kind: EngineKind
    options: tuple[tuple[str, Any], ...]  # engine options over the app's defaults


@dataclass(frozen=True)
class SetSpec:
    name: str
    prompt: Literal["data", "news"]
    adapters: tuple[str, ...]  # adapter directories; () scores the base model


def parse_variant(name: str) -> Variant:
    base, _, tag = name.partition("@")
    kind, *tokens = base.split("-")
    if kind not in ("hf", "vllm"):
        raise ParityInputError(f"variant {name!r}: the engine must be hf or vllm")
    if tag and not _NAME.fullmatch(tag):
        raise ParityInputError(f"variant {name!r}: the tag after @ takes letters, digits, _ and - only")
    options: dict[str, Any] = {}
    for token in tokens:
        if token not in _OPTION_TOKENS or kind not in _OPTION_TOKENS[token][2]:
            raise ParityInputError(f"variant {name!r}: {token!r} is no option of the {kind} engine")
        key, value, _ = _OPTION_TOKENS[token]
        if key in options:
            raise ParityInputError(f"variant {name!r}: {key} given twice")
        options[key] = value
    return Variant(name=name, kind=kind, options=tuple(sorted(options.items())))  # type: ignore[arg-type]


HOST_OPTIONS = frozenset({"gpu_memory_utilization", "cudagraph_mode", "cudagraph_capture_sizes"})


def vllm_host_options(raw: str) -> dict[str, Any]:
    """--vllm-options: where the engine runs (its GPU share, its CUDA graphs), never what it computes
    (dtype and the rest are the variant's): a comparison stays between the engines as the app runs them."""
    if not raw:
        return {}
    try:
        options = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ParityInputError(f"--vllm-options is not JSON: {exc}") from None
    if not isinstance(options, dict):
        raise ParityInputError("--vllm-options must be a JSON object")
    other = sorted(set(options) - HOST_OPTIONS)
    if other:
        raise ParityInputError(f"--vllm-options takes only {sorted(HOST_OPTIONS)}, not {other}")
    return options


def parse_set(spec: str) -> SetSpec:
    name, sep, rest = spec.partition("=")
    prompt, sep2, dirs = rest.partition(":")
    if not sep or not sep2 or not _NAME.fullmatch(name) or prompt not in ("data", "news"):
        raise ParityInputError(f"set {spec!r}: expected NAME=data:DIR,DIR... or NAME=news:DIR,... (no DIR: base model)")
    return SetSpec(name=name, prompt=prompt, adapters=tuple(d for d in dirs.split(",") if d))  # type: ignore[arg-type]


def adapter_refs(set_index: int, spec: SetSpec) -> list[Any]:
    """AdapterRefs of a set with ids unique across the sets of one process: vLLM keys its LoRA and
    prefix caches by id, so two sets' adapters under one id would reuse the first's weights."""
    from scoring.engines import AdapterRef

    if len(spec.adapters) >= ADAPTER_ID_STRIDE:
        raise ParityInputError(f"set {spec.name}: at most {ADAPTER_ID_STRIDE - 1} adapters")
    return [
        AdapterRef(f"{spec.name}-{k}", set_index * ADAPTER_ID_STRIDE + k + 1, str(Path(path).resolve()))
        for k, path in enumerate(spec.adapters)
    ]


def score_path(work: Path, variant: str, set_name: str) -> Path:
    return work / "scores" / f"{variant}__{set_name}.npz"


# -- comparison (pure) ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Bounds:
    min_agreement: float = 0.99  # issue 35: argmax agreement ≥ 99 %
    max_mean_dp: float = 0.01  # issue 35: mean |Δp| ≤ 0.01

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_agreement <= 1.0 or not self.max_mean_dp >= 0.0:
            raise ParityInputError(f"bounds out of range: {self}")


def top2_margin(p: np.ndarray) -> np.ndarray:
    """p₁ − p₂ of each distribution [..., C] (1 for a single label)."""
    p = np.asarray(p, dtype=np.float64)
    if p.shape[-1] < 2:
        return np.ones(p.shape[:-1])
    top = np.sort(p, axis=-1)
    return top[..., -1] - top[..., -2]


def _summary(agree: np.ndarray, dp: np.ndarray, dmass: np.ndarray) -> dict[str, Any]:
    n = int(agree.size)
    return {
        "n": n,
        "agree": int(agree.sum()),
        "agreement": float(agree.mean()) if n else float("nan"),
        "mean_dp": float(dp.mean()) if n else float("nan"),
        "max_dp": float(dp.max()) if n else float("nan"),
        "mean_dmass": float(dmass.mean()) if n else float("nan"),
        "max_dmass": float(dmass.max()) if n else float("nan"),
    }


def pair_metrics(
    cand_p: np.ndarray,
    ref_p: np.ndarray,
    cand_mass: np.ndarray,
    ref_mass: np.ndarray,
    *,
    margin: np.ndarray | None = None,
    thresholds: Sequence[float] = (0.05, 0.1),
) -> dict[str, Any]:
    """Agreement and |Δp| of two engines' label distributions [K, N, C] (and masses [K, N]), overall,
    per adapter, and on the items whose ``margin`` [K, N] (default: the reference's top-2 margin)
    exceeds each threshold."""
    cand, ref = np.asarray(cand_p, dtype=np.float64), np.asarray(ref_p, dtype=np.float64)
    if cand.ndim != 3 or cand.shape != ref.shape or cand.shape[1] == 0:
        raise ParityInputError(f"scores must both be [K, N>0, C]: {cand.shape} vs {ref.shape}")
    cm, rm = np.asarray(cand_mass, dtype=np.float64), np.asarray(ref_mass, dtype=np.float64)
    if cm.shape != cand.shape[:2] or rm.shape != cand.shape[:2]:
        raise ParityInputError(f"masses must be [K, N] = {cand.shape[:2]}: {cm.shape}, {rm.shape}")
    if not (np.isfinite(cand).all() and np.isfinite(ref).all()):
        raise ParityInputError("scores hold NaN or inf")
    ref_margin = top2_margin(ref) if margin is None else np.broadcast_to(np.asarray(margin, float), cand.shape[:2])
    if any(t < 0 for t in thresholds):
        raise ParityInputError(f"margins must be >= 0: {list(thresholds)}")
    agree = cand.argmax(-1) == ref.argmax(-1)
    dp = np.abs(cand - ref).max(-1)
    dmass = np.abs(cm - rm)
    near = []
    for t in thresholds:
        above = ref_margin > t
        near.append(
            {
                "threshold": float(t),
                "share_at_or_below": float(1 - above.mean()),
                "n_above": int(above.sum()),
                "agreement_above": float(agree[above].mean()) if above.any() else float("nan"),
                "disagree_above": int((~agree & above).sum()),
            }
        )
    off = ~agree
    return {
        "overall": _summary(agree, dp, dmass),
        "per_adapter": [_summary(agree[k], dp[k], dmass[k]) for k in range(cand.shape[0])],
        "near_ties": near,
        "disagreement_margin_max": float(ref_margin[off].max()) if off.any() else None,
        "disagreement_margin_median": float(np.median(ref_margin[off])) if off.any() else None,
    }


def bound_failures(overall: dict[str, Any], bounds: Bounds) -> list[str]:
    """What fails the bounds (NaN fails too: no measurement is no pass)."""
    failures = []
    if not overall["agreement"] >= bounds.min_agreement:
        failures.append(f"argmax agreement {overall['agreement']:.4f} < {bounds.min_agreement}")
    if not overall["mean_dp"] <= bounds.max_mean_dp:
        failures.append(f"mean |dp| {overall['mean_dp']:.4f} > {bounds.max_mean_dp}")
    return failures


def exit_status(failures: Sequence[str], missing: Sequence[str]) -> int:
    if failures:
        return EXIT_BOUND
    return EXIT_INCOMPLETE if missing else EXIT_OK


def accuracy(p: np.ndarray, y: np.ndarray) -> dict[str, Any] | None:
    """Accuracy of the ensemble mean and of each adapter on the items with a gold label (y >= 0)."""
    known = np.asarray(y) >= 0
    if not known.any():
        return None
    y_known = np.asarray(y)[known]
    per = [float((p[k][known].argmax(-1) == y_known).mean()) for k in range(p.shape[0])]
    return {"ensemble": float((p.mean(0)[known].argmax(-1) == y_known).mean()), "per_adapter": per}


# -- reading data and building prompts ------------------------------------------------------------


def read_rows(path: Path) -> list[tuple[str, str]]:
    with Path(path).open(newline="", encoding="utf-8") as f:
        return [(row["text"], row["label"]) for row in csv.DictReader(f)]


def label_names(path: Path) -> list[str]:
    """The label names of a text,label CSV, sorted (the simulation harness's order)."""
    return sorted({label for _, label in read_rows(path)})


def data_prompt(model_dir: str, names: Sequence[str]) -> Any:
    """The prompt a new project gets for these labels: Project's default instructions and item
    template, no descriptions, no few-shot, codes from suggest_codes (as the setup form proposes
    and annotate/simulation/harness.py uses)."""
    from transformers import AutoTokenizer

    from scoring.labels import suggest_codes
    from scoring.prompts import LabelSpec, PromptSpec

    codes = suggest_codes(AutoTokenizer.from_pretrained(model_dir), list(names))
    labels = tuple(LabelSpec(name, "", code) for name, code in zip(names, codes, strict=True))
    return PromptSpec(instructions=APP_INSTRUCTIONS, labels=labels, item_template=APP_ITEM_TEMPLATE)


def data_renderer(model_dir: str, names: Sequence[str]) -> Any:
    from scoring.pipeline import make_renderer

    return make_renderer(model_dir, data_prompt(model_dir, names), GPU_MAX_CONTEXT)


def _score_bench() -> Any:
    bench = str(ROOT / "bench")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    import score_bench

    return score_bench


def news_cfg(model_dir: str, n: int) -> dict[str, Any]:
    return {"model_dir": model_dir, "short": False, "seed": NEWS_SEED, "prefix_tokens": NEWS_PREFIX_TOKENS, "n": n}


class SetBuilder:
    """(renderer, texts, gold label indices) of each set; renderers built once per prompt."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self._renderers: dict[str, Any] = {}

    def renderer(self, prompt: str) -> Any:
        if prompt not in self._renderers:
            model = str(self.args.model)
            if prompt == "data":
                self._renderers[prompt] = data_renderer(model, label_names(self.args.labels_from or self.args.data))
            else:
                self._renderers[prompt] = _score_bench().build_renderer(news_cfg(model, self.args.news_n))
        return self._renderers[prompt]

    def items(self, prompt: str) -> tuple[list[str], np.ndarray]:
        if prompt == "news":
            return _score_bench().texts_for(news_cfg(str(self.args.model), self.args.news_n)), np.full(
                self.args.news_n, -1
            )
        names = label_names(self.args.labels_from or self.args.data)
        rows = read_rows(self.args.data)[: self.args.n or None]
        index = {name: i for i, name in enumerate(names)}
        return [t for t, _ in rows], np.array([index.get(label, -1) for _, label in rows])


# -- subprocesses ---------------------------------------------------------------------------------


def log(work: Path | None, message: str) -> None:
    line = f"{time.strftime('%H:%M:%S')} [{os.getpid()}] {message}"
    print(line, flush=True)
    if work is not None:
        work.mkdir(parents=True, exist_ok=True)
        with (work / "progress.log").open("a") as fh:
            fh.write(line + "\n")


def run_worker(argv: list[str], *, timeout: float, log_path: Path, work: Path) -> int:
    """One worker in its own process group (vLLM's engine core is a child process: on a timeout the
    whole group goes, or it would keep the GPU's memory). Its output goes to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), *argv, "--launched-at", repr(time.time())]
    log(work, f"worker: {' '.join(argv[:3])} … (timeout {timeout:.0f}s, log {log_path.name})")
    with log_path.open("ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            log(work, f"worker TIMED OUT after {timeout:.0f}s: killing its process group")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = 124
    if code != 0:
        tail = log_path.read_text(errors="replace").splitlines()[-25:]
        log(work, f"worker exit {code}; last lines of {log_path.name}:\n" + "\n".join(tail))
    return code


def dir_stats(path: str | None) -> dict[str, Any] | None:
    if not path or not Path(path).is_dir():
        return {"path": path, "files": 0, "bytes": 0} if path else None
    files = [f for f in Path(path).rglob("*") if f.is_file()]
    return {"path": path, "files": len(files), "bytes": sum(f.stat().st_size for f in files)}


# -- score (the worker) ---------------------------------------------------------------------------


def _first_shard(engine: Any, builder: SetBuilder, args: argparse.Namespace, sets: list[SetSpec]) -> dict[str, Any]:
    """Score the first shard as a GPU worker would: --first-shard-items texts of --shard-data (its
    last rows: the pool beyond the labelled items) with the shard set's adapters."""
    index = next((i for i, s in enumerate(sets) if s.name == args.shard_set), 0) if args.shard_set else 0
    spec = sets[index]
    t0 = time.time()
    renderer = builder.renderer(spec.prompt)
    texts = [t for t, _ in read_rows(args.shard_data or args.data)][-args.first_shard_items :]
    result = engine.score(renderer, texts, adapter_refs(index, spec))
    return {
        "shard_set": spec.name,
        "shard_items": len(texts),
        "adapters": len(spec.adapters),
        "requests": len(texts) * max(1, len(spec.adapters)),
        "prompt_tokens": int(result.tokens),
        "first_shard_s": time.time() - t0,
        "timings": getattr(engine, "last_timings", {}),
    }


def record_error(work: Path, variant: str, what: str, exc: BaseException) -> None:
    import traceback

    log(work, f"{variant} {what} FAILED: {exc!r}\n{traceback.format_exc()}")
    with (work / "errors.jsonl").open("a") as fh:
        fh.write(json.dumps({"variant": variant, "what": what, "error": repr(exc)[:2000]}) + "\n")


def score_variant(variant: Variant, sets: list[SetSpec], builder: SetBuilder, args: argparse.Namespace) -> None:
    from scoring.engines import get_engine

    work = Path(args.work)
    launched = float(args.launched_at) if args.launched_at else IMPORTED_AT
    cache_root = os.environ.get("VLLM_CACHE_ROOT") if variant.kind == "vllm" else None
    cache_before = dir_stats(cache_root)
    t0 = time.time()
    host = vllm_host_options(args.vllm_options) if variant.kind == "vllm" else {}
    # vLLM first: no torch work before
    engine = get_engine(variant.kind, str(args.model), **{**host, **dict(variant.options)})
    t1 = time.time()
    log(work, f"{variant.name}: engine ready in {t1 - t0:.1f}s ({t1 - launched:.1f}s after launch)")
    shard: dict[str, Any] | None = None
    if args.first_shard_items:
        try:
            shard = _first_shard(engine, builder, args, sets)
        except Exception as exc:  # recorded; the sets are still scored (each may fail on its own)
            record_error(work, variant.name, "first shard", exc)
    if shard is not None:
        timing = {
            "variant": variant.name,
            "options": dict(variant.options),
            "launched_at": launched,
            "imported_at": IMPORTED_AT,
            "launch_to_engine_call_s": t0 - launched,
            "engine_start_s": t1 - t0,
            **shard,
            "launch_to_first_shard_s": time.time() - launched,
            "cache_before": cache_before,
            "cache_after": dir_stats(cache_root),
            "commit": os.environ.get("PARITY_COMMIT", ""),
        }
        (work / f"start-{variant.name}.json").write_text(json.dumps(timing, indent=1))
        log(work, f"{variant.name}: first shard scored {timing['launch_to_first_shard_s']:.1f}s after launch")
    for index, spec in enumerate(sets):
        path = score_path(work, variant.name, spec.name)
        if path.is_file() and not args.force:
            continue
        try:
            renderer = builder.renderer(spec.prompt)
            texts, y = builder.items(spec.prompt)
            t_set = time.time()
            result = engine.score(renderer, texts, adapter_refs(index, spec))
        except Exception as exc:  # one set's failure (an adapter vLLM refuses, say) must not hide the others
            record_error(work, variant.name, spec.name, exc)
            continue
        meta = {
            "variant": variant.name,
            "kind": variant.kind,
            "options": dict(variant.options),
            "host_options": host,
            "set": asdict(spec),
            "n_items": len(texts),
            "prefix_tokens": len(renderer.prefix_ids),
            "prompt_hash": renderer.prompt_hash,
            "codes": [label.code for label in renderer.spec.labels],
            "labels": [label.name for label in renderer.spec.labels],
            "score_s": time.time() - t_set,
            "timings": getattr(engine, "last_timings", {}),
            "commit": os.environ.get("PARITY_COMMIT", ""),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, p=result.p, mass=result.mass, y=y, meta=np.array(json.dumps(meta)))
        log(work, f"{variant.name} {spec.name}: {result.p.shape} in {meta['score_s']:.1f}s")


def cmd_score(args: argparse.Namespace) -> int:
    variants = [parse_variant(v) for v in args.variant]
    if len({v.kind for v in variants}) != 1 or (variants[0].kind == "vllm" and len(variants) > 1):
        raise ParityInputError("one worker runs hf variants, or exactly one vllm variant")
    sets = [parse_set(s) for s in args.set]
    _check_adapter_dirs(sets)
    builder = SetBuilder(args)
    for variant in variants:
        score_variant(variant, sets, builder, args)
    return 0


def _check_adapter_dirs(sets: Sequence[SetSpec]) -> None:
    for spec in sets:
        for path in spec.adapters:
            if not (Path(path) / "adapter_config.json").is_file():
                raise ParityInputError(f"set {spec.name}: {path} holds no adapter_config.json")


# -- report ---------------------------------------------------------------------------------------


def load_scores(work: Path) -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for path in sorted((work / "scores").glob("*.npz")):
        with np.load(path) as data:
            meta = json.loads(str(data["meta"]))
            out[(meta["variant"], meta["set"]["name"])] = {
                "p": data["p"],
                "mass": data["mass"],
                "y": data["y"],
                "meta": meta,
            }
    return out


def build_report(
    scores: dict[tuple[str, str], dict[str, Any]],
    *,
    candidate: str,
    reference: str,
    checked: Sequence[str],
    bounds: Bounds,
    thresholds: Sequence[float],
    margin_from: str = "hf-fp32",
) -> dict[str, Any]:
    """Every listed pair scored on a set, the checked pair's bounds, and each variant's accuracy."""
    sets = sorted({s for _, s in scores})
    pairs = [(candidate, reference), *[p for p in REPORT_PAIRS if p != (candidate, reference)]]
    rows, failures, missing = [], [], []
    for set_name in sets:
        for cand, ref in pairs:
            a, b = scores.get((cand, set_name)), scores.get((ref, set_name))
            if a is None or b is None:
                if set_name in checked and (cand, ref) == (candidate, reference):
                    missing.append(f"{set_name}: no {cand if a is None else ref} scores")
                continue
            if a["meta"]["codes"] != b["meta"]["codes"] or a["meta"]["n_items"] != b["meta"]["n_items"]:
                raise ParityInputError(f"{set_name}: {cand} and {ref} scored different prompts or items")
            source = scores.get((margin_from, set_name), b)
            metrics = pair_metrics(
                a["p"], b["p"], a["mass"], b["mass"], margin=top2_margin(source["p"]), thresholds=thresholds
            )
            row = {"set": set_name, "candidate": cand, "reference": ref, "margin_from": source["meta"]["variant"]}
            row.update(metrics)
            if set_name in checked and (cand, ref) == (candidate, reference):
                row["failures"] = bound_failures(metrics["overall"], bounds)
                failures += [f"{set_name}: {f}" for f in row["failures"]]
            rows.append(row)
    missing += [f"{s}: never scored" for s in checked if s not in sets]
    acc = {f"{v}/{s}": accuracy(d["p"], d["y"]) for (v, s), d in sorted(scores.items())}
    return {
        "candidate": candidate,
        "reference": reference,
        "checked": list(checked),
        "bounds": asdict(bounds),
        "margins": list(thresholds),
        "pairs": rows,
        "accuracy": {k: v for k, v in acc.items() if v is not None},
        "failures": failures,
        "missing": missing,
        "sets": {s: next(d["meta"] for (_, s2), d in scores.items() if s2 == s) for s in sets},
        "status": exit_status(failures, missing),
    }


def _num(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def _pct(x: float | None) -> str:
    return "–" if x is None or x != x else f"{100 * x:.1f} %"


def markdown(report: dict[str, Any], starts: Sequence[dict[str, Any]]) -> str:
    t1, t2 = report["margins"][:2] if len(report["margins"]) >= 2 else (report["margins"] * 2)[:2]
    lines = [
        f"Checked: {report['candidate']} vs {report['reference']} on {', '.join(report['checked']) or '–'}; bounds:"
        f" agreement ≥ {report['bounds']['min_agreement']}, mean |Δp| ≤ {report['bounds']['max_mean_dp']}."
        f" Status {report['status']} ({'pass' if report['status'] == 0 else 'FAIL'}):"
        f" {'; '.join(report['failures'] + report['missing']) or 'every bound met'}",
        "",
        f"| set | candidate vs reference | agreement | mean / max \\|Δp\\| | mean \\|Δmass\\| | agreement,"
        f" margin > {t1} | margin > {t2} | share margin ≤ {t1} | largest margin of a disagreement |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in report["pairs"]:
        o, near = row["overall"], row["near_ties"]
        lines.append(
            f"| {row['set']} | {row['candidate']} vs {row['reference']}"
            f" | {o['agree']}/{o['n']} ({_pct(o['agreement'])})"
            f" | {o['mean_dp']:.4f} / {o['max_dp']:.4f} | {o['mean_dmass']:.4f} | {_pct(near[0]['agreement_above'])}"
            f" | {_pct(near[-1]['agreement_above'] if len(near) > 1 else None)} | {_pct(near[0]['share_at_or_below'])}"
            f" | {_num(row['disagreement_margin_max'])} |"
        )
    lines += ["", "Candidate vs reference, per adapter:", "", "| set | adapter | agreement | mean / max \\|Δp\\| |"]
    lines.append("| --- | ---: | ---: | ---: |")
    for row in report["pairs"]:
        if (row["candidate"], row["reference"]) == (report["candidate"], report["reference"]):
            for k, a in enumerate(row["per_adapter"]):
                lines.append(f"| {row['set']} | {k} | {a['agree']}/{a['n']} | {a['mean_dp']:.4f} / {a['max_dp']:.4f} |")
    if report["accuracy"]:
        lines += ["", "| scores | accuracy of the ensemble mean | per adapter |", "| --- | ---: | --- |"]
        for key, acc in report["accuracy"].items():
            lines.append(f"| {key} | {_pct(acc['ensemble'])} | {', '.join(_pct(a) for a in acc['per_adapter'])} |")
    if starts:
        lines += [
            "",
            "| engine start | compile cache before (files) | launch → engine ready | engine start | first shard"
            " | launch → first shard scored |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for s in starts:
            before = (s.get("cache_before") or {}).get("files", "–")
            lines.append(
                f"| {s['variant']} | {before} | {s['launch_to_engine_call_s'] + s['engine_start_s']:.1f} s"
                f" | {s['engine_start_s']:.1f} s | {s['first_shard_s']:.1f} s ({s['requests']} requests)"
                f" | **{s['launch_to_first_shard_s']:.1f} s** |"
            )
    return "\n".join(lines) + "\n"


def header(args: argparse.Namespace) -> dict[str, Any]:
    commit = os.environ.get("PARITY_COMMIT", "")
    if not commit:
        with contextlib.suppress(OSError, subprocess.CalledProcessError):
            commit = subprocess.check_output(["git", "-C", str(ROOT), "rev-parse", "HEAD"], text=True).strip()
    return {
        "commit": commit,
        "script_sha256": hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
        "argv": sys.argv[1:],
        "options": {k: v for k, v in vars(args).items() if k != "func"},
        "written": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def write_report(args: argparse.Namespace, checked: Sequence[str]) -> int:
    work = Path(args.work)
    out = Path(args.out or work)
    report = build_report(
        load_scores(work),
        candidate=args.candidate,
        reference=args.reference,
        checked=checked,
        bounds=Bounds(args.min_agreement, args.max_mean_dp),
        thresholds=[float(x) for x in args.margins.split(",")],
    )
    starts = [json.loads(p.read_text()) for p in sorted(work.glob("start-*.json"))]
    report["starts"] = starts
    errors = work / "errors.jsonl"
    report["errors"] = [json.loads(x) for x in errors.read_text().splitlines()] if errors.is_file() else []
    report["header"] = header(args)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    text = markdown(report, starts)
    if report["errors"]:
        text += "\nErrors:\n\n" + "\n".join(
            f"- {e['variant']} {e['what']}: {e['error'][:300]}" for e in report["errors"]
        )
        text += "\n"
    (out / "report.md").write_text(text)
    print(text, flush=True)
    return int(report["status"])


def cmd_report(args: argparse.Namespace) -> int:
    return write_report(args, args.check or [])


# -- compare --------------------------------------------------------------------------------------


def _worker_args(args: argparse.Namespace, variants: Sequence[str], sets: Sequence[str], shard: bool) -> list[str]:
    argv = ["score", "--model", str(args.model), "--data", str(args.data), "--work", str(args.work)]
    argv += ["--n", str(args.n), "--news-n", str(args.news_n)]
    if args.labels_from:
        argv += ["--labels-from", str(args.labels_from)]
    if args.vllm_options:
        argv += ["--vllm-options", args.vllm_options]
    for v in variants:
        argv += ["--variant", v]
    for s in sets:
        argv += ["--set", s]
    if shard and args.first_shard_items:
        argv += ["--first-shard-items", str(args.first_shard_items), "--shard-set", args.name]
        if args.shard_data:
            argv += ["--shard-data", str(args.shard_data)]
    return argv


def cmd_compare(args: argparse.Namespace) -> int:
    work = Path(args.work)
    checked = SetSpec(args.name, "data", tuple(str(a) for a in args.adapters))
    extra = [parse_set(s) for s in args.set]
    sets = [checked, *extra]
    _check_adapter_dirs(sets)
    vllm_host_options(args.vllm_options)  # a bad one fails here, not in each worker
    specs = [f"{s.name}={s.prompt}:{','.join(s.adapters)}" for s in sets]
    wanted = list(dict.fromkeys([args.candidate, args.reference, *[v for v in args.variants.split(",") if v]]))
    variants = [parse_variant(v) for v in wanted]
    deadline = float(args.deadline) if args.deadline else None
    log(work, f"compare: {args.candidate} vs {args.reference}; sets {[s.name for s in sets]}; variants {wanted}")
    # One process per vllm variant, one for every hf variant together (each a fresh process: a vLLM
    # engine start hangs after torch CPU work in the same process). The first vllm variant, then the hf
    # group, then the other vllm variants: under a deadline the checked pair is scored first (session 19
    # lost its parity run by starting vllm-fp32 before hf, which then had no time left).
    vllm = [[v.name] for v in variants if v.kind == "vllm"]
    groups = vllm[:1] + [[v.name for v in variants if v.kind == "hf"]] + vllm[1:]
    for group in groups:
        kind = parse_variant(group[0]).kind if group else None
        if not group or (args.only and kind != args.only):
            continue
        todo = [v for v in group if any(not score_path(work, v, s.name).is_file() for s in sets)]
        shard = kind == "vllm" and bool(args.first_shard_items) and not (work / f"start-{group[0]}.json").is_file()
        if not todo and not shard:
            log(work, f"{', '.join(group)}: every set already scored")
            continue
        left = args.timeout if deadline is None else min(args.timeout, deadline - time.time() - 15)
        if left < 30:
            log(work, f"{', '.join(group)}: skipped, {left:.0f}s left before the deadline")
            continue
        run_worker(
            _worker_args(args, group, specs, shard), timeout=left, log_path=work / "logs" / f"{group[0]}.log", work=work
        )
    return write_report(args, [args.name])


# -- train and random adapters --------------------------------------------------------------------


def loop_config(model_dir: str, prompt: Any, n_labels: int, max_steps: int | None) -> Any:
    """The LoopConfig a GPU project gets (annotate.loopconfig.loop_config over GPU_PROFILE), as far as
    train_member reads it: the train options; selection and rescoring hold Project's defaults and
    are not read by training."""
    from dataclasses import replace

    from acquisition.batch import SelectionConfig
    from scoring.rescoring import RescoringConfig
    from training.ensemble import LoopConfig
    from training.lora import TrainConfig

    train = replace(TrainConfig(), **GPU_TRAIN)
    if max_steps is not None:  # the CPU test's shortcut; the GPU run keeps the profile's 48
        train = replace(train, max_steps=max_steps, min_steps=min(train.min_steps, max_steps))
    return LoopConfig(
        model_dir=model_dir,
        engine="vllm",
        prompt=prompt,
        max_context=GPU_MAX_CONTEXT,
        k=4,
        scratch_every=0,
        selection=SelectionConfig(batch_size=50, oversample=4.0, random_share=0.15, mass_threshold=0.05),
        rescoring=RescoringConfig(candidate_sample=20000, carry_top_share=0.1, first_pass_share=1.0),
        train=train.for_labels(n_labels),
    )


def cmd_train(args: argparse.Namespace) -> int:
    """K members trained from scratch on the same N labels, each with its own seed (as a round's
    prod members are: training.ensemble.member_seed), published at OUT/prod_<k>."""
    from scoring.pipeline import make_renderer
    from training.ensemble import member_seed, train_member

    out = Path(args.out)
    rows = read_rows(args.data)
    names = label_names(args.data)
    index = {name: i for i, name in enumerate(names)}
    picked = [rows[i] for i in np.random.default_rng(args.seed).permutation(len(rows))[: args.n]]
    prompt = data_prompt(str(args.model), names)
    config = loop_config(str(args.model), prompt, len(names), args.max_steps)
    renderer = make_renderer(str(args.model), prompt, config.max_context)
    members = []
    for k in range(args.k):
        trained = train_member(
            config=config,
            renderer=renderer,
            texts=[t for t, _ in picked],
            label_indices=[index[label] for _, label in picked],
            out_dir=out / f"prod_{k}",
            round_seed=args.seed,
            arm="prod",
            k=k,
        )
        members.append({**asdict(trained), "seed": member_seed(args.seed, "prod", k)})
        print(f"member {k}: {trained.steps} steps in {trained.seconds:.1f}s, loss {trained.final_loss:.4f}", flush=True)
    summary = {
        "data": str(args.data),
        "n": len(picked),
        "seed": args.seed,
        "labels": names,
        "codes": [label.code for label in prompt.labels],
        "prompt_hash": renderer.prompt_hash,
        "prefix_tokens": len(renderer.prefix_ids),
        "train": asdict(config.train),
        "members": members,
    }
    (out / "train.json").write_text(json.dumps(summary, indent=1, default=str))
    return 0


def cmd_random(args: argparse.Namespace) -> int:
    """K random rank-8 adapters as bench/score_bench.py makes them (PEFT's init, then B ~ N(0, 0.02)
    so that they differ from the base model), on every linear layer, or, with --top-layers, on the
    top layers the way training.lora names them (the layer's Linear modules + layers_to_transform)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    out = Path(args.out)
    for k in range(args.k):
        torch.manual_seed(args.seed + k)
        model = AutoModelForCausalLM.from_pretrained(str(args.model), dtype=torch.float32)
        layers = model.get_decoder().layers
        targets: Any = "all-linear"
        extra: dict[str, Any] = {}
        if args.top_layers:
            names = {n.rsplit(".", 1)[-1] for n, m in layers[0].named_modules() if isinstance(m, torch.nn.Linear)}
            targets = sorted(names)
            extra = {"layers_to_transform": list(range(len(layers) - args.top_layers, len(layers)))}
        # rank 8, alpha 16: the training defaults (TrainConfig.rank / alpha), as the old bench
        lora = LoraConfig(r=8, lora_alpha=16, target_modules=targets, task_type="CAUSAL_LM", **extra)
        peft_model = get_peft_model(model, lora)
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:  # PEFT starts B at zero (a no-op adapter); random B makes them differ
                torch.nn.init.normal_(param, std=0.02)
        peft_model.save_pretrained(str(out / f"random_{k}"))
    print(f"{args.k} random adapters in {out} (top_layers {args.top_layers or 'all'})", flush=True)
    return 0


# -- command line ---------------------------------------------------------------------------------


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="the prepared HF model directory")
    p.add_argument("--work", type=Path, default=Path("parity-work"), help="scores, logs, start figures")
    p.add_argument("--data", type=Path, help="text,label CSV scored by the 'data' sets (the test split)")
    p.add_argument("--labels-from", type=Path, help="the CSV whose label names make the prompt (default --data)")
    p.add_argument("--n", type=int, default=0, help="items of --data scored (0: all)")
    p.add_argument("--news-n", type=int, default=512, help="items of the 'news' sets (the old bench compared 512)")
    p.add_argument("--launched-at", help=argparse.SUPPRESS)
    p.add_argument(
        "--vllm-options",
        default="",
        help="JSON: the vllm variants' host options (gpu_memory_utilization, cudagraph_mode, "
        "cudagraph_capture_sizes), e.g. beside running gpu workers",
    )


def _report_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--candidate", default="vllm")
    p.add_argument("--reference", default="hf")
    p.add_argument("--min-agreement", type=float, default=Bounds.min_agreement)
    p.add_argument("--max-mean-dp", type=float, default=Bounds.max_mean_dp)
    p.add_argument("--margins", default="0.05,0.1", help="reference top-2 margins of the near-tie columns")
    p.add_argument("--out", type=Path, help="report.json and report.md go here (default --work)")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="K adapters as the app's GPU profile trains them")
    train.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    train.add_argument("--data", type=Path, required=True, help="text,label CSV (TREC's train split)")
    train.add_argument("--n", type=int, default=500, help="labelled items (a 500-label round)")
    train.add_argument("--k", type=int, default=4, help="ensemble members (Project.ensemble_k's default)")
    train.add_argument("--seed", type=int, default=0, help="item sample and round seed")
    train.add_argument("--max-steps", type=int, help=argparse.SUPPRESS)  # tests only: fewer steps than the profile
    train.add_argument("--out", type=Path, required=True)
    train.set_defaults(func=cmd_train)

    rand = sub.add_parser("random", help="K random rank-8 adapters (the old bench's)")
    rand.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    rand.add_argument("--k", type=int, default=4)
    rand.add_argument("--seed", type=int, default=0, help="adapter k uses seed + k (score_bench's make_adapters)")
    rand.add_argument("--top-layers", type=int, default=0, help="adapt only the last N layers (0: all)")
    rand.add_argument("--out", type=Path, required=True)
    rand.set_defaults(func=cmd_random)

    score = sub.add_parser("score", help="(worker) score sets with engine variants into WORK/scores")
    _common(score)
    score.add_argument("--variant", action="append", required=True)
    score.add_argument("--set", action="append", required=True, help="NAME=data|news:DIR,DIR,...")
    score.add_argument("--first-shard-items", type=int, default=0, help="time start → this many items scored")
    score.add_argument("--shard-set", help="the set whose prompt and adapters score the first shard")
    score.add_argument("--shard-data", type=Path, help="CSV of the shard's texts (its last rows; default --data)")
    score.add_argument("--force", action="store_true", help="score again what WORK already holds")
    score.set_defaults(func=cmd_score)

    compare = sub.add_parser("compare", help="score what WORK lacks with both engines, report, check the bounds")
    _common(compare)
    _report_options(compare)
    compare.add_argument("--adapters", nargs="+", required=True, help="adapter directories (the checked set)")
    compare.add_argument("--name", default="adapters", help="the checked set's name")
    compare.add_argument("--set", action="append", default=[], help="diagnostic sets: NAME=data|news:DIR,...")
    compare.add_argument(
        "--variants", default="", help=f"more variants, comma list (e.g. {','.join(DEFAULT_VARIANTS)})"
    )
    compare.add_argument("--only", choices=["hf", "vllm"], help="score only this engine's variants now")
    compare.add_argument("--first-shard-items", type=int, default=0, help="vLLM worker: start → first shard figures")
    compare.add_argument("--shard-data", type=Path, help="CSV of the first shard's texts (default --data)")
    compare.add_argument("--timeout", type=float, default=600, help="seconds per worker")
    compare.add_argument("--deadline", help="epoch seconds no worker may run past")
    compare.set_defaults(func=cmd_compare)

    report = sub.add_parser("report", help="the tables of what WORK holds")
    report.add_argument("--work", type=Path, default=Path("parity-work"))
    report.add_argument("--check", action="append", help="sets whose candidate/reference pair must meet the bounds")
    _report_options(report)
    report.set_defaults(func=cmd_report)

    args = ap.parse_args(argv)
    if args.command in ("score", "compare") and args.data is None:
        ap.error("--data is required")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return int(args.func(args))
    except ParityInputError as exc:
        print(f"engine_parity: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    # spawn: vLLM's engine start hangs after torch CPU work in a forked parent (device README).
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    sys.exit(main())
