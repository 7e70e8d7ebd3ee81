"""The acoustic layer compiled with Inductor's GEMM autotuning (2026-12-03, session s35; written on the CPU box, not
yet run: the session's device time was spent). Why: a velocity evaluation of the reference chunk spends ~8 ms of its
~67 in small kernels around the GEMMs (s27 profile: Inductor's SiLU·up 3.4 ms, norms and RoPE 2.9, residual adds
0.7), and the gate/up GEMM writes a [5,373 × 12,288] product only for SiLU·up to read it back. With
`mode="max-autotune-no-cudagraphs"` Inductor may pick its own Triton GEMM templates and fuse such epilogues into
them (keeping cuBLAS where that is faster). Measured here on the engine's own path (`AcousticEngine.evaluator`, one
CUDA graph per chunk): (a) the layer maths compiled as the engine does it; (b) the same functions compiled with
autotuning. ms per evaluation, twice each in turn; (a) against (b) max abs; the autotuning's compile time.
Run from the repository root on an H200 after `farm init-checkpoint out/ck --config yue2-3b --device cuda`:
python docs/measured/2026-12-03-cpu-s35-acoustic-autotune-probe.py"""
import pathlib
import sys
import time

import numpy as np
import torch

sys.path.insert(0, ".")
from stages.acoustic import AcousticEngine, _nar_head, _nar_tail, chunk_tokens, song_noise  # noqa: E402
from stages.compiled import compiled  # noqa: E402
from stages.requests import open_checkpoint  # noqa: E402
from stages.transformer import AR, NAR, ar_prefill, nar_kv_buffers  # noqa: E402
from stages.weights import load_model  # noqa: E402


def ms(fn, n=10):
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e3


def main() -> None:
    ckpt = open_checkpoint(pathlib.Path("out/ck/model"), pathlib.Path("out/ck/vae"))
    cfg = ckpt.cfg
    net = load_model(ckpt.model_dir, cfg, {AR, NAR}, device="cuda")
    engine = AcousticEngine(net, cfg.tokens)
    rng = np.random.default_rng(0)
    prefix = [int(t) for t in rng.integers(0, cfg.tokens.codec_offset, 5000)]
    codes = rng.integers(0, cfg.tokens.codebook, 5371).astype(np.int32)
    ids = chunk_tokens(prefix, codes, 0, 5371, cfg.tokens)
    torch.inference_mode().__enter__()
    _, kv = ar_prefill(net, torch.tensor(ids, device="cuda"))
    buffers = nar_kv_buffers(kv, len(ids), 5371 + 2)
    del kv
    x = song_noise(5371, cfg.model.latent_dim, 0).to(device="cuda", dtype=torch.bfloat16)

    as_is = engine.evaluator(len(ids), len(ids), buffers)
    as_is(x, 0.5)       # captured now: its graph keeps the engine's compiled layer (`at` reads engine.head per call)
    settings = dict(fullgraph=True, dynamic=True, mode="max-autotune-no-cudagraphs")
    head, tail = compiled(_nar_head, **settings), compiled(_nar_tail, **settings)
    engine.head = lambda h, w, cos, sin, d: head(h, w.in_norm, w.qkv, w.q_norm, w.k_norm, cos, sin, d)
    engine.tail = lambda h, attn, w, d: tail(h, attn, w.o, w.post_norm, w.gate_up, w.down, d)
    t0 = time.perf_counter()
    tuned = engine.evaluator(len(ids), len(ids), buffers)
    first = tuned(x, 0.5).clone()
    torch.cuda.synchronize()
    print(f"autotuned compile and first evaluation: {time.perf_counter() - t0:.1f} s", flush=True)
    outs = {}
    for rnd in range(2):
        for name, v in (("(a) as the engine compiles it", as_is), ("(b) autotuned GEMMs", tuned)):
            t = ms(lambda: v(x, 0.5))
            outs[name] = v(x, 0.5).clone()
            print(f"round {rnd} {name:<32} {t:7.2f} ms per evaluation", flush=True)
    a, b = outs.values()
    print(f"(a) against (b): max abs {(a.float() - b.float()).abs().max().item():.4g}, mean abs "
          f"{(a.float() - b.float()).abs().mean().item():.4g}; (b) repeatable {torch.equal(first, b)}", flush=True)


if __name__ == "__main__":
    main()
