"""Files another process may read while they are written: write beside the target, then one rename,
so a reader sees the old file, or the new one whole, never half of it."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np


def atomic_write(path: Path, write: Callable[[IO[bytes]], object], *, durable: bool = False) -> Path:
    """Call ``write(f)`` on a temp file beside ``path``, then rename it over ``path``. The temp name
    ends in ``.tmp``, so a reader globbing ``*.npz`` / ``*.npy`` never picks it up; ``durable`` also
    fsyncs before the rename. A failed write leaves no temp file behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        with tmp.open("wb") as f:
            write(f)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: Path, text: str) -> Path:
    return atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def atomic_write_json(path: Path, payload: Any) -> Path:
    return atomic_write_text(path, json.dumps(payload))


def atomic_save_npy(path: Path, array: np.ndarray, *, durable: bool = False) -> Path:
    return atomic_write(path, lambda f: np.save(f, array, allow_pickle=False), durable=durable)


def atomic_save_npz(path: Path, **arrays: np.ndarray) -> Path:
    return atomic_write(path, lambda f: np.savez(f, **arrays))  # type: ignore[arg-type]
