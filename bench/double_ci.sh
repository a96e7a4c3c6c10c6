#!/usr/bin/env bash
# Issues 15 and 34: the whole CI (`.ci/run`, i.e. `make test`) twice at once on one machine — two fresh
# clones of this checkout, one Redis, one PostgreSQL, the default settings in both (the same PG_URL:
# each run names its own test database) — and both must pass. Logs (with the commit first) in OUT
# (default bench/raw/<today>/double-<commit>/).
#
#   bash bench/double_ci.sh
set -uo pipefail
cd "$(dirname "$0")/.."
COMMIT=$(git rev-parse --short HEAD)
OUT=${OUT:-bench/raw/$(date +%F)/double-$COMMIT}
WORK=${WORK:-/tmp/alann-double-ci}
SHARED=$(cd ../shared && pwd)
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)  # absolute: each run writes its log from inside its clone
rm -rf "$WORK" && mkdir -p "$WORK"
for n in 1 2; do
  mkdir -p "$WORK/c$n" && git clone -q . "$WORK/c$n/p" && ln -s "$SHARED" "$WORK/c$n/shared"
done
for n in 1 2; do
  (cd "$WORK/c$n/p" && { echo "commit $COMMIT clone $n started $(date -u +%FT%TZ), default settings"
     CI=true bash .ci/run; echo "rc=$? finished $(date -u +%FT%TZ)"; } > "$OUT/run-$n.log" 2>&1) &
done
wait
grep -H -E "passed|failed|^rc=" "$OUT"/run-*.log
! grep -L "^rc=0" "$OUT"/run-*.log | grep -q .
