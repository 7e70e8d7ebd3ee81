"""Does a song's acoustic stage depend on what Inductor's timings chose? (2026-12-08, session s62; written on the CPU
box.) Inductor times a reduction's candidate configurations (block sizes, warps) on the card at first launch and may
pad a product after timing it; on two H100s the same tree gave latents 0.009926 and 0.009992 mean abs from FP32
(`…-s61-` and `…-s62-bench-acoustic.json`), while one machine gave the same bits twice. This builds the acoustic engine
with Inductor's caches off (so every choice is timed afresh), solves the reference chunk three times, saves the
latents and prints the times. Run it with TORCHINDUCTOR_DISTORT_BENCHMARKING_RESULT unset and set to "inverse"
(Inductor then keeps the slowest candidate), and with the farm's deterministic option (`stages.compiled`) kept
("on") or cleared ("off"): if the two "off" runs differ and the two "on" runs agree, the option is what keeps a
song the same from card to card.
Usage: TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 python3 …-s62-inductor-determinism-probe.py on|off TAG [FRAMES]
(from the repository root; out/ck a yue2-3b checkpoint). FRAMES: a shorter chunk (that many frames after as many
prefix tokens) for a run that only compares bits, e.g. four runs side by side on one card."""
import os
import sys
import time

import numpy as np
import torch

from stages import compiled
from stages.acoustic import AcousticEngine, chunk_tokens, song_noise
from stages.requests import open_checkpoint
from stages.transformer import AR, NAR
from stages.weights import load_model

mode, tag = sys.argv[1], sys.argv[2]
frames = int(sys.argv[3]) if len(sys.argv) > 3 else 5371
if mode == "off":
    compiled.INDUCTOR_OPTIONS.clear()
print(tag, mode, "options", compiled.INDUCTOR_OPTIONS, "distort",
      repr(os.environ.get("TORCHINDUCTOR_DISTORT_BENCHMARKING_RESULT", "")), torch.cuda.get_device_name())
ckpt = open_checkpoint("out/ck/model", "out/ck/vae")
cfg = ckpt.cfg
net = load_model("out/ck/model", cfg, {AR, NAR}, device="cuda")
t0 = time.perf_counter()
engine = AcousticEngine(net, cfg.tokens)
print(f"engine build (warm-up compiles) {time.perf_counter() - t0:.1f} s, attention {engine.attention.name}")
rng = np.random.default_rng(0)
prefix = [int(t) for t in rng.integers(0, cfg.tokens.codec_offset, 5000 if frames == 5371 else frames)]
codes = rng.integers(0, cfg.tokens.codebook, frames).astype(np.int32)
ids = chunk_tokens(prefix, codes, 0, frames, cfg.tokens)
noise = song_noise(frames, cfg.model.latent_dim, 0)
times = []
for _ in range(3):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    latents = engine.solve_chunk(ids, noise, 32)
    times.append(time.perf_counter() - t0)
print(f"solve_chunk of a chunk of {frames} frames, s: " + " / ".join(f"{t:.3f}" for t in times))
np.save(os.path.join(os.environ.get("OUT", "."), f"s62-latents-{tag}.npy"), latents.numpy())
