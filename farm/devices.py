"""The one place that turns a --device choice into a torch device string."""
from __future__ import annotations


def pick_device(spec: str = "auto") -> str:
    import re

    import torch

    from .errors import UserError

    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", spec):
        raise UserError(f"--device {spec}: expected auto, cpu, cuda or cuda:N")
    if spec == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if spec.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"--device {spec}: no CUDA device is visible")
    if spec.startswith("cuda:") and int(spec[5:]) >= torch.cuda.device_count():
        raise UserError(f"--device {spec}: only {torch.cuda.device_count()} CUDA device(s) are visible")
    return spec
