#!/usr/bin/env bash
# Start Redis and PostgreSQL if nothing answers on their ports (CI and fresh machines).
set -u
answers() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
if ! answers 6379; then
  echo "redis: not answering on 6379, starting it"
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no || true
  for _ in $(seq 50); do answers 6379 && break; sleep 0.1; done
fi
answers 6379 && echo "redis: ok" || { echo "redis: FAILED to start" >&2; exit 1; }
if [[ "${NEED_POSTGRES:-1}" == 1 ]]; then
  if ! answers 5432; then
    echo "postgres: not answering on 5432, starting it"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
    for _ in $(seq 100); do answers 5432 && break; sleep 0.1; done
  fi
  answers 5432 && echo "postgres: ok" || { echo "postgres: FAILED to start" >&2; exit 1; }
fi
