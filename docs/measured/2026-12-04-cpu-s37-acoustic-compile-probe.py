"""The acoustic layer's elementwise kernels compiled with only the chunk length dynamic (2026-12-04, session s37;
written on the CPU box). Why: the s37 profile (`…-s37-acoustic-profile.log`) put Inductor's kernels at 7.9 ms of a
59 ms evaluation, the SiLU·up kernel alone at 120 µs a layer for ~200 MB (~1.65 TB/s, against ~4 TB/s a copy
reaches). The engine compiles its layer with `dynamic=True`, which makes every dimension symbolic, the weights'
too (they are arguments): the kernels then index with symbolic sizes. Marking only the chunk-length dimensions
dynamic (`torch._dynamo.mark_dynamic`) keeps one compile for every chunk length (checked on the CPU: two graphs
for three lengths) with the hidden and head sizes fixed.
Times one velocity evaluation of the reference chunk (5,000 prefix tokens + 5,371 frames; CUDA graph replays, as
the engine runs them) with the layer compiled four ways: as the engine does (`dynamic`), the length only (`seq`),
`seq` with Inductor's coordinate-descent tuning of block sizes, `seq` with programmatic dependent launch; the
latents' distance from the `dynamic` ones; then the `seq` kernels' profile (eager launches).
Run on an H200 from the repository root after `farm init-checkpoint out/ck --config yue2-3b --device cuda`."""
import collections
import pathlib
import sys
import time

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, ".")
from stages.acoustic import AcousticEngine, _nar_head, _nar_tail, chunk_tokens, song_noise  # noqa: E402
from stages.compiled import compiled  # noqa: E402
from stages.requests import open_checkpoint  # noqa: E402
from stages.transformer import AR, NAR, ar_prefill, nar_kv_buffers  # noqa: E402
from stages.weights import load_model  # noqa: E402


def layer(mode: str):
    if mode == "dynamic":
        head = compiled(_nar_head, fullgraph=True, dynamic=True)
        tail = compiled(_nar_tail, fullgraph=True, dynamic=True)
        return (lambda h, w, cos, sin, d: head(h, w.in_norm, w.qkv, w.q_norm, w.k_norm, cos, sin, d),
                lambda h, attn, w, d: tail(h, attn, w.o, w.post_norm, w.gate_up, w.down, d))
    options = {"seq": {}, "seq+cdt": {"coordinate_descent_tuning": True},
               "seq+pdl": {"triton.enable_pdl": True}}[mode]
    head = compiled(_nar_head, fullgraph=True, dynamic=False, options=options)
    tail = compiled(_nar_tail, fullgraph=True, dynamic=False, options=options)

    def mark(*pairs):
        for t, dim in pairs:
            torch._dynamo.mark_dynamic(t, dim)

    def h_(h, w, cos, sin, d):
        mark((h, 1), (cos, 0), (sin, 0))
        return head(h, w.in_norm, w.qkv, w.q_norm, w.k_norm, cos, sin, d)

    def t_(h, attn, w, d):
        mark((h, 1), (attn, 2))
        return tail(h, attn, w.o, w.post_norm, w.gate_up, w.down, d)
    return h_, t_


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
    outs, evaluators = {}, {}
    with torch.inference_mode():
        _, kv = ar_prefill(net, torch.tensor(ids, device="cuda"))
        buffers = nar_kv_buffers(kv, len(ids), 5373, engine.attention.seq_major)
        del kv
        x = song_noise(5371, cfg.model.latent_dim, 0).to(device="cuda", dtype=torch.bfloat16)
        for mode in ("dynamic", "seq", "seq+cdt", "seq+pdl"):
            try:
                t0 = time.perf_counter()
                engine.head, engine.tail = layer(mode)
                v = engine.evaluator(len(ids), len(ids), buffers)
                outs[mode] = v(x, 0.5).float()
                v(x, 0.5)
                torch.cuda.synchronize()
                evaluators[mode] = v
                print(f"{mode:<10} compiled and captured in {time.perf_counter() - t0:.1f} s; vs dynamic max abs "
                      f"{(outs[mode] - outs['dynamic']).abs().max().item():.3e}", flush=True)
            except Exception as e:  # a probe: say why and go on
                print(f"{mode:<10} failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
        for rnd in range(3):
            for mode, v in evaluators.items():
                torch.cuda.synchronize()
                t = time.perf_counter()
                for _ in range(10):
                    v(x, 0.5)
                torch.cuda.synchronize()
                print(f"round {rnd} {mode:<10} {(time.perf_counter() - t) / 10 * 1e3:7.2f} ms per evaluation",
                      flush=True)
        engine.head, engine.tail = layer("seq")
        engine.graphs = False
        v = engine.evaluator(len(ids), len(ids), buffers)
        v(x, 0.5)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                v(x, 0.5)
            torch.cuda.synchronize()
    totals, counts = collections.Counter(), collections.Counter()
    for e in prof.events():
        if e.device_type.name == "CUDA":
            totals[e.name] += e.device_time_total
            counts[e.name] += 1
    print("seq, top kernels (ms per evaluation, launches per evaluation):", flush=True)
    for name, us in totals.most_common(14):
        print(f"  {us / 3 / 1e3:8.3f} ms {counts[name] // 3:5d} × {name[:110]}", flush=True)


if __name__ == "__main__":
    main()
