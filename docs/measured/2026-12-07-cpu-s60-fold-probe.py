"""The acoustic layer cut where the long passes save memory traffic (2026-12-07, session s60; written on the CPU box).
Why: an H100 evaluation spent 0.68 ms copying the NAR rows' K/V into the prefix buffers and 0.82 ms on the down
product's residual add (…-h100-s59-acoustic-time.log). `…-cpu-s60-layer-cut.patch` has the compiled head store
K/V itself and add the residual in the next layer's head (transformer.layer_head_into / layer_tail_open). This
times the reference chunk's `solve_chunk` (AR prefill, capture, 64 evaluations) with whichever tree is first on the
path — run it once with the tree as committed (`git archive HEAD stages` into _old/, PYTHONPATH=_old:…) and once
with the patch applied, on one machine — and saves the latents, so the two trees' songs can be compared.
Usage: python3 …-s60-fold-probe.py TAG (from the repository root, out/ck a yue2-3b checkpoint, FA4 on the path)."""
import os
import sys
import time

import numpy as np
import torch

from stages.acoustic import AcousticEngine, chunk_tokens, song_noise
from stages.requests import open_checkpoint
from stages.transformer import AR, NAR
from stages.weights import load_model

tag = sys.argv[1]
import stages  # noqa: E402
print(tag, "stages from", os.path.dirname(stages.__file__), torch.cuda.get_device_name())
ckpt = open_checkpoint("out/ck/model", "out/ck/vae")
cfg = ckpt.cfg
net = load_model("out/ck/model", cfg, {AR, NAR}, device="cuda")
t0 = time.perf_counter()
engine = AcousticEngine(net, cfg.tokens)
print(f"engine build (warm-up compiles) {time.perf_counter() - t0:.1f} s, attention {engine.attention.name}")
rng = np.random.default_rng(0)
prefix = [int(t) for t in rng.integers(0, cfg.tokens.codec_offset, 5000)]
codes = rng.integers(0, cfg.tokens.codebook, 5371).astype(np.int32)
ids = chunk_tokens(prefix, codes, 0, 5371, cfg.tokens)
noise = song_noise(5371, cfg.model.latent_dim, 0)
times = []
for _ in range(4):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    latents = engine.solve_chunk(ids, noise, 32)
    times.append(time.perf_counter() - t0)
print(f"solve_chunk of the reference chunk ({len(ids)} AR tokens, 5371 frames), s: "
      + " / ".join(f"{t:.3f}" for t in times))
print(f"peak {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
np.save(os.path.join(os.environ.get("OUT", "."), f"s60-latents-{tag}.npy"), latents.numpy())
