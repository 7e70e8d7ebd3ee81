"""Probe (written on the CPU box in s51; run from the tree's root on the GPU machine, yue2-3b checkpoint in out/ck,
FlashAttention-4 importable: `python docs/measured/2026-12-05-cpu-s51-fa4-cache-probe.py OUT_DIR`): what FA4's
compile costs a worker's start, with and without FA4's own on-disk cache.

s50's 12-track album on an H100 spent 9.1 s building the acoustic engine with FA4 against 1.1–1.5 s without it.
FA4 4.0.0b40 keeps its compiled kernels on disk only with FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1, which the tree
now sets unless the variable is set. Four fresh processes, in this order, sharing warm Triton and Inductor caches
(the first fills them): the cache off twice, then on twice (on an empty folder). Each loads the AR and NAR weights,
builds the acoustic engine (its warm-up compiles the layer and FA4's kernels) and solves a 1,000-token prefix,
1,000-frame chunk for one ODE step (two evaluations, a second shape for FA4): the seconds of each, and the chunk's
latents' hash, which must not change with the cache.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = """
import hashlib, json, os, time, torch
start = time.perf_counter()
from stages.acoustic import AcousticEngine
from stages.requests import open_checkpoint
from stages.transformer import AR, NAR
from stages.weights import load_model

laps, clock = {}, start
def lap(name):
    global clock
    torch.cuda.synchronize()
    now = time.perf_counter()
    laps[name], clock = round(now - clock, 3), now

ckpt = open_checkpoint("out/ck/model", "out/ck/vae")
model = load_model(ckpt.model_dir, ckpt.cfg, {AR, NAR}, device="cuda")
lap("imports and weights")
engine = AcousticEngine(model, ckpt.cfg.tokens)
lap("acoustic engine")
noise = torch.randn(1000, model.cfg.latent_dim, generator=torch.Generator().manual_seed(0))
x = engine.solve_chunk([ckpt.cfg.tokens.music_start] * 1000, noise, steps=1)
lap("chunk")
flag = os.environ.get("FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED")
print(json.dumps({"attention": engine.attention.name, "cache": flag, "laps": laps,
                  "latents_sha": hashlib.sha256(x.numpy().tobytes()).hexdigest()[:16]}))
"""


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    caches = Path(tempfile.mkdtemp(prefix="s51-fa4-"))
    env = {**os.environ, "TRITON_CACHE_DIR": str(caches / "triton"),
           "TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"),
           "FLASH_ATTENTION_CUTE_DSL_CACHE_DIR": str(caches / "fa4")}
    rows = []
    for case, flag in (("off", "0"), ("off", "0"), ("on", "1"), ("on", "1")):
        start = time.perf_counter()
        run = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300,
                             env={**env, "FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED": flag})
        row = {"case": case, "rc": run.returncode, "process_seconds": round(time.perf_counter() - start, 2)}
        if run.returncode == 0:
            row.update(json.loads(run.stdout.strip().splitlines()[-1]))
        else:
            row["stderr"] = run.stderr[-3000:]
        rows.append(row)
        print(json.dumps(row), flush=True)
    (out / "s51-fa4-cache.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
