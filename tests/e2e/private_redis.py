"""A Redis database this test run owns: the first of db 1–15 that is empty and that this run claims
with an owner key (SET NX), so tests never read or delete anything of another process sharing the
server. Only a database this run claimed (empty when claimed) is flushed at the end."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import redis

OWNER_KEY = "alann:test-owner"


@contextlib.contextmanager
def private_redis(host: str = "127.0.0.1", port: int = 6379) -> Iterator[str]:
    token = f"e2e-{uuid.uuid4().hex}"
    for db in range(1, 16):
        client = redis.Redis(host=host, port=port, db=db)
        if client.dbsize() != 0 or not client.set(OWNER_KEY, token, nx=True):
            continue
        if client.dbsize() != 1:  # someone else wrote in the same instant: leave it to them
            if client.get(OWNER_KEY) == token.encode():
                client.delete(OWNER_KEY)
            continue
        try:
            yield f"redis://{host}:{port}/{db}"
        finally:
            if client.get(OWNER_KEY) == token.encode():
                client.flushdb()  # ours: empty when claimed, everything in it came from this test
        return
    raise RuntimeError("no empty Redis database (1-15) to claim for the browser test")
