"""The decoder's snake compiled with only the length dynamic (2026-12-04, session s37; written on the CPU box, not
yet run). Why: the acoustic layer's Inductor kernels ran 2× faster once only the chunk length was dynamic (s37:
7.9 → 3.9 ms an evaluation); the decoder's fused snake (`stages/vae.py` `_fused_snake`) is compiled with every size
dynamic, the channel count too. Here it is compiled with the channels fixed (one compile per decoder width, six in
yue2-3b's VAE) and the length marked dynamic. The FP32 decode is ~0.55 s a track, most of it cuDNN's FP32
convolutions (~0.44 s); this says how much of the rest the snake was.
Profiles one FP32 decode of the reference track's 5,371 frames (the engine's tiling) per variant: GPU time by
kernel family, the snake's kernels, wall time (best of three), and whether the audio is the same bits.
Run on an H200 from the repository root after `farm init-checkpoint out/ck --config yue2-3b --device cuda`."""
import collections
import pathlib
import sys
import time

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, ".")
from stages import vae  # noqa: E402
from stages.compiled import compiled  # noqa: E402
from stages.requests import open_checkpoint  # noqa: E402


def length_only_snake():
    inner = compiled(vae.snake, fullgraph=True, dynamic=False)

    def run(x, log_alpha, log_beta):
        torch._dynamo.mark_dynamic(x, 2)
        return inner(x, log_alpha, log_beta)
    return run


def measure(decoder, latents, core, halo, name):
    audio = vae.decode_audio(decoder, latents, core, halo)          # compiles what it needs
    best = float("inf")
    for _ in range(3):
        torch.cuda.synchronize()
        t = time.perf_counter()
        vae.decode_audio(decoder, latents, core, halo)
        best = min(best, time.perf_counter() - t)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        vae.decode_audio(decoder, latents, core, halo)
        torch.cuda.synchronize()
    totals = collections.Counter()
    for e in prof.events():
        if e.device_type.name == "CUDA":
            totals[e.name] += e.device_time_total
    snake_us = sum(us for n, us in totals.items() if "triton" in n)
    print(f"{name:<22} wall {best * 1e3:7.1f} ms; GPU {sum(totals.values()) / 1e3:7.1f} ms, of which the snake's "
          f"Triton kernels {snake_us / 1e3:6.1f} ms", flush=True)
    for n, us in totals.most_common(6):
        print(f"    {us / 1e3:8.2f} ms  {n[:100]}", flush=True)
    return audio


def main() -> None:
    ckpt = open_checkpoint(pathlib.Path("out/ck/model"), pathlib.Path("out/ck/vae"))
    cfg = ckpt.cfg.vae
    decoder = vae.load_decoder(ckpt.vae_dir, cfg, device="cuda")
    latents = np.random.default_rng(0).standard_normal((5371, cfg.latent_dim)).astype(np.float32)
    core, halo = cfg.decode_core_frames, cfg.decode_halo_frames
    before = measure(decoder, latents, core, halo, "every size dynamic")
    vae._fused_snake.cache_clear()
    fused = length_only_snake()
    vae._fused_snake = lambda: fused
    after = measure(decoder, latents, core, halo, "length only dynamic")
    print(f"same audio bits {np.array_equal(before, after)}; max abs {np.abs(before - after).max():.3e}", flush=True)


if __name__ == "__main__":
    main()
