"""`farm bench ar`: the AR step against its memory-bandwidth floor, at every batch size the farm uses.

For each scenario (a context length and a sampling kind) and each number of live rows, requests of that prefix
length are admitted to one AR engine — the engine the farm and the sequential path use: fixed-width step, paged KV,
batched sampler, CUDA graphs, torch.compile — and decoded for a few blocks. The floor of one step is what it must
read once: every linear weight and the lm_head, plus K and V of every live row's context, at the device copy rate
measured in the same run. Also printed: the paged decode kernel against SDPA over a padded cache (the kernel of our
own must win to stay), batch invariance (the same requests alone and together give the same ids), and how far the
step's teacher-forced logits are from an FP32 forward, beside the plain BF16 forward's distance.
"""
from __future__ import annotations

import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from .profile import print_profile, profile_step
from .song import environment

ROWS = (1, 2, 4, 8, 12, 16, 24, 32)
# (name, prefix tokens, sampling kind): the 450-token prompt, and the reference track's mean plan and semantic
# contexts (450 + 4540/2 and 4992 + 5371/2).
SCENARIOS = (("prompt-450", 450, "plan"), ("plan-ref", 2720, "plan"), ("semantic-ref", 7680, "semantic"))


def copy_rate(torch, device: str) -> float:
    """Device-to-device copy, bytes read + written per second (median of 10 after warm-up)."""
    src = torch.empty(1 << 31, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    times = []
    for i in range(13):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(end) / 1e3)
    return 2 * src.numel() / statistics.median(times)


def weight_bytes(engine) -> int:
    """What a decode step reads of the weights: every linear layer of the step, in the engine's weight format, and
    the lm_head (the embedding: one row; the norms' vectors are negligible)."""
    from stages.quant import weight_bytes as nbytes

    head = engine.model.lm_head.weight
    return head.numel() * head.element_size() + sum(nbytes(getattr(w, name)) for w in engine.step_weights
                                                    for name in ("qkv", "o", "gate_up", "down"))


def run_ar_bench(*, model: str, vae: str | None, device: str, rows: tuple[int, ...], blocks: int,
                 numerics_tokens: int, json_out: Path | None, weight_format: str = "bf16",
                 kv_format: str = "bf16", chain: bool | None = None) -> dict:
    import torch

    from stages.ar import AREngine
    from stages.kv_cache import storage_dtype, token_bytes
    from stages.requests import open_checkpoint
    from stages.transformer import AR, HEAD
    from stages.weights import load_model

    from ..devices import pick_device
    from ..models import resolve_model

    device = pick_device(device)
    paths = resolve_model(model, vae)
    ckpt = open_checkpoint(paths.model_dir, paths.vae_dir)
    cfg, layout = ckpt.cfg, ckpt.cfg.tokens
    cuda = device.startswith("cuda")
    rate = copy_rate(torch, device) if cuda else None
    net = load_model(ckpt.model_dir, cfg, {AR, HEAD}, device=device)
    kv_token = token_bytes(cfg.model, storage_dtype(kv_format, net.model.embed_tokens.weight.dtype))
    longest = max(ctx for _, ctx, _ in SCENARIOS)
    scenarios = [(n, min(ctx, cfg.model.context // 3), kind) for n, ctx, kind in SCENARIOS]   # tiny: shorter
    start = time.perf_counter()
    engine = AREngine(net, layout, kv_tokens=max(rows) * (longest + (blocks + 2) * 16 + 64), cuda_graphs=cuda,
                      compile=cuda, weight_format=weight_format, kv_format=kv_format, chain=chain)
    build_seconds = time.perf_counter() - start
    wbytes = weight_bytes(engine)
    table = []
    for name, ctx, kind in scenarios:
        for b in rows:
            table.append(_measure(engine, cfg, name, ctx, kind, b, blocks, wbytes, kv_token, rate))
            _print_row(table[-1])
    report = {"environment": environment(device), "model": cfg.name, "weight_format": weight_format,
              "kv_format": kv_format, "layer_chain": engine.chain,
              "copy_rate_bytes_s": rate,
              "weight_bytes": wbytes, "kv_bytes_per_token": kv_token, "slots": engine.slots, "block": engine.block,
              "engine_build_seconds": build_seconds, "rows": table,
              "invariance": batch_invariance(engine, cfg), "kernel": kernel_vs_sdpa(engine, cfg) if cuda else None,
              "gemm": gemm_vs_cublas(engine) if cuda and weight_format == "bf16" else None,
              "numerics": numerics(engine, ckpt, device, numerics_tokens),
              "profiles": [profile_step(engine, [bench_request(cfg, f"profile-{b}-{i}", ctx, kind, 6 * engine.block,
                                                               seed=100 + i) for i in range(b)])
                           for b, (_, ctx, kind) in ((min(rows), scenarios[0]), (max(rows), scenarios[-1]))]}
    print_report(report)
    if json_out:
        Path(json_out).write_text(json.dumps(report, indent=2, default=str) + "\n")
    return report


def bench_request(cfg, key: str, ctx: int, kind: str, tokens: int, seed: int):
    """A forced-length request with a random prefix of `ctx` ids (text ids for plan, codec ids for semantic)."""
    import torch

    from stages.ar import ARRequest

    layout = cfg.tokens
    g = torch.Generator().manual_seed(seed)
    lo, hi = (0, layout.eod) if kind == "plan" else (layout.codec_offset, layout.codec_offset + layout.codebook)
    prefix = [layout.eod] + torch.randint(lo, hi, (ctx - 2,), generator=g).tolist()
    prefix.append(layout.abc_start if kind == "plan" else layout.music_start)
    s = getattr(cfg.generation, kind)
    s = replace(s, min_tokens=tokens, max_tokens=tokens)
    return ARRequest(key, kind, tuple(prefix), s, seed)


def _measure(engine, cfg, name, ctx, kind, b, blocks, wbytes, kv_token, rate) -> dict:
    block = engine.block
    tokens = (blocks + 1) * block
    for i in range(b):
        engine.admit(bench_request(cfg, f"{name}-{b}-{i}", ctx, kind, tokens, seed=i))
    engine.step()                                   # a warm block
    _sync(engine)
    start = time.perf_counter()
    finished = []
    for _ in range(blocks):
        finished += engine.step()
    seconds = (time.perf_counter() - start) / (blocks * block)
    assert len(finished) == b and not engine.live, "forced lengths end every request in the last block"
    mean_ctx = ctx + block + blocks * block / 2
    row = {"scenario": name, "kind": kind, "rows": b, "context": ctx, "step_ms": seconds * 1e3,
           "tokens_s": b / seconds}
    if rate:
        floor = (wbytes + b * mean_ctx * kv_token) / rate
        row.update(floor_ms=floor * 1e3, floor_ratio=floor / seconds, floor_tokens_s=b / floor)
    return row


def batch_invariance(engine, cfg) -> dict:
    """Three requests (plan, semantic, semantic) alone, each in another slot, and together: identical ids?"""
    short = cfg.model.context // 8                 # 64 on tiny, 3072 on yue2-3b: well inside either context
    requests = [bench_request(cfg, "inv-plan", min(300, short), "plan", 96, 1),
                bench_request(cfg, "inv-sem-a", min(700, short), "semantic", 80, 2),
                bench_request(cfg, "inv-sem-b", min(500, short), "semantic", 112, 3)]
    together = {r.key: r.ids for r in engine.generate(requests)}
    equal, first = {}, {}
    for shift, r in enumerate(requests):
        engine.free_slots.rotate(5 + shift)
        (alone,) = engine.generate([r])
        equal[r.key] = bool((alone.ids == together[r.key]).all()) and len(alone.ids) == len(together[r.key])
        n = min(len(alone.ids), len(together[r.key]))
        differ = np.flatnonzero(alone.ids[:n] != together[r.key][:n])
        first[r.key] = None if equal[r.key] else int(differ[0]) if len(differ) else n
    # the first token that differs says a systematic difference (early) from a rare race (late)
    return {"identical": all(equal.values()), "per_request": equal, "first_difference": first}


def kernel_vs_sdpa(engine, cfg) -> dict:
    """One layer's decode attention for 24 rows at 7.7k keys: the paged kernels (q/k norm, RoPE and cache write
    included) vs SDPA over a padded 8192-key cache (the old engine's way; its norm, RoPE and cache write not
    counted)."""
    import torch

    from stages.paged_attention import decode_attention
    from stages.transformer import attend

    m, rows, ctx = cfg.model, 24, min(7680, cfg.model.context // 2)
    kv, dev, dtype = engine.kv, engine.device, engine.dtype
    heads, kvh, d = m.num_attention_heads, m.num_key_value_heads, m.head_dim
    qkv = torch.randn(rows, (heads + 2 * kvh) * d, dtype=dtype, device=dev)
    norm, cos, sin = (torch.ones(d, dtype=dtype, device=dev), torch.ones(rows, d, dtype=dtype, device=dev),
                      torch.zeros(rows, d, dtype=dtype, device=dev))      # RoPE at position 0: no rotation
    q = qkv[:, :heads * d].reshape(rows, heads, d)
    pages = -(-ctx // kv.page)
    block_table = torch.zeros(rows, kv.per_slot, dtype=torch.int32, device=dev)
    block_table[:, :pages] = torch.arange(rows * pages, dtype=torch.int32, device=dev).reshape(rows, pages) % (
        kv.pages - 1) + 1
    lens = torch.full((rows,), ctx, dtype=torch.int32, device=dev)
    shape = (rows, m.num_key_value_heads, 8192, m.head_dim)
    kpad, vpad = torch.randn(shape, dtype=dtype, device=dev), torch.randn(shape, dtype=dtype, device=dev)
    visible = (torch.arange(8192, device=dev) < ctx)[None, None, None, :]

    def paged():
        return decode_attention(qkv, norm, norm, cos, sin, kv.k[0], kv.v[0], block_table, lens, 1e-6)

    def sdpa():
        return attend(q[:, :, None], kpad, vpad, mask=visible)

    return {"rows": rows, "context": ctx, "paged_us": _time(paged) * 1e6, "sdpa_padded_8192_us": _time(sdpa) * 1e6,
            "bytes_per_call": 2 * rows * ctx * m.num_key_value_heads * m.head_dim * kv.k.element_size()}


def gemm_vs_cublas(engine) -> dict:
    """Each matrix product of the step over all layers' weights in turn (32 rows, as the step runs them, replayed
    as a CUDA graph): our skinny-GEMM op with its epilogue vs cuBLAS plus the epilogue as separate ops."""
    import torch

    from stages import skinny_gemm

    slots, h = engine.slots, engine.cfg.hidden_size
    x = torch.randn(slots, h, dtype=engine.dtype, device=engine.device)
    out = {}
    for name, epilogue in (("qkv", "none"), ("o", "add"), ("gate_up", "silu_mul"), ("down", "add")):
        weights = [getattr(w, name) for w in engine.weights]
        a = torch.randn(slots, weights[0].shape[1], dtype=engine.dtype, device=engine.device)
        residual = x if epilogue == "add" else None

        def ours():
            return [skinny_gemm.linear(a, w, epilogue, residual) for w in weights]

        def cublas():
            return [skinny_gemm.reference(a, w, epilogue, residual) for w in weights]

        nbytes = sum(w.numel() * w.element_size() for w in weights)
        t_ours, t_cublas = _time_graph(ours), _time_graph(cublas)
        out[name] = {"epilogue": epilogue, "layers": len(weights), "bytes_per_layer": nbytes / len(weights),
                     "ours_us": t_ours * 1e6 / len(weights),
                     "cublas_us": t_cublas * 1e6 / len(weights)}
    return out


def numerics(engine, ckpt, device: str, tokens: int) -> dict:
    """Teacher-forced logits of the step vs an FP32 forward, beside a plain BF16 forward vs the same FP32."""
    import torch

    from stages.transformer import AR, HEAD, ar_prefill, logits
    from stages.weights import load_model

    cfg = ckpt.cfg
    tokens = min(tokens, cfg.model.context // 2)
    prompt = min(450, tokens // 2)
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, cfg.tokens.eod, (tokens,), generator=g)
    with torch.inference_mode():
        fed = []
        engine.prefill(0, ids[:prompt].tolist())
        fed.append(engine.next_logits[0].float().clone())
        for t in ids[prompt:-1].tolist():
            fed.append(engine.decode({0: t})[0].float())
        engine.kv.release(0)
        fast = torch.stack(fed)                                        # predictions after positions prompt-1 …
        bf16_hidden, _ = ar_prefill(engine.model, ids.to(device))
        plain = logits(engine.model, bf16_hidden)[0, prompt - 1:-1].float()
        del bf16_hidden
        fp32 = load_model(ckpt.model_dir, cfg, {AR, HEAD}, device=device, dtype=torch.float32)
        hidden, _ = ar_prefill(fp32, ids.to(device))
        ref = logits(fp32, hidden)[0, prompt - 1:-1]
        del fp32, hidden
        out = {"tokens": tokens, "teacher_forced_steps": int(fast.shape[0]),
               "fast_step": _distance(fast, ref), "plain_bf16": _distance(plain, ref)}
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return out


def _distance(x, ref) -> dict:
    tv = 0.5 * (x.softmax(-1) - ref.softmax(-1)).abs().sum(-1)
    diff = (x - ref).abs()
    return {"max_abs": diff.max().item(), "mean_abs": diff.mean().item(), "mean_tv": tv.mean().item(),
            "max_tv": tv.max().item()}


def _time(fn, repeats: int = 50) -> float:
    import torch

    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / repeats


def _time_graph(fn, repeats: int = 20) -> float:
    """Seconds per call of fn captured as one CUDA graph (launch costs as in the engine's replayed step)."""
    import torch

    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return _time(graph.replay, repeats)


def _sync(engine) -> None:
    import torch

    if engine.device.type == "cuda":
        torch.cuda.synchronize()


def _print_row(r: dict) -> None:
    floor = f"  floor {r['floor_ms']:.3f} ms ({r['floor_tokens_s']:.0f} tok/s)  × floor {r['floor_ratio']:.2f}" \
        if "floor_ms" in r else ""
    print(f"{r['scenario']:>13} {r['kind']:>8} rows {r['rows']:>2} ctx {r['context']:>5}: step {r['step_ms']:.3f} ms "
          f"→ {r['tokens_s']:.0f} tok/s{floor}", flush=True)


def print_report(r: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    env = r["environment"]
    rate = r["copy_rate_bytes_s"]
    title = (f"farm bench ar — {r['model']}, AR weights {r.get('weight_format', 'bf16')}, KV cache "
             f"{r.get('kv_format', 'bf16')}{', layer chain' if r.get('layer_chain') else ''}, on "
             f"{env.get('gpu', env['device'])}, torch {env['torch']}, {env['date']}; "
             f"{r['slots']}-slot step, {r['block']} steps per graph; forced lengths (random weights); floor = "
             f"({r['weight_bytes'] / 1e9:.2f} GB weights + rows × context × {r['kv_bytes_per_token'] // 1024} KiB)"
             + (f" / {rate / 1e12:.2f} TB/s measured copy rate" if rate else ""))
    table = Table(title=title, title_justify="left")
    for col in ("scenario", "sampling", "rows", "context", "step ms", "tok/s", "floor ms", "floor tok/s",
                "share of floor"):
        table.add_column(col, justify="right")
    for x in r["rows"]:
        table.add_row(x["scenario"], x["kind"], str(x["rows"]), str(x["context"]), f"{x['step_ms']:.3f}",
                      f"{x['tokens_s']:.0f}", _f(x.get("floor_ms"), ".3f"), _f(x.get("floor_tokens_s"), ".0f"),
                      _f(x.get("floor_ratio"), ".2f"))
    console = Console(width=170)
    console.print(table)
    inv = r["invariance"]
    console.print(f"batch invariance (3 requests alone, in other slots, vs together): "
                  f"{'identical ids' if inv['identical'] else 'DIFFERENT ids'} {inv['per_request']}"
                  + ("" if inv["identical"] else f", first differing token {inv['first_difference']}"))
    if r["kernel"]:
        k = r["kernel"]
        console.print(f"decode attention, {k['rows']} rows × {k['context']} keys, one layer: paged kernel "
                      f"{k['paged_us']:.1f} µs ({k['bytes_per_call'] / k['paged_us'] / 1e6:.2f} TB/s) vs SDPA over "
                      f"a padded 8192-key cache {k['sdpa_padded_8192_us']:.1f} µs")
    for name, g in (r.get("gemm") or {}).items():
        console.print(f"{name} GEMM ({g['bytes_per_layer'] / 1e6:.0f} MB, epilogue {g['epilogue']}), {r['slots']} "
                      f"rows, mean of {g['layers']} layers: skinny kernel {g['ours_us']:.1f} µs "
                      f"({g['bytes_per_layer'] / g['ours_us'] / 1e6:.2f} TB/s) vs cuBLAS + separate epilogue "
                      f"{g['cublas_us']:.1f} µs ({g['bytes_per_layer'] / g['cublas_us'] / 1e6:.2f} TB/s)")
    for p in r.get("profiles", []):
        print_profile(p, console)
    n = r["numerics"]
    for name in ("fast_step", "plain_bf16"):
        d = n[name]
        console.print(f"teacher-forced logits vs FP32 forward ({n['teacher_forced_steps']} positions), {name}: max abs "
                      f"{d['max_abs']:.4f}, mean abs {d['mean_abs']:.5f}, mean TV {d['mean_tv']:.5f}, "
                      f"max TV {d['max_tv']:.5f}")


def _f(value, spec):
    return "—" if value is None else format(value, spec)
