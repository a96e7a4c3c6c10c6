"""Which device the heavy work runs on, asked in one place (torch is imported only when asked)."""

from __future__ import annotations


def cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def torch_device(preferred: str | None = None) -> str:
    """``preferred`` when given, else "cuda" where a GPU is visible, else "cpu"."""
    return preferred or ("cuda" if cuda_available() else "cpu")


def device_kind() -> str:
    """ "gpu" or "cpu": what a round's cost records next to each step's seconds."""
    return "gpu" if cuda_available() else "cpu"
