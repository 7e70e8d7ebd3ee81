"""What the acoustic engine's first evaluation at a new chunk length pays, and what the τ copy costs the ODE
(2026-12-07, session s59; written on the CPU box). Why: the s59 time probe's first eager evaluation at the reference
length took 2,754 ms against 56 ms for the next one, on an engine already warmed up at a small chunk; if every new
length pays that, every song does. MERGE=eager runs the last wave's merge as the s58 tree did (seven eager
kernels), MERGE=compiled (default) as the engine now does; run with TORCH_LOGS=recompiles to see what Dynamo
recompiles. Then the reference chunk's 32-step ODE with τ copied as the engine now does (pinned, no wait) against
the blocking copy it had. Run from the repository root with out/ck (yue2-3b) and FA4 on the path."""
import os
import pathlib
import sys
import time

import numpy as np
import torch

sys.path.insert(0, ".")
from stages import acoustic, nar_attention  # noqa: E402
from stages.acoustic import AcousticEngine, chunk_tokens, song_noise  # noqa: E402
from stages.requests import open_checkpoint  # noqa: E402
from stages.transformer import AR, NAR  # noqa: E402
from stages.weights import load_model  # noqa: E402


def blocking_tau(raw, dtype, shift, device):
    sigma = torch.sigmoid(torch.tensor(raw, dtype=torch.float64).to(dtype).to(device))
    return sigma if shift == 1.0 else shift * sigma / (1 + (shift - 1) * sigma)


def timed(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, time.perf_counter() - t0


def main() -> None:
    if os.environ.get("MERGE", "compiled") == "eager":
        nar_attention.compiled = lambda fn, **settings: fn
    ckpt = open_checkpoint(pathlib.Path("out/ck/model"), pathlib.Path("out/ck/vae"))
    cfg = ckpt.cfg
    net = load_model(ckpt.model_dir, cfg, {AR, NAR}, device="cuda")
    _, t_build = timed(lambda: AcousticEngine(net, cfg.tokens))
    engine = AcousticEngine(net, cfg.tokens)
    print(f"{torch.cuda.get_device_name()}, merge {os.environ.get('MERGE', 'compiled')}, engine built in "
          f"{t_build:.1f} s (the second build, in the same process, is what is timed below)", flush=True)
    rng = np.random.default_rng(0)
    for frames, prefix_len in ((5371, 5000), (3000, 2000), (4402, 3000), (1500, 1000), (5371, 5000)):
        prefix = [int(t) for t in rng.integers(0, cfg.tokens.codec_offset, prefix_len)]
        codes = rng.integers(0, cfg.tokens.codebook, frames).astype(np.int32)
        ids = chunk_tokens(prefix, codes, 0, frames, cfg.tokens)
        noise = song_noise(frames, cfg.model.latent_dim, 0)
        times = [timed(lambda: engine.solve_chunk(ids, noise, 1))[1] for _ in range(2)]
        print(f"{frames} frames after {prefix_len} prefix tokens, one ODE step (2 evaluations): first "
              f"{times[0] * 1e3:.0f} ms, again {times[1] * 1e3:.0f} ms", flush=True)
    prefix = [int(t) for t in rng.integers(0, cfg.tokens.codec_offset, 5000)]
    codes = rng.integers(0, cfg.tokens.codebook, 5371).astype(np.int32)
    ids = chunk_tokens(prefix, codes, 0, 5371, cfg.tokens)
    noise = song_noise(5371, cfg.model.latent_dim, 0)
    for rnd in range(2):
        lat_new, t_new = timed(lambda: engine.solve_chunk(ids, noise, 32))
        acoustic.timestep_tau = blocking_tau
        lat_old, t_old = timed(lambda: engine.solve_chunk(ids, noise, 32))
        acoustic.timestep_tau = _pinned
        print(f"round {rnd}: the reference chunk, 32 steps: τ pinned {t_new:.3f} s, τ blocking {t_old:.3f} s; "
              f"same latents {torch.equal(lat_new, lat_old)}", flush=True)


_pinned = acoustic.timestep_tau

if __name__ == "__main__":
    main()
