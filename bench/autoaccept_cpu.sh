#!/usr/bin/env bash
# Auto-labelling measured on held-out items on this (CPU) machine, when no GPU sitting could run it (issue 31;
# session 32): per set a simulation of the active arm (the app's CPU profile, K=2, B=50 after a seed set of 100) to
# LABELS labels on a fixed POOL-item sample of the train split, then the calibration split (500 pool items labelled
# by the simulated annotator) and, per target, a calibration and the bulk job over the rest of the pool, every
# accepted item checked against its oracle label (annotate/simulation/autolabel_eval.py). JOBS sets at a time.
# TEST=500: a fixed 500 of the test split (the calibrator's evaluation items; each round's evaluation on the CPU
# is most of its time on the sets with 2,000+ test items).
#
#   LABELS=200 POOL=3000 JOBS=2 SETS="trec snips emotion search_snippets sst2" bash bench/autoaccept_cpu.sh OUTDIR
#   .venv/bin/python bench/autoaccept_sim.py OUTDIR/autolabel.jsonl
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: autoaccept_cpu.sh OUTDIR}; mkdir -p "$OUT"
PY=${PY:-.venv/bin/python}
MODEL=${MODEL:-$PWD/var/models/smollm2-135m-instruct}  # make models puts it there (each job's VAR_DIR is its own)
SETS=${SETS:-trec snips emotion search_snippets sst2}
export DEBUG=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export DJANGO_SETTINGS_MODULE=config.settings CELERY_TASK_ALWAYS_EAGER=1 ALANN_SIM_THREADS=1 OMP_NUM_THREADS=1
export ALANN_COMMIT=$(git rev-parse HEAD)
echo "commit $ALANN_COMMIT$(git diff --quiet HEAD -- . ':!bench/raw' || echo ' (uncommitted changes)'); labels ${LABELS:-200}; pool ${POOL:-3000}; test sample ${TEST:-0 (all)}; sets $SETS; $(getconf _NPROCESSORS_ONLN) CPUs; $(date -Is)" > "$OUT/versions.txt"
one() {
  local set=$1 db=$OUT/db-$1
  rm -rf "$db" "$OUT/sim/$1" && mkdir -p "$db"
  VAR_DIR=$db $PY manage.py migrate -v 0 > "$OUT/$set.log" 2>&1
  VAR_DIR=$db $PY manage.py simulate --data "../shared/data/$set" --strategy active --seeds 1 --rounds 60 \
    --labels "${LABELS:-200}" --k 2 --engine hf --model "$MODEL" --batch 50 --seed-labels 100 --candidate-sample 2000 \
    --pool-sample "${POOL:-3000}" --test-sample "${TEST:-0}" --autolabel-targets "${TARGETS:-0.90,0.95}" --no-report \
    --out "$OUT/sim/$set" --work "$OUT/work/$set" >> "$OUT/$set.log" 2>&1
  echo "$set exit $?" >> "$OUT/$set.log"
}
running=0
for s in $SETS; do
  one "$s" &
  running=$((running + 1))
  if [ "$running" -ge "${JOBS:-2}" ]; then wait -n; running=$((running - 1)); fi
done
wait
cat "$OUT"/sim/*/autolabel.jsonl > "$OUT/autolabel.jsonl" 2>/dev/null
cat "$OUT"/sim/*/records.jsonl > "$OUT/records.jsonl" 2>/dev/null
grep -h "exit" "$OUT"/*.log
