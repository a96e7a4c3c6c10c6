#!/usr/bin/env bash
# Auto-labelling on the GPU machine, one command per measurement (each fits one 10-minute call).
# Needs what bench/device_install.sh stages (wheels of Django, Celery and their deps in /tmp/site,
# SmolLM2 dequantized into /root/models/smollm2-135m-instruct, the data sets in /root/b/data) and
# torch/transformers/peft (+ vLLM for ENGINE=vllm, in /root/vsite when the bundle put it there).
#
#   OUT=$OUT bash bench/gpu_autolabel.sh run
#       200,000 items through the bulk job (calibrate on TREC's test split, then every pool item):
#       items/s, GPU busy share, peak GPU memory, tier counts, prefix-cache hit rate.
#       Knobs: ITEMS (200000), ENGINE (vllm | hf), ADAPTERS (a round folder with prod_0..prod_K-1;
#       empty: the base model), CASCADE (agreement), CHUNK (1024 items per engine call),
#       LOOP (loop options JSON: context and engine options).
#   OUT=$OUT SIM=/root/alann-var/sim-work bash bench/gpu_autolabel.sh report
#       coverage and measured precision of auto-accept at 95 % on each data set's held-out split,
#       with the adapters of the simulation's active job of seed 0 (SIM/<set>/jobs/active-s0 or
#       JOB=<job folder name>); SETS (trec,sst2,emotion,snips,search_snippets).
set -uo pipefail
cd "$(dirname "$0")/.."
bash bench/device_install.sh > /dev/null 2>&1 || echo "device_install.sh: $? (staging incomplete?)"
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
[ -d /root/vsite ] && export PYTHONPATH=$PYTHONPATH:/root/vsite
export DEBUG=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 VLLM_WORKER_MULTIPROC_METHOD=spawn
OUT=${OUT:-bench/raw/$(date +%F)/autolabel}; mkdir -p "$OUT"  # the device tool sets $OUT; elsewhere: today's raw folder
MODEL=${MODEL:-/root/models/smollm2-135m-instruct}
DATA=${DATA:-/root/b/data}
ENGINE=${ENGINE:-vllm}
case "${1:-run}" in
  run)
    LOOP=${LOOP:-'{"max_context": 256, "engine_options": {"gpu_memory_utilization": 0.5}}'}
    [ "$ENGINE" = hf ] && LOOP=${LOOP_HF:-'{"max_context": 256}'}
    timeout 560 python3 bench/autolabel_bench.py run --items "${ITEMS:-200000}" --model "$MODEL" --engine "$ENGINE" \
      --data-dir "$DATA" --cascade "${CASCADE:-agreement}" --chunk "${CHUNK:-1024}" --loop-options "$LOOP" \
      ${ADAPTERS:+--adapters "$ADAPTERS"} 2>&1 | tee "$OUT/autolabel-run-$ENGINE.txt" | grep -v -E "^(INFO|WARNING|\(EngineCore)" | tail -40
    ;;
  report)
    SIM=${SIM:?set SIM to the simulation work folder (the one holding <set>/jobs/<job>)}
    runs=()
    for set in $(echo "${SETS:-trec,sst2,emotion,snips,search_snippets}" | tr , ' '); do
      job="$SIM/$set/jobs/${JOB:-active-s0}"
      [ -d "$job" ] && runs+=(--run "$set=$job") || echo "no $job: $set skipped"
    done
    OPTS='{"gpu_memory_utilization": 0.5}'; [ "$ENGINE" = hf ] && OPTS='{}'
    timeout 560 python3 bench/autoaccept_report.py --model "$MODEL" --engine "$ENGINE" --data-dir "$DATA" \
      --engine-options "${ENGINE_OPTIONS:-$OPTS}" "${runs[@]}" \
      --out "$OUT/autoaccept.md" 2>&1 | tee "$OUT/autoaccept-log.txt" | tail -20
    ;;
  *) echo "usage: bash bench/gpu_autolabel.sh run|report" >&2; exit 2 ;;
esac
