"""Probe (s51, the 2-core CPU box): the staged loader's host copy, from a mapped safetensors file into a 64 MiB
buffer, with torch on one thread as in a farm worker (farm/workers.py: torch.set_num_threads(--threads), 1 by
default), done by one Python thread or by two, each copying half of every part (`stages.checkpoint.copy_in_slices`).
A yue2-3b worker's weights lap is 1.3-1.4 s in a Ray worker against 0.41-0.58 s for the same call in a plain process
of 16 torch threads (docs/benchmarks.md, twenty-second session).
Run from the tree's root: PYTHONPATH=$PWD python docs/measured/2026-12-05-cpu-s51-host-copy-threads.py
"""
import os
import time
from concurrent.futures import ThreadPoolExecutor

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from stages.checkpoint import copy_in_slices

PATH = "/tmp/s51-host-copy.safetensors"
if not os.path.exists(PATH):
    save_file({"w": torch.randn(256, 1024, 1024).bfloat16()}, PATH)       # 512 MiB
torch.set_num_threads(1)
buffer = torch.empty(64 << 20, dtype=torch.uint8)


def rate(threads: int) -> float:
    with safe_open(PATH, framework="pt") as f, ThreadPoolExecutor(threads) as pool:
        src = f.get_tensor("w").reshape(-1).view(torch.uint8)
        start = time.perf_counter()
        for a in range(0, src.numel(), buffer.numel()):
            n = min(buffer.numel(), src.numel() - a)
            copy_in_slices(pool, buffer[:n], src[a:a + n], threads)
        return src.numel() / (time.perf_counter() - start) / 1e9


for round_ in range(3):
    print(f"round {round_}: one thread {rate(1):.2f} GB/s, two threads {rate(2):.2f} GB/s", flush=True)
