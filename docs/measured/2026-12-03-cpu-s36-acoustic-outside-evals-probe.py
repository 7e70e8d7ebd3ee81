"""Where an acoustic chunk's time goes outside its 64 steady velocity evaluations (2026-12-03, session s36; written
on the CPU box). Why: `farm bench song` gave acoustic 4.28 s for the reference track while 64 × the steady
evaluation (`farm bench acoustic`, 62.08 ms) is 3.97 s: ~0.3 s a track (7 %) lies elsewhere — the chunk's causal AR
prefill over 10,372 tokens, filling the prefix buffers, the first (eager) evaluation, the graph capture, the copy
back. Times each part of `AcousticEngine.solve_chunk`'s work in order, synchronised, for two chunks in a row (the
second is what a song after the first sees), then the whole `solve_chunk` twice.
Run on an H200 from the repository root after `farm init-checkpoint out/ck --config yue2-3b --device cuda`."""
import pathlib
import sys
import time

import numpy as np
import torch

sys.path.insert(0, ".")
from stages.acoustic import AcousticEngine, chunk_tokens, midpoint_solve, song_noise  # noqa: E402
from stages.requests import open_checkpoint  # noqa: E402
from stages.transformer import AR, NAR, ar_prefill, nar_kv_buffers  # noqa: E402
from stages.weights import load_model  # noqa: E402


class Clock:
    def __init__(self):
        torch.cuda.synchronize()
        self.t = time.perf_counter()

    def lap(self, what):
        torch.cuda.synchronize()
        now = time.perf_counter()
        print(f"  {what:<44} {1e3 * (now - self.t):9.1f} ms", flush=True)
        self.t = now


def main() -> None:
    ckpt = open_checkpoint(pathlib.Path("out/ck/model"), pathlib.Path("out/ck/vae"))
    cfg = ckpt.cfg
    net = load_model(ckpt.model_dir, cfg, {AR, NAR}, device="cuda")
    engine = AcousticEngine(net, cfg.tokens)
    print(f"attention: {engine.attention.name}", flush=True)
    rng = np.random.default_rng(0)
    prefix = [int(t) for t in rng.integers(0, cfg.tokens.codec_offset, 5000)]
    codes = rng.integers(0, cfg.tokens.codebook, 5371).astype(np.int32)
    ids = chunk_tokens(prefix, codes, 0, 5371, cfg.tokens)
    noise = song_noise(5371, cfg.model.latent_dim, 0)
    with torch.inference_mode():
        for chunk in range(2):
            print(f"chunk {chunk}", flush=True)
            c = Clock()
            tokens = torch.tensor(ids, dtype=torch.long, device="cuda")
            _, kv = ar_prefill(net, tokens)
            c.lap(f"AR prefill ({len(ids)} tokens)")
            buffers = nar_kv_buffers(kv, len(ids), 5371 + 2, engine.attention.seq_major)
            del kv
            c.lap("prefix buffers")
            v = engine.evaluator(len(ids), len(ids), buffers)
            x = noise.to(device="cuda", dtype=engine.dtype)
            c.lap("noise to the device")
            v(x, 20.0)
            c.lap("evaluation 1 (eager, then captured)")
            v(x, 19.0)
            c.lap("evaluation 2 (first replay)")
            for _ in range(10):
                v(x, 1.0)
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(10):
                v(x, 1.0)
            torch.cuda.synchronize()
            print(f"  {'steady evaluation (mean of 10)':<44} {(time.perf_counter() - t) / 10 * 1e3:9.2f} ms",
                  flush=True)
            c = Clock()
            out = midpoint_solve(v, x, 32)
            c.lap("the 32-step solve on the captured graph")
            out.float().cpu()
            c.lap("latents back to the CPU")
        for rnd in range(2):
            c = Clock()
            engine.solve_chunk(ids, noise, 32)
            c.lap(f"solve_chunk whole, round {rnd}")


if __name__ == "__main__":
    main()
