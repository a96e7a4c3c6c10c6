"""Files another process may read while they are written: write beside the target, then one rename,
so a reader sees the old file, or the new one whole, never half of it."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def atomic_write(path: Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp)`` on a temp path beside ``path`` (same suffix, so numpy keeps the name), then
    rename it over ``path``. A failed write leaves no temp file behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp{path.suffix}")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: Path, text: str) -> Path:
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def atomic_write_json(path: Path, payload: Any) -> Path:
    return atomic_write_text(path, json.dumps(payload))


def atomic_save_npy(path: Path, array: np.ndarray) -> Path:
    return atomic_write(path, lambda tmp: np.save(tmp, array, allow_pickle=False))


def atomic_save_npz(path: Path, **arrays: np.ndarray) -> Path:
    return atomic_write(path, lambda tmp: np.savez(tmp, **arrays))  # type: ignore[arg-type]
