"""Seconds per phase of a start (a farm worker's load, the AR engine's build), the device's queued work included.

Each lap waits for the caller's own CUDA stream only (`sync_stream`, which the AR step uses too): a card's other
stages may be busy on streams of their own (farm/workers.py), and neither a start nor the AR step waits for them.
"""
from __future__ import annotations

import time

import torch


class Laps:
    """`laps(phase)`: the seconds since the last lap (or since the start), into `into[phase]`."""

    def __init__(self, device: torch.device | str, into: dict[str, float]):
        self.device, self.into, self.clock = torch.device(device), into, time.perf_counter()

    def __call__(self, phase: str) -> None:
        sync_stream(self.device)
        now = time.perf_counter()
        self.into[phase], self.clock = now - self.clock, now


def sync_stream(device: torch.device) -> None:
    """Wait for this thread's stream on `device` (nothing to wait for on the CPU)."""
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()
