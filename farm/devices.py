"""The one place that turns a --device choice into a torch device string."""
from __future__ import annotations


def pick_device(spec: str = "auto") -> str:
    import torch

    if spec == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if spec.startswith("cuda") and not torch.cuda.is_available():
        from .errors import UserError

        raise UserError(f"--device {spec}: no CUDA device is visible")
    return spec
