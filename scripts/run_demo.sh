#!/usr/bin/env bash
# Start a Celery worker (both queues: the CPU stands in for the GPU) and the web server; print the URL.
set -euo pipefail
PORT=${PORT:-8000}
mkdir -p var/log
.venv/bin/celery -A config worker -Q default,gpu --concurrency 1 --prefetch-multiplier 1 -n demo@%h \
  --loglevel INFO > var/log/worker.log 2>&1 &
WORKER=$!
trap 'kill $WORKER 2>/dev/null || true' EXIT INT TERM
echo
echo "Celery worker pid $WORKER (log: var/log/worker.log); round 1 of the demo project runs there."
echo "Users and passwords (also in ${VAR_DIR:-var}/demo-passwords.txt):"
cat "${VAR_DIR:-var}/demo-passwords.txt"
echo
echo "  Open http://127.0.0.1:${PORT}/ and log in as 'annotator' to label items."
echo
.venv/bin/python manage.py runserver "127.0.0.1:${PORT}" --noreload
