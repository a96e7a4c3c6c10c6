#!/usr/bin/env bash
# One sitting on the GPU machine after the bundle parts are in /root/stage: install, then the scoring
# bench (vLLM base / 1 adapter / K=4 mixed, hf K=4, parity) and the selection bench, inside one
# 10-minute call. Results are copied flat into $OUT (at most 8 files come back).
#
# Knobs (environment): N items; MAX_NUM_SEQS, MAX_BATCHED (vLLM scheduler); VLLM_CONFIGS (base,1,k);
# ENGINES (comma list of vLLM engines on the GPU at once, e.g. 1,4: each >1 is K mixed, one process
# per engine, as that many gpu workers would run); HF_BATCH / HF_MAX_BATCH_TOKENS (hf rows per
# forward); SELECT=0 skips the selection bench; INSTALL=0 skips the bundle install (done earlier).
# The engine-count run of 2026-11-29 (second session):
#   N=10000 VLLM_CONFIGS=k ENGINES=1,4 MAX_NUM_SEQS=2048 MAX_BATCHED=262144 HF_BATCH=1024 \
#   HF_MAX_BATCH_TOKENS=1100000 SELECT=0 bash bench/gpu_benches.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=/root/vsite${PYTHONPATH:+:$PYTHONPATH}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 PYTHONUNBUFFERED=1
export VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_WORKER_MULTIPROC_METHOD=spawn TOKENIZERS_PARALLELISM=false
OUT=${OUT:-bench/raw/$(date +%F)/gpu-benches}; mkdir -p "$OUT"  # the device tool sets $OUT; elsewhere: today's raw folder
[ "${INSTALL:-1}" = 1 ] && { ( cd /root/stage && bash install.sh ) 2>&1 | tail -3; }
W=/root/work; mkdir -p $W
timeout "${SCORE_BUDGET:-450}" python bench/score_bench.py --engine both --model /root/models/SmolLM2-135M-Instruct.Q4_1.gguf \
  --n "${N:-20000}" --prefix-tokens 800 --adapters 4 --n-parity 512 --hf-n 2048 \
  --max-num-seqs "${MAX_NUM_SEQS:-1024}" --max-num-batched-tokens "${MAX_BATCHED:-131072}" --gpu-memory-utilization 0.5 \
  --vllm-configs "${VLLM_CONFIGS:-base,1,k}" --engines "${ENGINES:-1}" \
  --hf-batch "${HF_BATCH:-0}" --hf-max-batch-tokens "${HF_MAX_BATCH_TOKENS:-0}" \
  --stage-timeout 200 --vllm-timeout "${VLLM_TIMEOUT:-330}" --budget $(( ${SCORE_BUDGET:-450} - 15 )) --out $W/score
echo "score_bench exit: $?"
for f in table.md results.json progress.log gpu-util.csv; do [ -f $W/score/$f ] && cp $W/score/$f "$OUT/score-$f"; done
if [ "${SELECT:-1}" = 1 ]; then
  OUT=$W/select ENCODER_DIR=/root/models/all-MiniLM-L6-v2 timeout 100 bash bench/gpu_select.sh
  for f in table.md select.json; do [ -f $W/select/$f ] && cp $W/select/$f "$OUT/select-$f"; done
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
