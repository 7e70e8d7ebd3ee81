"""Probe (session s54): do several decode tiles in one batch raise the VAE decode's throughput?

Issue 9 asks for decode "tiles of several songs in one batch". The decode runs one tile at a time (stages/vae.py):
a reference track is six tiles of the default core plus halos. Here a tile of that geometry goes through the
decoder alone, and 2 and 4 of them in one batch, with the default tf32x3 kernels and with cuDNN's FP32; printed are
ms per tile, the batch's gain, peak memory, and whether a tile's audio in the batch is the same bits as alone.

Run on the device: python3 docs/measured/2026-12-06-cpu-s54-decode-batch-probe.py out/ck
"""
from __future__ import annotations

import functools
import sys
import time

import torch

sys.path.insert(0, ".")
from farm.models import resolve_model  # noqa: E402
from stages import vae_tf32x3  # noqa: E402
from stages.requests import open_checkpoint  # noqa: E402
from stages.vae import _tf32, load_decoder  # noqa: E402


def timed(fn, n: int) -> float:
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / n


def main(model_dir: str) -> None:
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    paths = resolve_model(model_dir, None)
    cfg = open_checkpoint(paths.model_dir, paths.vae_dir).cfg
    decoder = load_decoder(paths.vae_dir, cfg.vae, device="cuda")
    frames = cfg.vae.decode_core_frames + 2 * cfg.vae.decode_halo_frames
    gen = torch.Generator("cuda").manual_seed(0)
    z = torch.randn(4, cfg.vae.latent_dim, frames, device="cuda", generator=gen)
    runs = {"tf32x3": functools.partial(vae_tf32x3.forward, vae_tf32x3.plan_for(decoder)), "fp32": decoder}
    print(f"a tile of {frames} latent frames")
    with torch.inference_mode(), _tf32(False):
        for name, run in runs.items():
            alone = run(z[:1])
            for batch in (1, 2, 4):
                torch.cuda.reset_peak_memory_stats()
                s = timed(lambda: run(z[:batch]), 5)
                peak = torch.cuda.max_memory_allocated() / 2 ** 30
                same = torch.equal(run(z[:batch])[:1], alone)
                print(f"  {name:6} batch {batch}: {s * 1e3:7.2f} ms, {s / batch * 1e3:6.2f} ms a tile, peak "
                      f"{peak:.2f} GiB, tile 0 the same bits as alone: {same}")


if __name__ == "__main__":
    main(sys.argv[1])
