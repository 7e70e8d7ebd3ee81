"""Probe (written on a CPU box; run on the GPU machine from the tree's root with a yue2-3b checkpoint in out/ck:
`python docs/measured/2026-12-05-cpu-s48-decode-warm-probe.py`): does `load_decoder` now compile what the first
song's decode used to (the tf32x3 kernels, the snake on channels-last views), so that the first decode takes its
steady time? Each case in a fresh process with empty Triton and Inductor caches: seconds for `load_decoder`, the
first and the second `decode_audio` of a reference track's latents (5,371 frames), in the default precision and
in fp32.
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
    from stages.config_json import from_checkpoint

    cfg = from_checkpoint("out/ck/model", "out/ck/vae").vae
    start = time.perf_counter()
    decoder = vae.load_decoder("out/ck/vae", cfg, device="cuda")
    torch.cuda.synchronize()
    load = time.perf_counter() - start
    latents = np.random.default_rng(0).standard_normal((FRAMES, cfg.latent_dim)).astype(np.float32)
    times = []
    for _ in range(2):
        start = time.perf_counter()
        vae.decode_audio(decoder, latents, cfg.decode_core_frames, cfg.decode_halo_frames, precision)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return {"precision": precision, "load_s": load, "first_s": times[0], "second_s": times[1]}


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2])))
        return
    for precision in ("tf32x3", "fp32"):
        env = {**os.environ, "TRITON_CACHE_DIR": tempfile.mkdtemp(), "TORCHINDUCTOR_CACHE_DIR": tempfile.mkdtemp()}
        out = subprocess.run([sys.executable, __file__, "--child", precision], env=env, capture_output=True,
                             text=True, check=False)
        if out.returncode:
            print(precision, "failed:", out.stderr[-3000:])
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{precision:7s} load_decoder {r['load_s']:.2f} s, first decode {r['first_s']:.3f} s, "
              f"second {r['second_s']:.3f} s")


if __name__ == "__main__":
    main()
