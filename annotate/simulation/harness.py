"""The simulation harness: does active selection beat random, by how much, at what cost.

One *job* is one (strategy, seed): a fresh project holding the data set's pool and its fixed test
set, then R rounds of the production loop through the production services (round_request_start
with the job's strategy → round_run_sync, step by step → the simulated annotator labels the batch
through next_item_for / label_submit with the CSV's gold label → round_run_sync until done). After
each round one JSON record is appended to OUT/records.jsonl under a file lock, so parallel jobs
share the file and a killed run keeps every finished round.

The ``full-data`` job is the ceiling of the curves: K adapters trained once on the whole train split
with the code the training service calls (training.ensemble.train_member), evaluated on the same test
set with the code the evaluation service calls (training.ensemble.evaluate_adapters).

Round 1 is the seed set (``seed_labels`` items, the cold-start round): a uniform draw, identical for
every strategy of a seed under the default ``cold_mode`` "random", and always for the random strategy
(annotate.services.planning.cold_mode); with ``cold_mode`` "typical" or "diversity" in the loop options
the other strategies pick their own seed set, so their curves differ from random's from round 1 on
(still paired by seed: the same pool, test set and seed). The ``random-coldstart`` arm takes active's
seed set (its cold rounds are requested as active's) and then random batches: the second random
baseline, against which active's gain is the selection's own. Later rounds add ``batch`` items picked by
the strategy. A job stops when a round finds the pool fully labelled (that round trains the final
model from scratch and is recorded with ``pool_exhausted``). The test split (test.csv) is imported
as test items whose gold labels are their final labels: never selected (eligible_pool excludes test
items), never trained on (labeled_items too).
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import hashlib
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from acquisition.strategies import STRATEGIES  # the production selection and the three ablations
from annotate.loopconfig import loop_config, round_config
from annotate.models import BatchItem, Item, Project, Round
from annotate.services.imports import import_items
from annotate.services.labeling import label_submit, next_item_for
from annotate.services.projects import LabelInput, project_create
from training.ensemble import LoopConfig

FULL_DATA = "full-data"
# The second random baseline: active's cold start (the seed set its cold rounds pick: typical items by
# default), then uniform random batches. Against it, active's gain is the selection's own; against
# "random" (a uniform seed set too: a user without the app) it is the cold start's and the selection's.
RANDOM_COLDSTART = "random-coldstart"
ARMS = (*STRATEGIES, RANDOM_COLDSTART)  # what a job may run: a production strategy, or a composed arm
POOL_SAMPLE_SEED = 0  # the pool sample is fixed across strategies and seeds, like the baseline's
ANNOTATOR = "sim-annotator"
Log = Callable[[str], None]


class SimulationError(RuntimeError):
    """A job that cannot go on (a failed round, data that does not fit); the message says why."""


@dataclass(frozen=True)
class SimSpec:
    """What every job of one harness run shares."""

    data_dir: Path  # holds train.csv and test.csv (text,label)
    out_dir: Path  # records.jsonl, spec.json, report.md, the plot, logs/
    work_dir: Path  # the pool CSVs, the shared embeddings, each worker job's VAR_DIR (adapters: GBs)
    rounds: int
    batch: int  # B: items per round after the seed set
    seed_labels: int = 20  # round 1: the seed set (the cold start)
    # the seed set in this many cold-start rounds of seed_labels / cold_rounds, each trained, the later ones
    # warm-started (a project's shape: cold_start_batches rounds of B); 1: the whole seed set in round 1
    cold_rounds: int = 1
    k: int = 2  # ensemble members
    engine: str = "hf"
    model_dir: str = ""  # empty: settings.LLM_DIR
    pool_sample: int = 0  # >0: a fixed random sample of train.csv is the pool (SST-2: 20,000)
    test_sample: int = 0  # >0: a fixed random sample of test.csv is the test set (CLINC150: 2,000 of 5,500)
    # >0: only the rows of a fixed random subset of this many labels, in train and test (CLINC150 at 60
    # of its 151 intents: a mid-sized label set from a shared one); the records' data is then "<name>-<n>labels"
    label_subset: int = 0
    candidate_sample: int = 0  # items rescored per round (0: the whole eligible pool)
    mass_threshold: float = 0.05  # the production default (Project.mass_threshold)
    full_data_steps: int = 0  # >0: optimiser-step cap of the full-data training (else the loop's)
    loop_options: dict[str, Any] = field(default_factory=dict)  # over settings.LOOP_OPTIONS
    max_labels: int = 0  # >0: stop a job once this many labels are in (rounds is then an upper bound)
    # after the last round: auto-labelling at each target precision, measured on the pool's unlabelled
    # items against their oracle labels (annotate/simulation/autolabel_eval.py; records in autolabel.jsonl)
    autolabel_targets: tuple[float, ...] = ()
    autolabel_calibration: int = 500  # the calibration split's size (the app's default draw)
    autolabel_delta: float = 0.05
    # >0: no round starts this many seconds after the job's start (a sitting's time box); the records say
    # how many labels the job reached, and its auto-labelling still runs on the last round's adapters
    deadline_s: float = 0
    commit: str = ""  # the code's git commit, recorded with every row

    @property
    def records_path(self) -> Path:
        return self.out_dir / "records.jsonl"

    @property
    def autolabel_path(self) -> Path:
        return self.out_dir / "autolabel.jsonl"


@dataclass(frozen=True)
class Job:
    strategy: str  # one of ARMS, or FULL_DATA
    seed: int

    @property
    def tag(self) -> str:
        return f"{self.strategy}-s{self.seed}"

    @classmethod
    def parse(cls, text: str) -> Job:
        strategy, _, seed = text.rpartition(":")
        return cls(strategy, int(seed))


@dataclass(frozen=True)
class SimData:
    name: str  # the data folder's name: trec, sst2
    label_names: tuple[str, ...]
    pool_csv: Path  # id,text,label; ids "train-<row>" (row number in train.csv)
    test_csv: Path  # id,text,label; ids "test-<row>"
    train_csv: Path  # the whole train split (full-data job)
    n_pool: int
    n_test: int


# -- data -----------------------------------------------------------------------------------------


def read_rows(path: Path) -> list[tuple[str, str]]:
    if not path.is_file():
        raise SimulationError(f"{path} is missing (the data folder needs train.csv and test.csv)")
    with path.open(newline="", encoding="utf-8") as f:
        return [(row["text"], row["label"]) for row in csv.DictReader(f)]


def _write_rows(path: Path, prefix: str, rows: Sequence[tuple[int, str, str]]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "text", "label"])
        writer.writerows((f"{prefix}-{i}", text, label) for i, text, label in rows)
    os.replace(tmp, path)


def _sample_rows(n: int, size: int) -> list[int]:
    """Every row, or a fixed random sample of ``size`` (the same for every strategy, seed and run)."""
    if 0 < size < n:
        return sorted(int(i) for i in np.random.default_rng(POOL_SAMPLE_SEED).choice(n, size=size, replace=False))
    return list(range(n))


def _label_subset(names: tuple[str, ...], size: int) -> tuple[str, ...]:
    """Every label (size 0), or a fixed random subset of ``size`` (the same for every strategy, seed and
    run: drawn as the row samples are)."""
    if size < 0 or size == 1:
        raise SimulationError(f"a label subset needs at least 2 labels (0: all), got {size}")
    if size >= len(names):
        raise SimulationError(f"a label subset of {size} is not smaller than the {len(names)} labels (0: all)")
    return tuple(names[i] for i in _sample_rows(len(names), size))


def prepare_data(
    *, data_dir: Path, work_dir: Path, pool_sample: int = 0, test_sample: int = 0, label_subset: int = 0
) -> SimData:
    """The pool and test CSVs with stable ids, written once under WORK/data (jobs reuse them). A test
    sample keeps the rows' ids ("test-<row in test.csv>"), so every job is scored on the same items. A
    label subset keeps only its labels' rows (ids unchanged), before the samples are drawn."""
    train, test = read_rows(data_dir / "train.csv"), read_rows(data_dir / "test.csv")
    all_names = tuple(sorted({label for _, label in train}))
    unknown = {label for _, label in test} - set(all_names)
    if unknown:
        raise SimulationError(f"test.csv has labels train.csv lacks: {sorted(unknown)}")
    names = _label_subset(all_names, label_subset)
    subset = len(names) < len(all_names)
    keep = set(names)
    train_idx = [i for i, (_, label) in enumerate(train) if label in keep]
    test_idx = [i for i, (_, label) in enumerate(test) if label in keep]
    rows = [train_idx[j] for j in _sample_rows(len(train_idx), pool_sample)]
    test_rows = [test_idx[j] for j in _sample_rows(len(test_idx), test_sample)]
    target = work_dir / "data"
    target.mkdir(parents=True, exist_ok=True)
    # The sample sizes and the label subset are in the names: a work folder reused with another
    # --pool-sample, --test-sample or --label-subset gets its own files, never an earlier run's.
    tag = f"-{len(names)}labels" if subset else ""
    pool_csv = target / (f"pool{tag}.csv" if len(rows) == len(train_idx) else f"pool{tag}-{len(rows)}.csv")
    test_csv = target / (f"test{tag}.csv" if len(test_rows) == len(test_idx) else f"test{tag}-{len(test_rows)}.csv")
    train_csv = target / f"train{tag}.csv" if subset else data_dir / "train.csv"
    if not pool_csv.is_file():
        _write_rows(pool_csv, "train", [(i, *train[i]) for i in rows])
    if not test_csv.is_file():
        _write_rows(test_csv, "test", [(i, *test[i]) for i in test_rows])
    if subset and not train_csv.is_file():  # the full-data job trains on the subset's labels only
        _write_rows(train_csv, "train", [(i, *train[i]) for i in train_idx])
    return SimData(
        name=data_dir.resolve().name + tag,
        label_names=names,
        pool_csv=pool_csv,
        test_csv=test_csv,
        train_csv=train_csv,
        n_pool=len(rows),
        n_test=len(test_rows),
    )


def spec_data(spec: SimSpec) -> SimData:
    """The data files of ``spec`` (the parent and every worker subprocess get the same ones)."""
    return prepare_data(
        data_dir=spec.data_dir,
        work_dir=spec.work_dir,
        pool_sample=spec.pool_sample,
        test_sample=spec.test_sample,
        label_subset=spec.label_subset,
    )


def pre_embed(data: SimData, embedding_dir: Path) -> int:
    """Embed the pool once into a shared cache, so parallel jobs (whose VAR_DIR/embeddings point
    here) never encode the same texts twelve times over. Returns the number of texts."""
    from django.conf import settings

    from annotate.services.imports import text_hash
    from scoring.bundled import encoder_path
    from scoring.embeddings import EmbeddingCache

    texts = [text for text, _ in read_rows(data.pool_csv)]
    cache = EmbeddingCache(embedding_dir, encoder_path(settings.ENCODER_DIR or None))
    cache.embed(texts, [text_hash(t) for t in texts])
    return len(texts)


# -- the project of a job -------------------------------------------------------------------------


def _label_inputs(model_dir: str, names: Sequence[str]) -> list[LabelInput]:
    from transformers import AutoTokenizer

    from scoring.labels import suggest_codes

    codes = suggest_codes(AutoTokenizer.from_pretrained(model_dir), names)
    return [LabelInput(name, code) for name, code in zip(names, codes, strict=True)]


# Tokens the chat template adds around an item (end of turn, assistant header) beyond the item
# text; measured on SmolLM2's template as 9, rounded up for other templates.
TEMPLATE_TAIL = 16
# SmolLM2-135M's trained context is 8,192; no shared set comes near it.
MAX_CONTEXT_CAP = 8192


def context_for(*, model_dir: str, labels: Sequence[str], texts: Sequence[str]) -> int:
    """The context a data set needs: the rendered prefix (instructions + every label line) plus the
    longest item in tokens plus the template's tail, so no item is truncated. A fixed 256 fails a
    77-label set (its prefix alone takes 725 tokens); this never does, and says so when the set
    cannot fit the model at all."""
    from transformers import AutoTokenizer

    from scoring.labels import suggest_codes
    from scoring.prompts import LabelSpec, PromptRenderer, PromptSpec

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    codes = suggest_codes(tokenizer, list(labels))
    defaults = {f: str(Project._meta.get_field(f).get_default()) for f in ("instructions", "item_template")}  # type: ignore[union-attr]
    spec = PromptSpec(  # what job_project's project renders: the default instructions, no descriptions
        instructions=defaults["instructions"],
        labels=tuple(LabelSpec(name, "", code) for name, code in zip(labels, codes, strict=True)),
        item_template=defaults["item_template"],
    )
    prefix = len(PromptRenderer(tokenizer, spec, model_revision="probe", max_context=MAX_CONTEXT_CAP).prefix_ids)
    longest = max((len(ids) for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]), default=0)
    needed = prefix + longest + TEMPLATE_TAIL
    if needed > MAX_CONTEXT_CAP:
        raise SimulationError(f"the prompt needs {needed} tokens ({prefix} prefix + {longest} longest item)")
    return needed


def job_project(*, spec: SimSpec, data: SimData, job: Job) -> Project:
    """A project with the pool and the fixed test set (gold labels as final labels)."""
    from django.conf import settings

    model_dir = spec.model_dir or str(settings.LLM_DIR)
    knobs = {
        "model_dir": model_dir,
        "engine": spec.engine,
        "seed": job.seed,
        "batch_size": spec.seed_labels // spec.cold_rounds,  # the cold rounds draw the seed set; then B
        "ensemble_k": spec.k,
        "cold_start_batches": spec.cold_rounds,
        "scratch_every": 0,  # the scratch-vs-warm comparison is not what this harness measures
        "candidate_sample": spec.candidate_sample,
        "mass_threshold": spec.mass_threshold,
        "test_set_size": data.n_test,
    }
    name = f"sim {data.name} {job.tag} {uuid.uuid4().hex[:6]}"
    with transaction.atomic():
        project = project_create(name=name, labels=_label_inputs(model_dir, data.label_names), **knobs)
        import_items(project=project, path=data.pool_csv)
        import_items(project=project, path=data.test_csv)
        marked = Item.objects.filter(project=project, external_id__startswith="test-").update(
            is_test=True, final_label=F("gold_label"), finalized_at=timezone.now()
        )
    if marked != data.n_test:
        raise SimulationError(f"{marked} test items marked, expected {data.n_test}")
    return project


# -- rounds ---------------------------------------------------------------------------------------

STEP_OF_STATUS: dict[str, str] = {
    Round.Status.PENDING: "planning",
    Round.Status.SCORING: "scoring",
    Round.Status.SELECTING: "selecting",
    Round.Status.LABELING: "start_training",
    Round.Status.TRAINING: "training",
    Round.Status.EVALUATING: "evaluating",
}
ALL_STATUSES = tuple(Round.Status.values)


def round_strategy(arm: str, *, number: int, cold_start_batches: int) -> str:
    """The production strategy round ``number`` of a job of ``arm`` is requested with: the arm itself,
    but random-coldstart's cold rounds are requested as active's (so they pick active's seed set, by
    the same service and seed) and its later rounds as random."""
    if arm != RANDOM_COLDSTART:
        return arm
    return "active" if number <= cold_start_batches else "random"


def _start_round(project: Project, strategy: str) -> Round:
    from annotate.services import rounds

    last = Round.objects.filter(project=project).order_by("-number").values_list("number", flat=True).first()
    strategy = round_strategy(strategy, number=(last or 0) + 1, cold_start_batches=project.cold_start_batches)
    return rounds.round_request_start(project=project, user=None, strategy=strategy, run_here=True)


def _advance(row: Round, stop: tuple[str, ...], seconds: dict[str, float]) -> Round:
    """Step the round through the production driver (every status stops it, so each step is timed)."""
    from annotate.services import rounds

    while row.status not in stop:
        if row.status == Round.Status.FAILED:
            raise SimulationError(f"round {row.number} failed: {row.failure_reason}")
        step = STEP_OF_STATUS[row.status]
        started = time.perf_counter()
        row = rounds.round_run_sync(round_id=row.id, until=ALL_STATUSES)
        seconds[step] = seconds.get(step, 0.0) + time.perf_counter() - started
    return row


def label_batch(*, project: Project, annotator: Any) -> int:
    """The simulated annotator: every item handed out gets its gold label from the CSV."""
    done = 0
    while (item := next_item_for(project=project, annotator=annotator)) is not None:
        if item.gold_label is None:
            raise SimulationError(f"pool item {item.external_id} has no gold label to answer with")
        label_submit(item=item, annotator=annotator, label=item.gold_label)
        done += 1
    return done


def run_round(*, project: Project, strategy: str, annotator: Any) -> tuple[Round, dict[str, float]]:
    """One whole round: start, score, select, label (simulated), train, evaluate. Seconds per step.
    A round that finds the pool fully labelled has no batch: it goes from selecting to training."""
    seconds: dict[str, float] = {}
    row = _advance(_start_round(project, strategy), (Round.Status.LABELING, Round.Status.DONE), seconds)
    started = time.perf_counter()
    label_batch(project=project, annotator=annotator)
    seconds["labeling"] = time.perf_counter() - started
    row = _advance(row, (Round.Status.DONE,), seconds)
    return row, seconds


def _seed_set_mode(project_id: int) -> str:
    """How the job's seed set was picked (round 1's recorded cold mode; "random" before it was recorded):
    the report names a strategy whose seed set was not uniform apart from its random-start runs."""
    first = Round.objects.filter(project_id=project_id, number=1).values_list("metrics", flat=True).first()
    return str((first or {}).get("cold_mode", "random"))


def round_record(*, row: Round, data: SimData, spec: SimSpec, job: Job, seconds: dict[str, float]) -> dict[str, Any]:
    metrics = row.metrics or {}
    batch = list(BatchItem.objects.filter(round=row).order_by("rank").values_list("item__external_id", "source"))
    sources: dict[str, int] = {}
    for _, source in batch:
        sources[source] = sources.get(source, 0) + 1
    service = {step: entry.get("seconds") for step, entry in (row.cost or {}).get("steps", {}).items()}
    return {
        **_context(data, spec, job),
        "round": row.number,
        "labels": metrics.get("labels"),
        "batch": len(batch),
        # the pool's end: no batch, the final model retrained from scratch on every label
        "pool_exhausted": row.pool_exhausted,
        "training_mode": row.training_mode,  # "warm" or "scratch" (loop option consolidate_every)
        "accuracy": metrics.get("accuracy"),
        "macro_f1": metrics.get("macro_f1"),
        "ece": metrics.get("ece"),
        "test_n": metrics.get("test_n"),
        # The predictor's parts on the test set and the blend's weight (predictor/blend.py); None with
        # blend off. "accuracy" above is the predictor's (the blend's).
        "blend": _blend_of(metrics),
        # loop option committee "blend": the weight the active draws followed (None: the equal members)
        "committee": metrics.get("committee"),
        "seconds": {step: round(s, 3) for step, s in seconds.items()},
        "round_seconds": round(sum(seconds.values()), 3),
        "service_seconds": service,
        "items_scored": row.items_scored,
        "gpu_peak_mib": _gpu_peak_mib(),
        "review_bucket": metrics.get("review_bucket", 0),
        "sources": sources,
        "arms": metrics.get("arms"),
        "cold_mode": _seed_set_mode(row.project_id),
        "selection": {k: v for k, v in (metrics.get("selection") or {}).items() if k != "picks"} or None,
        "stop_kappa": _stop_kappa(row),
        # the prod adapters' shape and how their steps ran ("graph", "eager", "per-batch"): a CUDA-graph
        # capture that fails falls back to eager steps, and this is where a run's records show it
        "adapters": metrics.get("adapters"),
        "config": resolved_config(round_config(row)),
        "batch_ids": [external_id for external_id, _ in batch],
    }


def _blend_of(metrics: dict[str, Any]) -> dict[str, Any] | None:
    blend = metrics.get("blend")
    if not blend:
        return None
    test = blend.get("test_accuracy") or {}
    return {
        "weight": blend.get("weight"),
        "heldout_n": blend.get("heldout_n"),
        "accuracy_llm": test.get("llm"),
        "accuracy_proxy": test.get("proxy"),
        "evidence": blend.get("evidence"),  # per-weight counts: batch, random slice, test (bench/blend_rules.py)
    }


def resolved_config(loop: LoopConfig) -> dict[str, Any]:
    """A LoopConfig as the record's "config": every default resolved (``loop_options`` holds only what
    the run overrode): training (steps, layers, packing...), selection, rescoring, engine. The prompt
    is left out (its hash identifies it; the label set is the data's)."""
    config = asdict(loop)
    prompt = config.pop("prompt", None)
    config["prompt_hash"] = hashlib.sha256(json.dumps(prompt, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return dict(json.loads(json.dumps(config, default=str)))


def _stop_kappa(row: Round) -> float | None:
    """κ of this round's stop-set predictions against the previous round's (the stopping criterion's
    signal, so a curve shows where the ML page would have said "you can stop here")."""
    from annotate.selectors.stopping import pair_kappa

    before = Round.objects.filter(project=row.project, number=row.number - 1).values_list("metrics", flat=True).first()
    now, prev = (row.metrics or {}).get("stop_set"), (before or {}).get("stop_set")
    if not now or not prev:
        return None
    kappa = pair_kappa(
        row.number,
        row.number - 1,
        dict(zip(now["item_ids"], now["labels"], strict=True)),
        dict(zip(prev["item_ids"], prev["labels"], strict=True)),
    ).kappa
    return None if kappa is None else round(float(kappa), 4)


def _context(data: SimData, spec: SimSpec, job: Job) -> dict[str, Any]:
    from scoring.device import device_kind as device_name

    return {
        "data": data.name,
        "commit": spec.commit,
        "loop_options": spec.loop_options,
        "mass_threshold": spec.mass_threshold,
        "candidate_sample": spec.candidate_sample,
        "pool_sample": spec.pool_sample,
        "test_sample": spec.test_sample,
        "label_subset": spec.label_subset,
        "strategy": job.strategy,
        "seed": job.seed,
        "k": spec.k,
        "engine": spec.engine,
        "model": Path(spec.model_dir).name if spec.model_dir else "default",
        "device": device_name(),
        "pool_n": data.n_pool,
        "batch_size": spec.batch,
        "seed_labels": spec.seed_labels,
        "cold_rounds": spec.cold_rounds,
        "time": timezone.now().isoformat(timespec="seconds"),
    }


def _gpu_peak_mib() -> float | None:
    """Peak GPU memory this job's process has reserved so far (PyTorch's allocator; the CUDA context's
    ~0.5 GiB comes on top), or None without a GPU."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    return round(torch.cuda.max_memory_reserved() / 2**20, 1)


def append_record(path: Path, record: dict[str, Any]) -> None:
    """One JSON line, appended under an exclusive lock (parallel jobs share the file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record, sort_keys=True) + "\n"
    with path.open("a", encoding="utf-8") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            f.write(line)
            f.flush()
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextlib.contextmanager
def loop_options(options: dict[str, Any]) -> Iterator[None]:
    """The jobs' loop options over the deployment's (settings.LOOP_OPTIONS, which every round step
    reads through annotate.loopconfig); "train" is merged key by key."""
    from django.conf import settings
    from django.test.utils import override_settings

    current = dict(getattr(settings, "LOOP_OPTIONS", None) or {})
    merged = {**current, **options, "train": {**current.get("train", {}), **options.get("train", {})}}
    if not merged.get("profile"):
        # One process plans, scores and trains here, so the device it runs on is the deployment's:
        # a simulation on the GPU machine runs the GPU profile unless told otherwise (bench/gpu_sim.sh).
        from scoring.device import device_kind

        merged["profile"] = device_kind()
    with override_settings(LOOP_OPTIONS=merged):
        yield


def run_job(*, spec: SimSpec, data: SimData, job: Job, log: Log = print) -> list[dict[str, Any]]:
    """Run one (strategy, seed) job, or the full-data job, appending each record as it happens."""
    if job.strategy == FULL_DATA:
        return [run_full_data(spec=spec, data=data, job=job, log=log)]
    if job.strategy not in ARMS:
        raise SimulationError(f"unknown strategy {job.strategy!r}; expected one of {', '.join(ARMS)}")
    records = []
    with loop_options(spec.loop_options):
        started = time.perf_counter()
        project = job_project(spec=spec, data=data, job=job)
        log(f"[{job.tag}] project ready in {time.perf_counter() - started:.1f}s ({data.n_pool} pool)")
        annotator, _ = get_user_model().objects.get_or_create(username=ANNOTATOR)
        for number in range(1, spec.rounds + 1):
            if number == spec.cold_rounds + 1:  # the seed set is in; every later round adds B
                Project.objects.filter(pk=project.pk).update(batch_size=spec.batch)
                project.refresh_from_db()
            row, seconds = run_round(project=project, strategy=job.strategy, annotator=annotator)
            record = round_record(row=row, data=data, spec=spec, job=job, seconds=seconds)
            append_record(spec.records_path, record)
            records.append(record)
            log(f"[{job.tag}] round {number}: {record['labels']} labels, acc {record['accuracy']:.3f}; {_fmt(seconds)}")
            if row.pool_exhausted:  # the pool is fully labelled and the final model trained: done
                log(f"[{job.tag}] the pool is fully labelled after round {number - 1}: stopped")
                break
            if spec.max_labels and (record["labels"] or 0) >= spec.max_labels:
                break
            if spec.deadline_s and time.perf_counter() - started >= spec.deadline_s:
                log(f"[{job.tag}] deadline ({spec.deadline_s:.0f}s) passed after round {number}: no new round")
                break
        if spec.autolabel_targets and records:
            _autolabel(spec=spec, data=data, job=job, project=project, annotator=annotator, log=log)
    return records


def _autolabel(
    *, spec: SimSpec, data: SimData, job: Job, project: Project, annotator: Any, log: Log
) -> list[dict[str, Any]]:
    """The job's auto-labelling records (appended to autolabel.jsonl, not records.jsonl: no round)."""
    from annotate.simulation.autolabel_eval import autolabel_eval

    last = Round.objects.filter(project=project, status=Round.Status.DONE).order_by("-number").first()
    context = {
        **_context(data, spec, job),
        "round": last.number if last else None,
        "labels": Item.objects.filter(project=project, is_test=False, final_label__isnull=False).count(),
        "labels_asked": spec.max_labels,  # fewer "labels" than this: the deadline (or the pool) cut the job
        "deadline_s": spec.deadline_s,
    }
    found = autolabel_eval(
        project=project,
        annotator=annotator,
        targets=spec.autolabel_targets,
        calibration_items=spec.autolabel_calibration,
        delta=spec.autolabel_delta,
        seed=job.seed,
        context=context,
        label_batch=label_batch,
        log=lambda line: log(f"[{job.tag}] {line}"),
    )
    for record in found:
        append_record(spec.autolabel_path, record)
    return found


def _fmt(seconds: dict[str, float]) -> str:
    return " ".join(f"{step} {s:.1f}s" for step, s in seconds.items())


# -- the full-data ceiling ------------------------------------------------------------------------


FULL_DATA_ADAPTER_ID = 1_000_000  # engine adapter ids of the full-data members: clear of AdapterVersion pks


def run_full_data(*, spec: SimSpec, data: SimData, job: Job, log: Log = print) -> dict[str, Any]:
    """K adapters trained once on the whole train split, then evaluated on the test set."""
    from django.conf import settings

    from annotate.selectors import loop as loop_sel
    from scoring import pipeline
    from scoring.engines import AdapterRef
    from training import ensemble

    with loop_options(spec.loop_options):
        project = job_project(spec=spec, data=data, job=job)
        config = loop_config(project)
    if spec.full_data_steps > 0:
        config = replace(config, train=replace(config.train, max_steps=spec.full_data_steps))
    names = loop_sel.label_names(project=project)
    index = {name: i for i, name in enumerate(names)}
    rows = read_rows(data.train_csv)
    renderer = pipeline.make_renderer(config.model_dir, config.prompt, config.max_context)
    started = time.perf_counter()
    refs = []
    for k in range(config.k):
        trained = ensemble.train_member(
            config=config,
            renderer=renderer,
            texts=[text for text, _ in rows],
            label_indices=[index[label] for _, label in rows],
            out_dir=Path(settings.ADAPTER_DIR) / f"project_{project.pk}" / "full_data" / f"prod_{k}",
            round_seed=job.seed,
            arm="prod",
            k=k,
        )
        name = f"p{project.pk}-full{k}-{trained.content_hash[:12]}"
        refs.append(AdapterRef(name=name, int_id=FULL_DATA_ADAPTER_ID + k, path=trained.path))
    train_seconds = time.perf_counter() - started
    started = time.perf_counter()
    _, texts, y = loop_sel.test_items(project=project)
    metrics, _ = ensemble.evaluate_adapters(ensemble.make_engine(config), renderer, texts, y, refs, names)
    record = {
        **_context(data, spec, job),
        "round": 0,
        "labels": len(rows),
        "accuracy": metrics["accuracy"],
        "macro_f1": metrics["macro_f1"],
        "ece": metrics["ece"],
        "test_n": len(y),
        "train_steps": config.train.max_steps,
        "config": resolved_config(config),
        "seconds": {"training": round(train_seconds, 3), "evaluating": round(time.perf_counter() - started, 3)},
    }
    append_record(spec.records_path, record)
    log(f"[{job.tag}] {len(rows)} labels, acc {metrics['accuracy']:.3f}, " + _fmt(record["seconds"]))
    return record


def spec_json(spec: SimSpec) -> dict[str, Any]:
    return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(spec).items()}


def spec_from_json(payload: dict[str, Any]) -> SimSpec:
    """The parent's spec, read back by a worker subprocess (OUT/spec.json)."""
    paths = {key: Path(payload[key]) for key in ("data_dir", "out_dir", "work_dir")}
    targets = tuple(payload.get("autolabel_targets", ()))  # a JSON list
    return SimSpec(**{**payload, **paths, "autolabel_targets": targets})
