#!/usr/bin/env bash
# The 8B stretch (issue 35, point 7): a Llama-3-8B-shaped model with random weights built ON the GPU
# machine (nothing downloaded, none of its 16 GB carried), 4 random rank-8 LoRA adapters, and the app's
# scoring workload on vLLM (bench/llm8b_bench.py score): 20,000 prompts of 256 tokens spread over the 4
# adapters -- tokens/s and MFU. One sitting, five calls back to back (the machine goes back ~30 s after a
# call, with everything on it):
#
#   here:   bash ../shared/device/build-bundle.sh && bash bench/gpu_8b.sh pack
#           # -> .l8parts/part-00..03 (SmolLM2's tokenizer first, then vLLM's site: 36 MB each) + MANIFEST
#           bash bench/gpu_8b.sh part 00        # before each call: that part alone in .l8stage/
#   there (run with carry [".l8stage"]), one call per part; `bash bench/gpu_8b.sh part NN` here between them:
#     COMMIT=<sha> bash bench/gpu_8b.sh stage                                      # part-00: the build starts
#     COMMIT=<sha> bash bench/gpu_8b.sh stage                                      # part-01
#     COMMIT=<sha> bash bench/gpu_8b.sh stage                                      # part-02
#     COMMIT=<sha> bash bench/gpu_8b.sh stage && COMMIT=<sha> bash bench/gpu_8b.sh score   # part-03 (timeout_s 600)
#   optional fifth call, same machine: the warm start (the compile cache is kept) and the app's own layout:
#     COMMIT=<sha> TAG=warm LAYOUT=ensemble N=5000 PREFIX=224 BASE_N=0 bash bench/gpu_8b.sh score
#
# The batch-invariance check (issue 35 point 6; prepared in session 25, not yet run): the same pack and parts, with
# SHAPE=smollm2-135m K=4 on every stage call (a random model of the app's size: build and adapters take seconds),
# then in the last call `SHAPE=smollm2-135m K=4 COMMIT=<sha> BUDGET=400 INV_N=2000 bash bench/gpu_8b.sh stage &&
# ... bash bench/gpu_8b.sh invariance`: bench/batch_invariance.py without, then with, the batch_invariant engine
# option (INV_MODES="on off" puts the decisive one first); $OUT gets invariance-{off,on}.json and invariance.md.
# Rehearsed on the CPU with ENGINE=hf INV_MODES=off (hf has no such option) and the L8_* paths below.
#
# stage keeps the call's part, unpacks the tokenizer once whole and starts `prep` detached (setsid, so it
# outlives the call): build (init on the GPU in bf16 in seconds, 16 GB through the CPU into four safetensors
# shards: ~1-2 min), then the adapters (a meta-device base model: ~20 s). It unpacks vLLM once its parts are
# whole. score waits for prep, starts vLLM (cold: weights, torch.compile, CUDA graphs: ~2-3 min for 8B, a
# guess), warms up on 512 requests, then runs the workloads in chunks of 5,000 prompts, each timed and
# written to $OUT as it ends: prefix 224 (the app's ~88 % shared prefix: ~0.7 M tokens computed, ~30 s),
# prefix 0 (every token computed: the clean MFU figure; 5.1 M tokens, ~3 min at 40 % MFU), then 4,000
# prompts on the base model (LoRA's cost). Engine start + warm-up + these: ~7-8 min of the 9 in BUDGET.
# No chunk starts in the last 60 s of BUDGET; what did not fit is marked skipped in the JSON.
#
# $OUT gets: llm8b-TAG.json (bench/llm8b_bench.py score's report), build.json, progress.log, score.log,
# prep.log, gpu-samples.csv (nvidia-smi every second while scoring).
# Rehearsed on the CPU machine (tiny shape, hf engine, vLLM's site unpacked but not imported): pack, then with
# L8_ROOT=/tmp/l8 L8_STAGE=/tmp/l8/stage TOKENIZER=/tmp/l8/tokenizer SHAPE=tiny ENGINE=hf PY=.venv/bin/python:
# `part NN` + `stage` four times, then N=40 PROMPT_TOKENS=64 PREFIX=0,48 BASE_N=8
# EXTRA="--chunk 16 --warmup 4 --peak-tflops 1" bash bench/gpu_8b.sh score.
# vLLM already on the machine (another sitting's): VSITE=/root/gd/vsite TOKENIZER=/root/gd/models/smollm2-135m-instruct
# bash bench/gpu_8b.sh prep && ... score (no staging). GPU_SHARE=0.9 expects the GPU to itself.
set -uo pipefail
cd "$(dirname "$0")/.."
MODE=${1:?usage: gpu_8b.sh pack|part NN|stage|prep|score|invariance}
STAGE=${L8_STAGE:-/root/stage-8b}    # the parts, as they arrive
R=${L8_ROOT:-/root/l8}               # the tokenizer, the model, the adapters, logs, vLLM's compile cache
VSITE=${VSITE:-$R/vsite}             # vLLM and its dependencies (the shared bundle's site)
TOK=${TOKENIZER:-$R/tokenizer}       # SmolLM2's tokenizer (49,152 ids: they fit Llama-3's 128,256)
SHAPE=${SHAPE:-llama3-8b}            # tiny + ENGINE=hf + PY=.venv/bin/python: a rehearsal of this script on a CPU machine
MODEL=$R/model-$SHAPE
ADAPTERS=$R/adapters
K=${K:-4}                            # Project.ensemble_k's default
RANK=${RANK:-8}                      # TrainConfig.rank's default
N=${N:-20000}                        # the issue's 20,000 prompts (per workload)
PROMPT_TOKENS=${PROMPT_TOKENS:-256}
PREFIX=${PREFIX:-224,0}              # one workload each: the app's ~88 % shared prefix (~30 s), then all computed (MFU)
LAYOUT=${LAYOUT:-spread}             # spread: item i on adapter i mod K; ensemble: every item on every adapter
BASE_N=${BASE_N:-4000}               # then prompts on the base model, no prefix: LoRA's cost
GPU_SHARE=${GPU_SHARE:-0.9}
EXTRA=${EXTRA:-}                     # more llm8b_bench.py score options (--enforce-eager, --load-format dummy, ...)
ENGINE=${ENGINE:-vllm}
PY=${PY:-python3}
BUDGET=${BUDGET:-540}                # seconds for score: a call may run 600, stage's unpacking comes first
PREP_WAIT=${PREP_WAIT:-300}          # seconds score waits for a prep still running
TAG=${TAG:-cold}
OUT=${OUT:-bench/raw/$(date +%F)/llm8b}  # the device tool sets $OUT; elsewhere: today's raw folder
COMMIT=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
DEADLINE=$(( $(date +%s) + BUDGET ))
[ "$MODE" = prep ] && OUT=$R/prep-out  # detached: the stage call's $OUT is gone when it runs on
[[ $MODE == pack || $MODE == part ]] || mkdir -p "$R/logs" "$OUT"

say() { echo "$(date +%H:%M:%S) [gpu_8b $MODE] $*" | tee -a "$OUT/progress.log" "$R/progress.log" 2>/dev/null; }
step() {  # step NAME TIMEOUT CMD...: one step under timeout, its exit status logged
  local name=$1 limit=$2; shift 2
  say "step $name: start (timeout ${limit}s)"
  local t0=$SECONDS; timeout -k 15 "$limit" "$@" 2>&1 | tee -a "$R/logs/$name.log"
  local rc=${PIPESTATUS[0]}; say "step $name: exit $rc in $(( SECONDS - t0 ))s"; return "$rc"
}
have_bytes() { local s=0 f; for f in "$STAGE"/part-*; do [ -f "$f" ] && s=$(( s + $(stat -c %s "$f") )); done; echo $s; }
vllm_ready() { [ -f "$VSITE/.installed" ] || { [ "$VSITE" != "$R/vsite" ] && [ -d "$VSITE/vllm" ]; }; }
adapter_dirs() { local k out=""; for k in $(seq 0 $(( K - 1 ))); do out+=" $ADAPTERS/a$k"; done; echo $out; }

case $MODE in
pack)  # here: SmolLM2's tokenizer, then the bundle's vLLM site, as one stream cut into parts
  BUNDLE=${BUNDLE:-.device-bundle}
  TOKSRC=${TOKENIZER_SRC:-${LLM_DIR:-var/models/smollm2-135m-instruct}}
  [ -f "$BUNDLE/part-00" ] || { echo "run ../shared/device/build-bundle.sh first (or BUNDLE=DIR)"; exit 1; }
  [ -f "$TOKSRC/tokenizer.json" ] || { echo "no tokenizer in $TOKSRC (manage.py prepare_models, or TOKENIZER_SRC=DIR)"; exit 1; }
  exclude=$(git rev-parse --git-path info/exclude)
  for d in /.l8stage/ /.l8parts/; do grep -qx "$d" "$exclude" 2>/dev/null || echo "$d" >> "$exclude"; done
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  cat "$BUNDLE"/part-* | tar xf - -C "$tmp" ./site.tar.xz || exit 1
  tar cf "$tmp/tokenizer.tar" -C "$TOKSRC" $(cd "$TOKSRC" && ls tokenizer.json tokenizer_config.json \
    special_tokens_map.json chat_template.jinja 2>/dev/null)
  rm -rf .l8parts .l8stage && mkdir -p .l8parts .l8stage
  for m in tokenizer.tar site.tar.xz; do
    echo "${m%%.*} $(stat -c %s "$tmp/$m") $(sha256sum < "$tmp/$m" | cut -d' ' -f1)"
  done > .l8parts/MANIFEST
  # 36 MB: with the ~28 MB working tree, under the 64 MiB a call carries
  cat "$tmp/tokenizer.tar" "$tmp/site.tar.xz" | split -b "${PART_BYTES:-36000000}" -d - .l8parts/part-
  ls -l .l8parts; cat .l8parts/MANIFEST; echo "next: bash bench/gpu_8b.sh part 00" ;;

part)  # here: part NN alone in .l8stage/ (with the MANIFEST), for the next call's carry
  n=${2:?usage: gpu_8b.sh part NN}
  [ -f ".l8parts/part-$n" ] || { echo "no .l8parts/part-$n"; exit 1; }
  rm -rf .l8stage && mkdir -p .l8stage && ln -f ".l8parts/part-$n" .l8parts/MANIFEST .l8stage/
  ls -l .l8stage ;;

stage)  # there: keep the part; unpack the tokenizer (then start prep) and vLLM as soon as each is whole
  mkdir -p "$STAGE"
  cp -n .l8stage/part-* .l8stage/MANIFEST "$STAGE"/ 2>/dev/null
  [ -f "$STAGE/MANIFEST" ] || { say "no MANIFEST yet"; exit 3; }
  read -r _ tsize tsha < <(grep '^tokenizer ' "$STAGE/MANIFEST")
  read -r _ ssize ssha < <(grep '^site ' "$STAGE/MANIFEST")
  have=$(have_bytes)
  if [ ! -f "$TOK/.ok" ] && (( have >= tsize )); then
    (set +o pipefail; cat "$STAGE"/part-* | head -c "$tsize" > "$STAGE/tokenizer.tar")
    if [ "$(sha256sum < "$STAGE/tokenizer.tar" | cut -d' ' -f1)" = "$tsha" ]; then
      mkdir -p "$TOK" && tar xf "$STAGE/tokenizer.tar" -C "$TOK" && touch "$TOK/.ok"
    else say "tokenizer checksum FAILED"; fi
  fi
  if ! vllm_ready && (( have == tsize + ssize )); then
    cat "$STAGE"/part-* | tail -c +$(( tsize + 1 )) > "$STAGE/site.tar.xz"
    if [ "$(sha256sum < "$STAGE/site.tar.xz" | cut -d' ' -f1)" = "$ssha" ]; then
      mkdir -p "$VSITE" && xz -T0 -dc "$STAGE/site.tar.xz" | tar xf - -C "$VSITE" && touch "$VSITE/.installed"
    else say "site checksum FAILED"; fi
  fi
  if [ -f "$TOK/.ok" ] && [ ! -f "$R/prep.started" ]; then
    # prep runs from its own copy of the tree: a later call's fresh copy cannot change code under it
    rm -rf "$R/app" && mkdir -p "$R/app"
    tar cf - --exclude=./.l8stage --exclude=./.l8parts --exclude=./.git . | tar xf - -C "$R/app"
    touch "$R/prep.started"
    COMMIT=$COMMIT setsid nohup bash "$R/app/bench/gpu_8b.sh" prep > "$R/logs/prep.log" 2>&1 < /dev/null &
    say "prep started (pid $!)"
  fi
  say "staged $have of $(( tsize + ssize )) bytes; tokenizer $([ -f "$TOK/.ok" ] && echo ok || echo pending);" \
      "vLLM $(vllm_ready && echo installed || echo pending); prep $(ls "$R" | grep -o 'prep\.[a-z]*' | tr '\n' ' ')" ;;

prep)  # there (detached by stage, or in the foreground): the random 8B model, then the adapters
  export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 BENCH_COMMIT=$COMMIT
  touch "$R/prep.started"
  if [ ! -f "$MODEL/build.json" ]; then
    step build 420 "$PY" bench/llm8b_bench.py build --out "$MODEL" --config "$SHAPE" --tokenizer "$TOK" \
      || { touch "$R/prep.failed"; exit 4; }
  fi
  if [ ! -f "$ADAPTERS/a$(( K - 1 ))/adapter_config.json" ]; then
    step adapters 240 "$PY" bench/llm8b_bench.py adapters --model "$MODEL" --out "$ADAPTERS" --k "$K" --rank "$RANK" \
      || { touch "$R/prep.failed"; exit 4; }
  fi
  du -sh "$MODEL" "$ADAPTERS" 2>&1 | tee -a "$R/progress.log"
  touch "$R/prep.done" ;;

score)  # there: wait for prep, then the workloads on vLLM; results under $OUT as each chunk ends
  [ "$ENGINE" = hf ] || vllm_ready || { say "vLLM not installed yet"; exit 3; }
  waited=0
  while [ ! -f "$R/prep.done" ] && [ ! -f "$R/prep.failed" ] && (( waited < PREP_WAIT )); do sleep 5; waited=$(( waited + 5 )); done
  cp "$R/logs/prep.log" "$MODEL/build.json" "$OUT"/ 2>/dev/null
  [ -f "$R/prep.done" ] || { say "prep not done after ${waited}s: see prep.log"; exit 4; }
  say "prep done (waited ${waited}s)"
  # The exports of ../shared/device/env.sh (../shared does not travel).
  export PYTHONPATH=$VSITE${PYTHONPATH:+:$PYTHONPATH}
  export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 PYTHONUNBUFFERED=1
  export VLLM_USE_FLASHINFER_SAMPLER=0        # flashinfer is not in the bundle; without this the engine fails to start
  export VLLM_WORKER_MULTIPROC_METHOD=spawn   # fork after torch CPU work hangs engine start; needs a __main__ guard
  export VLLM_CACHE_ROOT=$R/vllm-cache        # kept on the machine: a second score call is the warm start
  export BENCH_COMMIT=$COMMIT
  nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,power.draw,clocks.sm --format=csv -l 1 \
    > "$OUT/gpu-samples.csv" 2>&1 &
  sampler=$!
  left=$(( DEADLINE - $(date +%s) )); (( left > 30 )) || left=30  # timeout 0 would mean none
  # shellcheck disable=SC2046,SC2086
  step "score-$TAG" "$left" "$PY" bench/llm8b_bench.py score --engine "$ENGINE" --model "$MODEL" --adapters $(adapter_dirs) \
    --n "$N" --prompt-tokens "$PROMPT_TOKENS" --prefix-tokens "$PREFIX" --layout "$LAYOUT" --base-n "$BASE_N" \
    --gpu-memory-utilization "$GPU_SHARE" --deadline $(( DEADLINE - 60 )) --out "$OUT/llm8b-$TAG.json" $EXTRA
  status=$?
  kill "$sampler" 2>/dev/null
  cp "$R/logs/score-$TAG.log" "$OUT/score.log" 2>/dev/null
  # vLLM's own account of the start (weights, torch.compile, CUDA graphs, KV cache size)
  grep -hE "Loading weights took|Model loading took|torch.compile take|Graph capturing finished|init engine|KV cache" \
    "$OUT/score.log" >> "$OUT/progress.log" 2>/dev/null
  say "score exit $status (0: done; 124: BUDGET ran out, the JSON holds the chunks that ended)"
  exit $status ;;
invariance)  # there: bench/batch_invariance.py on the prepared model (SHAPE=smollm2-135m), without then with
  # vLLM's batch-invariant kernels (issue 35 point 6), one process each: vLLM reads the switch at import
  [ "$ENGINE" = hf ] || vllm_ready || { say "vLLM not installed yet"; exit 3; }
  waited=0
  while [ ! -f "$R/prep.done" ] && [ ! -f "$R/prep.failed" ] && (( waited < PREP_WAIT )); do sleep 5; waited=$(( waited + 5 )); done
  [ -f "$R/prep.done" ] || { say "prep not done after ${waited}s"; cp "$R/logs/prep.log" "$OUT"/ 2>/dev/null; exit 4; }
  say "prep done (waited ${waited}s)"
  export PYTHONPATH=$VSITE${PYTHONPATH:+:$PYTHONPATH}
  export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 PYTHONUNBUFFERED=1
  export VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_WORKER_MULTIPROC_METHOD=spawn VLLM_CACHE_ROOT=$R/vllm-cache BENCH_COMMIT=$COMMIT
  host=${INV_VLLM:-'{"gpu_memory_utilization": 0.3, "cudagraph_mode": "PIECEWISE", "cudagraph_capture_sizes": [1, 8, 64, 512]}'}
  status=0
  for mode in ${INV_MODES:-off on}; do
    left=$(( DEADLINE - $(date +%s) )); (( left > 30 )) || { say "no time left for $mode"; status=124; break; }
    # shellcheck disable=SC2046
    if [ "$ENGINE" = hf ]; then opts=(--engine hf); else opts=(--vllm-options "$host"); fi  # hf: the CPU rehearsal
    [ "$mode" = on ] && opts+=(--batch-invariant)
    step "invariance-$mode" "$left" "$PY" bench/batch_invariance.py run --model "$MODEL" --adapters $(adapter_dirs) \
      --n "${INV_N:-2000}" "${opts[@]}" --out "$OUT/invariance-$mode.json" || status=$?
    cp "$R/logs/invariance-$mode.log" "$OUT"/ 2>/dev/null
  done
  "$PY" bench/batch_invariance.py table "$OUT"/invariance-*.json > "$OUT/invariance.md" 2>&1
  cat "$OUT/invariance.md"
  exit $status ;;
*) echo "unknown mode $MODE"; exit 2 ;;
esac
