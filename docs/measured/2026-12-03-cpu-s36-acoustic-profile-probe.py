"""Where a velocity evaluation's ~62 ms go with FlashAttention-4 (2026-12-03, session s36; written on the CPU box,
not yet run). Why: the s27 profile (cuDNN attention, [1, KV, S, D] buffers) gave attention 37.2 ms, GEMMs 19.8,
Inductor's SiLU·up 3.4, norms and RoPE 2.9, prefix-buffer writes 0.9, residual adds 0.7; with FA4 and seq-major
buffers the evaluation is ~62 ms and the next lever is whichever part is now furthest from its floor.
The reference chunk (10,372 AR tokens, 5,371 frames) through `AcousticEngine.evaluator` with eager launches
(`graphs=False`: the same kernels a replay runs, visible one by one to the profiler), three evaluations profiled
after two warm-ups: per kernel family (GEMM, attention, Triton/Inductor, copies, other) the GPU time per
evaluation, then the 20 kernels of most total time.
Run on an H200 from the repository root after `farm init-checkpoint out/ck --config yue2-3b --device cuda`, with
the FA4 wheels on PYTHONPATH (out/fa4site, see the s36 note); without them it profiles SDPA."""
import collections
import pathlib
import sys

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, ".")
from stages.acoustic import AcousticEngine, chunk_tokens, song_noise  # noqa: E402
from stages.requests import open_checkpoint  # noqa: E402
from stages.transformer import AR, NAR, ar_prefill, nar_kv_buffers  # noqa: E402
from stages.weights import load_model  # noqa: E402

EVALS = 3
FAMILIES = (("attention", ("flash", "fmha", "attention")), ("gemm", ("gemm", "xmma", "cutlass", "sm90_",
                                                                               "nvjet")),
            ("triton (Inductor)", ("triton",)), ("copies", ("copy", "Memcpy", "Memset", "elementwise_kernel")))


def family(name: str) -> str:
    for fam, keys in FAMILIES:
        if any(k.lower() in name.lower() for k in keys):
            return fam
    return "other"


def main() -> None:
    ckpt = open_checkpoint(pathlib.Path("out/ck/model"), pathlib.Path("out/ck/vae"))
    cfg = ckpt.cfg
    net = load_model(ckpt.model_dir, cfg, {AR, NAR}, device="cuda")
    engine = AcousticEngine(net, cfg.tokens)
    engine.graphs = False
    print(f"attention: {engine.attention.name}", flush=True)
    rng = np.random.default_rng(0)
    prefix = [int(t) for t in rng.integers(0, cfg.tokens.codec_offset, 5000)]
    codes = rng.integers(0, cfg.tokens.codebook, 5371).astype(np.int32)
    ids = chunk_tokens(prefix, codes, 0, 5371, cfg.tokens)
    with torch.inference_mode():
        _, kv = ar_prefill(net, torch.tensor(ids, device="cuda"))
        v = engine.evaluator(len(ids), len(ids), nar_kv_buffers(kv, len(ids), 5373, engine.attention.seq_major))
        del kv
        x = song_noise(5371, cfg.model.latent_dim, 0).to(device="cuda", dtype=torch.bfloat16)
        for _ in range(2):
            v(x, 0.5)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(EVALS):
                v(x, 0.5)
            torch.cuda.synchronize()
    totals, counts = collections.Counter(), collections.Counter()
    for e in prof.events():
        if e.device_type.name == "CUDA":
            totals[e.name] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
            counts[e.name] += 1
    fams = collections.Counter()
    for name, us in totals.items():
        fams[family(name)] += us
    all_us = sum(totals.values())
    print(f"GPU time per evaluation: {all_us / EVALS / 1e3:.2f} ms in {sum(counts.values()) // EVALS} kernels",
          flush=True)
    for fam, us in fams.most_common():
        print(f"  {fam:<20} {us / EVALS / 1e3:8.2f} ms", flush=True)
    print("top kernels (ms per evaluation, launches per evaluation):", flush=True)
    for name, us in totals.most_common(20):
        print(f"  {us / EVALS / 1e3:8.3f} ms {counts[name] // EVALS:5d} × {name[:110]}", flush=True)


if __name__ == "__main__":
    main()
