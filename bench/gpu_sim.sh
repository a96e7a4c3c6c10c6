#!/usr/bin/env bash
# The learning-curve sitting on the GPU machine (one H200, 16 cores): every shared data set at once,
# each strategy x seed a job through the production round services (manage.py simulate), up to
# LABELS labels, inside BUDGET seconds. After bench/device_install.sh has staged the models, data
# and wheels (see bench/device_stage.sh):
#
#   COMMIT=<sha> SETS="clinc150 trec" STRATEGIES=active,random SEEDS=3 LABELS=1000 BUDGET=520 bash bench/gpu_sim.sh
#
# A mid-sized label set from a shared one (how many labels the 16 wide layers need, TrainConfig.
# wide_top_layers): SETS=clinc150 EXTRA="--label-subset 60" (records' data: clinc150-60labels).
#
# The jobs' kernels are small and the GPU runs one process's at a time (88 % busy at 12 jobs), so a
# round's time grows with the number of jobs: at B=50 a call of one 8-layer set (6 jobs, 265-325 s) or
# two (12 jobs, 367-376 s) reaches 1,000 labels, CLINC150 (16 layers) in two calls of 3 jobs (324 s
# active, 262 s random; sessions 13-14); at B=100 two sets (12 jobs) a call did (sessions 6-12).
#
# Auto-labelling measured on held-out items (issue 31): AUTOLABEL_TARGETS=0.90,0.95 (with STRATEGIES=active
# SEEDS=1): after each job's last round, a calibration split of 500 pool items labelled by the simulated
# annotator, then per target a calibration and the bulk job over the rest of the pool, its accepted items
# checked against the oracle labels (annotate/simulation/autolabel_eval.py); $OUT/autolabel.jsonl, tables by
# bench/autoaccept_sim.py. Staged by bench/gpu_deployed.sh instead of device_install.sh: MODEL, DATA,
# ENCODER_DIR and PYTHONPATH pointing at its folders (/root/gd/models/..., /root/gd/data, /root/gd/site).
#
# Results, flat in $OUT (the device tool brings back at most 8 files): records.jsonl (one JSON line per
# round and job, every line with the commit and the loop options), sim.log (every job's progress
# lines), gpu.csv (utilisation and memory every 2 s), procmem.csv (GPU memory per process, the
# largest seen) and versions.txt. bench/sim_report.py turns records into the tables.
set -uo pipefail
cd "$(dirname "$0")/.."
export DEBUG=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export DJANGO_SETTINGS_MODULE=config.settings CELERY_TASK_ALWAYS_EAGER=1
# Freed blocks go back to the pool whole instead of fragmenting it: with 30+ jobs on one GPU, reserved
# memory (what the others cannot use) stays near allocated memory.
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export VAR_DIR=${VAR_DIR:-/root/alann-var} ENCODER_DIR=${ENCODER_DIR:-/root/b/models/all-MiniLM-L6-v2}
export ALANN_COMMIT=${COMMIT:-unknown}
MODEL=${MODEL:-/root/models/smollm2-135m-instruct}
DATA=${DATA:-/root/b/data}
OUT=${OUT:-bench/raw/$(date +%F)/sim}  # the device tool sets $OUT; elsewhere: today's raw folder
SETS=${SETS:-trec sst2 clinc150 emotion snips search_snippets}
STRATEGIES=${STRATEGIES:-active,random}
SEEDS=${SEEDS:-3}
# FIRST_SEED=3 SEEDS=3: seeds 3, 4, 5 (more seeds for a set already run with 0..2; the records pair by seed)
FIRST_SEED=${FIRST_SEED:-0}
LABELS=${LABELS:-1000}
BUDGET=${BUDGET:-540}
# One CPU thread per job: 30+ jobs share 16 cores, and a job's CPU work is launching GPU kernels.
export ALANN_SIM_THREADS=${THREADS:-1}
# Training per round, K=2 warm-started members: 48 steps of 32 every round (min_steps = max_steps:
# epochs alone gave a 100-label round 12 steps, far too few: bench/steps_probe.py), LoRA in the top
# 8 layers only (16 above 50 labels: TrainConfig.wide_top_layers; the trunk below runs once:
# scoring/toplayers.py), no dropout; lr 1e-3 because a
# round's few dozen steps at 2e-4 barely move a warm adapter; no checkpoints (a simulated round is rerun, not resumed); the shared prefix runs once
# per step, so no micro-batch split is needed. max_context "auto": prefix + longest item. A stop set
# of 200 (not the app's 500): the κ signal in the records at 40 % of the evaluation's extra prompts.
LOOP=${LOOP:-'{"max_context": "auto", "arms": false, "stop_set_size": 200, "train": {"epochs": 3, "max_steps": 48, "batch_size": 32, "lr": 1e-3, "checkpoint_every": 0, "micro_batch_tokens": 1048576, "dropout": 0.0, "top_layers": 8, "wide_top_layers": 16, "min_steps": 48}}'}
# loop_set KEY[.SUBKEY] VALUE: one loop option set in LOOP's JSON (a number stays a number).
loop_set() {
    LOOP=$(python3 - "$LOOP" "$1" "$2" <<'PY'
import json, sys
root = json.loads(sys.argv[1])
*path, key = sys.argv[2].split(".")
d = root
for part in path:
    d = d.setdefault(part, {})
try:
    d[key] = float(sys.argv[3])
except ValueError:
    d[key] = sys.argv[3]
print(json.dumps(root))
PY
)
}
# COLD_MODE=<mode>: every strategy but random starts with that cold mode instead of the app's default.
# The GPU profile's training options not named in LOOP apply too: since session 11 graph_step "auto"
# (each step replayed from one CUDA graph) and precision "tf32" (annotate/loopconfig.py).
# GRAPH_STEP=off / PRECISION=float32 run the per-batch step / float32 matmuls instead; the records'
# config and gpu_peak_mib (per round) say what ran and what it held.
[ -n "${COLD_MODE:-}" ] && loop_set cold_mode "$COLD_MODE"
# SOFTRANK_BETA=<β>: the active strategy's soft-rank exponent (loop option softrank_beta, default 1);
# the report names every run whose β is not 1 "active+typical+β<β>".
[ -n "${SOFTRANK_BETA:-}" ] && loop_set softrank_beta "$SOFTRANK_BETA"
# COMMITTEE=blend: active draws by the blended predictor's uncertainty (loop option committee; the
# report names it "+blend-committee").
[ -n "${COMMITTEE:-}" ] && loop_set committee "$COMMITTEE"
# PACKED_SCORING=0: the hf engine scores and evaluates row by row instead of each batch as one packed
# sequence (engine option packed_scoring, HFEngine; packed is its GPU default since session 12, runs
# before it — sim12-128e624-* — set PACKED_SCORING=1): the same probabilities to ~1e-4.
[ -n "${PACKED_SCORING:-}" ] && loop_set engine_options.packed_scoring "$PACKED_SCORING"
[ -n "${GRAPH_STEP:-}" ] && loop_set train.graph_step "$GRAPH_STEP"
[ -n "${PRECISION:-}" ] && loop_set train.precision "$PRECISION"
mkdir -p "$OUT" "$VAR_DIR"
python3 -c 'import django, torch, transformers, peft; print("django", django.__version__, "torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__)' > "$OUT/versions.txt" 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >> "$OUT/versions.txt" 2>&1
echo "commit $ALANN_COMMIT; loop $LOOP; sets $SETS; strategies $STRATEGIES x $SEEDS seeds from $FIRST_SEED; labels $LABELS; batch ${BATCH:-per set}; seed labels ${SEED_LABELS:-per set}" >> "$OUT/versions.txt"

nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader -l 2 > "$OUT/gpu.csv" 2>/dev/null &
SMI=$!
( while sleep 5; do nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null; done ) > /tmp/procmem.raw &
PROCMEM=$!
# The records so far, copied into $OUT every 10 s: an outer timeout that ends this script early
# still leaves every finished round's record there (the end of the script copies them again).
# Only this call's sets: a warm machine's VAR_DIR still holds an earlier call's (session 5's second
# call copied the first call's records again).
collect() { for set in $SETS; do cat "$VAR_DIR/sim/$set/${1:-records}.jsonl" 2>/dev/null; done; }
( while sleep 10; do collect > "$OUT/.records.tmp" && mv "$OUT/.records.tmp" "$OUT/records.jsonl"; done ) &
COPIER=$!

# The seed set is the app's default cold start: the most typical items (loop option cold_mode
# "typical", acquisition.batch.select_typical) for every strategy but random, whose seed set stays a
# uniform draw; records say which ("cold_mode") and the report names e.g. "active+typical".
# B=50 after a seed set of 100 (CLINC150: 300, about 2 per class, as BASELINES.md's 302): the app's own
# shape (Project.batch_size 50, two cold-start batches); 1,000 labels are 19 rounds of 48 steps per
# member (CLINC150: 15). Sessions 6-12 ran B=100 (ten rounds on 100, 200, ..., 1,000 labels):
# BATCH=100 runs that shape again; the report keeps the two apart.
# CLINC150 is scored on a fixed 2,000-item sample of its 5,500 test items (--test-sample, the same
# items for every job): its 1,015-token prompts made evaluation a third of its round.
args_for() {
  case $1 in
    clinc150) echo "--batch 50 --seed-labels 300 --candidate-sample 2000 --test-sample 2000" ;;
    sst2) echo "--batch 50 --seed-labels 100 --pool-sample 20000 --candidate-sample 2000" ;;
    *) echo "--batch 50 --seed-labels 100 --candidate-sample 2000" ;;
  esac
}
# BATCH=100 / SEED_LABELS=50: every set's B and seed set instead of args_for's (the last flag wins; CLINC150's
# too, whose 300 is about 2 per class: leave it out of SETS or set SEED_LABELS=300).
n_jobs=$(( $(echo "$STRATEGIES" | tr ',' '\n' | wc -l) * SEEDS ))
pids=()
for set in $SETS; do
  rm -rf "$VAR_DIR/sim/$set" "$VAR_DIR/sim-work/$set"
  # One job runs in the command's own process, on VAR_DIR's database: a database of its own per set (six sets'
  # commands on one SQLite file would queue on its lock), migrated first. Several jobs: each its own (subprocesses).
  db_dir=$VAR_DIR
  if [ "$n_jobs" -eq 1 ]; then
    db_dir=$VAR_DIR/db-$set; rm -rf "$db_dir"; mkdir -p "$db_dir"
    VAR_DIR=$db_dir python3 manage.py migrate -v 0 > "$VAR_DIR/$set.log" 2>&1
  fi
  VAR_DIR=$db_dir timeout --signal=TERM --kill-after=30 "$BUDGET" python3 manage.py simulate --data "$DATA/$set" \
    --strategy "$STRATEGIES" --seeds "$SEEDS" --first-seed "$FIRST_SEED" --rounds 200 --labels "$LABELS" --k 2 --engine hf --model "$MODEL" \
    --workers "$n_jobs" --loop-options "$LOOP" --no-report --out "$VAR_DIR/sim/$set" --work "$VAR_DIR/sim-work/$set" \
    $(args_for "$set") ${BATCH:+--batch $BATCH} ${SEED_LABELS:+--seed-labels $SEED_LABELS} ${EXTRA:-} \
    ${AUTOLABEL_TARGETS:+--autolabel-targets $AUTOLABEL_TARGETS} >> "$VAR_DIR/$set.log" 2>&1 &
  pids+=($!)
  sleep 2  # the parents' pre-embedding and project imports start staggered
done
for p in "${pids[@]}"; do wait "$p"; done
kill $SMI $PROCMEM $COPIER 2>/dev/null
sort -t, -k2 -n -r /tmp/procmem.raw | awk -F, '!seen[$1]++' > "$OUT/procmem.csv"
collect > "$OUT/records.jsonl"
# AUTOLABEL_TARGETS: the jobs' auto-labelling records (bench/autoaccept_sim.py makes the tables)
[ -n "${AUTOLABEL_TARGETS:-}" ] && collect autolabel > "$OUT/autolabel.jsonl"
for set in $SETS; do
  echo "== $set"; cat "$VAR_DIR/$set.log"
  for f in "$VAR_DIR/sim/$set"/logs/*.log; do echo "-- $f"; grep -E '^\[|Error|error' "$f" | tail -60; done
done > "$OUT/sim.log" 2>&1
echo "records: $(wc -l < "$OUT/records.jsonl")"; tail -c 3000 "$OUT/sim.log"
