"""Where the acoustic stage's time goes beyond its kernels (2026-12-07, session s59; written on the CPU box).
Why: on the H100 `farm bench song` gave the stage 3.916 s for the reference track while `farm bench acoustic` gave
64 evaluations × 56.79 ms = 3.635 s (H200: 4.08 against 3.79 s), and the s37 profile's kernels summed to ~4 ms
less than an evaluation's replay. Three questions, each answered on the reference chunk (10,372 AR tokens, 5,371
frames) with the engine as it stands:
1. one chunk's `solve_chunk`, part by part: the AR prefill, the prefix buffers, the first evaluation (eager), the
   graph's capture, the 63 replays with the solver's arithmetic, the copy to the host; and the host time of one
   eager evaluation (launching without waiting), since FA4's calls are set up in Python;
2. the kernels of an eager evaluation by family (as s36's probe) and the top 25;
3. one graph replay profiled: the kernels' busy time against the replay's span, and the largest idle gaps with
   the kernels on either side;
4. the last wave's merge (nar_attention.merge_partials, ~7 small kernels a layer) compiled into one: the attention
   of the reference chunk in a CUDA graph of 28 calls, split with the eager merge, split with the compiled merge,
   whole (µs a call, three rounds; the compiled merge's bits against the eager one's);
5. the chunk's AR prefill (s47: 109 ms at ~450 TFLOP/s, eager layers and SDPA) with the engine's compiled layer,
   and with FA4's causal kernel as well (as the engine now runs it): ms, and the last layer's K against the plain
   prefill's.
Parts 1–3 run the engine as it stands in this commit (merge compiled, prefill compiled with FA4 causal).
Run from the repository root after `farm init-checkpoint out/ck --config yue2-3b --device cuda`, FA4 on the path."""
import collections
import pathlib
import statistics
import sys
import time

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, ".")
from stages.acoustic import AcousticEngine, _Graphed, chunk_tokens, midpoint_solve, song_noise  # noqa: E402
from stages.requests import open_checkpoint  # noqa: E402
from stages.transformer import AR, NAR, ar_prefill, nar_kv_buffers, timestep_tau, velocity_at  # noqa: E402
from stages.weights import load_model  # noqa: E402

FAMILIES = (("attention", ("flash", "fmha", "attention")),
            ("gemm", ("gemm", "xmma", "cutlass", "sm90_", "nvjet")),
            ("triton (Inductor)", ("triton",)), ("copies", ("copy", "Memcpy", "Memset", "elementwise_kernel")))


def family(name: str) -> str:
    for fam, keys in FAMILIES:
        if any(k.lower() in name.lower() for k in keys):
            return fam
    return "other"


def synced(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, time.perf_counter() - t0


def parts(engine, cfg, ids, noise):
    """solve_chunk's steps, each timed to completion."""
    tokens = torch.tensor(ids, dtype=torch.long, device="cuda")
    (_, kv), t_prefill = synced(lambda: ar_prefill(engine.model, tokens, engine.head, engine.tail,
                                                   engine.attention.causal))
    buffers, t_buf = synced(lambda: nar_kv_buffers(kv, len(ids), len(noise) + 2, engine.attention.seq_major))
    del kv
    x = noise.to(device="cuda", dtype=engine.dtype)

    def at(x, tau):
        return velocity_at(engine.model, len(ids), len(ids), x, tau, buffers, engine.head, engine.tail,
                           engine.attention.attend)
    tau = timestep_tau(1.0, x.dtype, cfg.model.timestep_shift, x.device)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    at(x, tau)
    t_host = time.perf_counter() - t0
    torch.cuda.synchronize()
    t_eager_total = time.perf_counter() - t0
    _, t_eager = synced(lambda: at(x, tau))
    g = _Graphed(at)
    _, t_first = synced(lambda: g(x, tau))           # eager + capture, as the engine's first call
    _, t_replay = synced(lambda: g(x, tau))
    reps = []
    for _ in range(8):
        _, t = synced(lambda: g(x, tau))
        reps.append(t)

    def v(x, raw):
        return g(x, timestep_tau(raw, x.dtype, cfg.model.timestep_shift, x.device))
    out, t_solve = synced(lambda: midpoint_solve(v, x, 32))
    _, t_host_copy = synced(lambda: out.float().cpu())
    print(f"AR prefill {t_prefill * 1e3:8.1f} ms; prefix buffers {t_buf * 1e3:6.1f} ms", flush=True)
    print(f"eager evaluation: host launches {t_host * 1e3:.1f} ms, to completion {t_eager_total * 1e3:.1f} ms "
          f"(again {t_eager * 1e3:.1f})", flush=True)
    print(f"first graphed call (eager + capture) {t_first * 1e3:.1f} ms → capture ≈ {(t_first - t_eager) * 1e3:.1f}"
          f" ms; one replay {t_replay * 1e3:.2f}, median of 8 {statistics.median(reps) * 1e3:.2f} ms", flush=True)
    print(f"64 evaluations through midpoint_solve (all replays) {t_solve * 1e3:.1f} ms "
          f"= {t_solve / 64 * 1e3:.2f} ms each; latents to the host {t_host_copy * 1e3:.1f} ms", flush=True)
    whole = []
    for _ in range(2):
        _, t = synced(lambda: engine.solve_chunk(ids, noise, 32))
        whole.append(t)
    print(f"engine.solve_chunk whole: {', '.join(f'{t:.3f}' for t in whole)} s", flush=True)
    est = t_prefill + t_buf + t_first + 63 / 64 * t_solve + t_host_copy
    print(f"sum of parts (prefill + buffers + first call + 63 replays + copy) ≈ {est:.3f} s", flush=True)
    return g


def kernels(prof):
    out = []
    for e in prof.events():
        if e.device_type.name == "CUDA":
            out.append(e)
    return out


def eager_families(engine, at_eval) -> None:
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            at_eval()
        torch.cuda.synchronize()
    totals, counts = collections.Counter(), collections.Counter()
    for e in kernels(prof):
        totals[e.name] += e.device_time_total
        counts[e.name] += 1
    fams = collections.Counter()
    for name, us in totals.items():
        fams[family(name)] += us
    print(f"eager: GPU time per evaluation {sum(totals.values()) / 3e3:.2f} ms in {sum(counts.values()) // 3} "
          "kernels", flush=True)
    for fam, us in fams.most_common():
        print(f"  {fam:<20} {us / 3e3:8.2f} ms", flush=True)
    for name, us in totals.most_common(25):
        print(f"  {us / 3e3:8.3f} ms {counts[name] // 3:5d} × {name[:120]}", flush=True)


def replay_gaps(g, x, tau) -> None:
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        g(x, tau)
        torch.cuda.synchronize()
    ks = sorted(((e.time_range.start, e.time_range.end, e.name) for e in kernels(prof)), key=lambda k: k[0])
    if len(ks) < 10:
        print(f"replay profile: only {len(ks)} kernels visible (graph kernels not traced)", flush=True)
        return
    span = ks[-1][1] - ks[0][0]
    busy = sum(b - a for a, b, _ in ks)
    gaps = []
    for (a0, b0, n0), (a1, b1, n1) in zip(ks, ks[1:]):
        gaps.append((a1 - b0, n0, n1))
    fams = collections.Counter()
    for a, b, n in ks:
        fams[family(n)] += b - a
    print(f"replay: {len(ks)} kernels, span {span / 1e3:.2f} ms, busy {busy / 1e3:.2f} ms, idle "
          f"{sum(max(0, gp) for gp, _, _ in gaps) / 1e3:.2f} ms", flush=True)
    for fam, us in fams.most_common():
        print(f"  {fam:<20} {us / 1e3:8.2f} ms", flush=True)
    by_pair = collections.Counter()
    for gp, n0, n1 in gaps:
        by_pair[(family(n0), family(n1))] += max(0, gp)
    print("idle by (before, after) family:", flush=True)
    for (f0, f1), us in by_pair.most_common(12):
        print(f"  {us / 1e3:7.3f} ms  {f0} → {f1}", flush=True)
    print("largest gaps:", flush=True)
    for gp, n0, n1 in sorted(gaps, reverse=True)[:12]:
        print(f"  {gp:7.1f} µs  {n0[:60]} → {n1[:60]}", flush=True)


def graph_us(fn, calls: int = 28, reps: int = 10) -> float:
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        g.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / (reps * calls)


def merge_probe() -> None:
    from stages import nar_attention as na
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(1, 5373, 16, 128, generator=gen, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    k = torch.randn(1, 15745, 8, 128, generator=gen, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    v = torch.randn(1, 15745, 8, 128, generator=gen, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    split = na._flash4(split=True)[0]            # the merge compiled, as the engine runs it
    whole = na._flash4(split=False)[0]
    compiled = na.compiled
    na.compiled = lambda fn, **settings: fn
    eager = na._flash4(split=True)[0]            # the merge as seven eager kernels (the s58 tree)
    na.compiled = compiled
    print(f"plan at the reference chunk: {na.wave_split(5373, 16, 15745, na._sms(q.device))}", flush=True)
    ref = eager(q, k, v)
    got = split(q, k, v)
    print(f"compiled merge against eager: max abs {(got.float() - ref.float()).abs().max().item():.3g}, equal "
          f"{torch.equal(got, ref)}", flush=True)
    for r in range(3):
        t_eager = graph_us(lambda: eager(q, k, v))
        t_fused = graph_us(lambda: split(q, k, v))
        t_whole = graph_us(lambda: whole(q, k, v))
        print(f"round {r}: split, eager merge {t_eager:.1f} µs; split, compiled merge {t_fused:.1f} µs; "
              f"whole {t_whole:.1f} µs", flush=True)


def prefill_probe(engine, ids) -> None:
    import math
    from flash_attn.cute.interface import _flash_attn_fwd
    from stages.transformer import attend, branch_weights, dims, layer_head, layer_tail, rope_tables
    model = engine.model

    def fa4_causal(q, k, v):
        return _flash_attn_fwd(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                               softmax_scale=1.0 / math.sqrt(q.shape[-1]), causal=True)[0].transpose(1, 2)

    def run(head, tail, attn):
        tokens = torch.tensor(ids, dtype=torch.long, device="cuda")
        x = model.model.embed_tokens(tokens)[None]
        cos, sin = rope_tables(torch.arange(len(ids), device="cuda"), model.cfg, x.dtype)
        d, last = dims(model.cfg), None
        for w in branch_weights(model, AR):
            q, k, v = head(x, w, cos, sin, d)
            x = tail(x, attn(q, k, v), w, d)
            last = k
        return last

    variants = (("plain layers, SDPA", layer_head, layer_tail, lambda q, k, v: attend(q, k, v, causal=True)),
                ("compiled layer, SDPA", engine.head, engine.tail, lambda q, k, v: attend(q, k, v, causal=True)),
                ("compiled layer, FA4 causal", engine.head, engine.tail, fa4_causal))
    base = run(*variants[0][1:])
    for name, head, tail, attn in variants:
        k, _ = synced(lambda: run(head, tail, attn))
        times = [synced(lambda: run(head, tail, attn))[1] for _ in range(3)]
        diff = (k.float() - base.float()).abs()
        print(f"prefill, {name}: {', '.join(f'{t * 1e3:.1f}' for t in times)} ms; last layer's K against the plain "
              f"prefill's max abs {diff.max().item():.3g}, mean abs {diff.mean().item():.3g}", flush=True)


def main() -> None:
    ckpt = open_checkpoint(pathlib.Path("out/ck/model"), pathlib.Path("out/ck/vae"))
    cfg = ckpt.cfg
    net = load_model(ckpt.model_dir, cfg, {AR, NAR}, device="cuda")
    engine = AcousticEngine(net, cfg.tokens)
    print(f"{torch.cuda.get_device_name()}, attention {engine.attention.name}", flush=True)
    rng = np.random.default_rng(0)
    prefix = [int(t) for t in rng.integers(0, cfg.tokens.codec_offset, 5000)]
    codes = rng.integers(0, cfg.tokens.codebook, 5371).astype(np.int32)
    ids = chunk_tokens(prefix, codes, 0, 5371, cfg.tokens)
    noise = song_noise(5371, cfg.model.latent_dim, 0)
    with torch.inference_mode():
        g = parts(engine, cfg, ids, noise)
        x = noise.to(device="cuda", dtype=engine.dtype)
        tau = timestep_tau(0.5, x.dtype, cfg.model.timestep_shift, x.device)
        eager_families(engine, lambda: g.fn(x, tau))
        replay_gaps(g, x, tau)
        del g
        merge_probe()
        prefill_probe(engine, ids)


if __name__ == "__main__":
    main()
