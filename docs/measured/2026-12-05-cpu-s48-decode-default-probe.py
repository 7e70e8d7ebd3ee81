"""Probe (written on a CPU box; run on the GPU machine from the tree's root: `python
docs/measured/2026-12-05-cpu-s48-decode-default-probe.py OUT.json`): what the tf32x3 default costs beyond its
steady time — the first decode in a fresh process (Triton compiling the kernel's variants, with an empty cache and
again with the cache the first run left) and the card memory it holds — against cuDNN FP32.

Each measurement runs in a child process of its own (a fresh CUDA context, fresh Triton in-memory state), on a
reference track's latents (5,371 frames, the release decoder's widths, random weights):
- first and second `decode_audio` call, seconds (device synchronised);
- torch's peak allocated bytes over the two calls, and the allocated bytes after them (the plan's split weights
  stay with the decoder).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

FRAMES = 5371


def child(precision: str) -> dict:
    import numpy as np
    import torch

    from stages import vae
    from stages.config import from_toml

    cfg = from_toml("configs/models/yue2-3b.toml").vae
    decoder = vae.OobleckDecoder(cfg)
    raw = {k: v for k, v in vae.random_vae_tensors(cfg, 0).items() if k.startswith("decoder.")}
    decoder.load_state_dict(vae._fold(raw), strict=True)
    decoder = decoder.cuda().eval().requires_grad_(False)
    latents = np.random.default_rng(0).standard_normal((FRAMES, cfg.latent_dim)).astype(np.float32)
    torch.cuda.synchronize()
    weights = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(2):
        start = time.perf_counter()
        vae.decode_audio(decoder, latents, cfg.decode_core_frames, cfg.decode_halo_frames, precision)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return {"precision": precision, "first_s": times[0], "second_s": times[1],
            "decoder_bytes": weights, "peak_bytes": torch.cuda.max_memory_allocated(),
            "held_after_bytes": torch.cuda.memory_allocated()}


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2])))
        return
    results = []
    cache = tempfile.mkdtemp(prefix="triton-cache-")
    for precision, label in (("fp32", "fp32"), ("tf32x3", "tf32x3, empty Triton cache"),
                             ("tf32x3", "tf32x3, Triton cache warm")):
        env = {**os.environ, "TRITON_CACHE_DIR": cache}
        out = subprocess.run([sys.executable, __file__, "--child", precision], env=env, capture_output=True,
                             text=True, check=False)
        if out.returncode:
            print(label, "failed:", out.stderr[-3000:])
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1]) | {"label": label}
        results.append(r)
        gib = 2 ** 30
        print(f"{label:28s} first {r['first_s']:.3f} s, second {r['second_s']:.3f} s; decoder "
              f"{r['decoder_bytes'] / gib:.3f} GiB, peak {r['peak_bytes'] / gib:.3f} GiB, held after "
              f"{r['held_after_bytes'] / gib:.3f} GiB")
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
