"""A/B in one process: decode attention with fixed 128-key spans taken round-robin (before) against spans of whole
pages, at most 16 per row, one per program, a pipelined page loop (after), with pipeline depth and warps varied.
Per variant: one layer's op over the engine's 28 KV layers in turn (a CUDA graph, µs per layer), then the whole
step (engine rebuilt, forced-length requests; ms per step) and the ids of a batch-invariance check.
"Before" is the kernel pair of commit 1fd0aa8 (stages/paged_attention.py and stages/_paged_attention_triton.py there,
copied to .gpu/old/old_paged.py and .gpu/old/old_paged_triton.py for this run); "after" is the tree of this run,
which then had a WARPS knob (since removed: 4 warps won). Run from the repository root on the GPU machine after
`farm init-checkpoint out/ck --config yue2-3b --device cuda`."""
import pathlib
import sys
import time

import torch

sys.path.insert(0, ".")
old_src = pathlib.Path(".gpu/old/old_paged.py").read_text().replace(
    "from ._paged_attention_triton import", "from ._old_paged_attention_triton import").replace("\n_register()\n", "\n")
pathlib.Path("stages/_old_paged_attention.py").write_text(old_src)
pathlib.Path("stages/_old_paged_attention_triton.py").write_text(pathlib.Path(".gpu/old/old_paged_triton.py").read_text())

from farm.bench.ar import _measure, _time_graph, batch_invariance, bench_request, weight_bytes, copy_rate  # noqa
from stages import _old_paged_attention as old
from stages import paged_attention as pa
from stages.ar import AREngine
from stages.kv_cache import token_bytes
from stages.requests import open_checkpoint
from stages.transformer import AR, HEAD
from stages.weights import load_model

ckpt = open_checkpoint(pathlib.Path("out/ck/model"), pathlib.Path("out/ck/vae"))
cfg = ckpt.cfg
net = load_model(ckpt.model_dir, cfg, {AR, HEAD}, device="cuda")
rate = copy_rate(torch, "cuda")
kv_token = token_bytes(cfg.model, torch.bfloat16)
print(f"copy rate {rate / 1e12:.2f} TB/s", flush=True)


def use(variant):
    name, fn, stages, warps = variant
    pa.STAGES, pa.WARPS = stages, warps
    torch.library.register_kernel("yue2::decode_attention", "cuda", fn)


def op_us(engine, rows, ctx):
    m, kv = cfg.model, engine.kv
    heads, kvh, d = m.num_attention_heads, m.num_key_value_heads, m.head_dim
    g = torch.Generator(device="cuda").manual_seed(0)
    qkv = torch.randn(rows, (heads + 2 * kvh) * d, dtype=torch.bfloat16, device="cuda", generator=g)
    norm = torch.ones(d, dtype=torch.bfloat16, device="cuda")
    cos = torch.ones(rows, d, dtype=torch.bfloat16, device="cuda")
    sin = torch.zeros(rows, d, dtype=torch.bfloat16, device="cuda")
    pages = -(-ctx // kv.page)
    table = torch.zeros(rows, kv.per_slot, dtype=torch.int32, device="cuda")
    table[:, :pages] = (torch.randperm(kv.pages - 1, device="cuda", generator=g)[:rows * pages] + 1).int().reshape(rows, pages)
    lens = torch.full((rows,), ctx, dtype=torch.int32, device="cuda")

    def layers():
        for layer in range(m.num_hidden_layers):
            pa.decode_attention(qkv, norm, norm, cos, sin, kv.k[layer], kv.v[layer], table, lens, 1e-6)
    return _time_graph(layers, repeats=20) / m.num_hidden_layers * 1e6, 2 * rows * ctx * kvh * d * 2


variants = [("before: 128-key spans, round-robin", old._launch, 3, 4),
            ("after: page spans, 3 stages, 4 warps", pa._launch, 3, 4),
            ("after: 2 stages", pa._launch, 2, 4),
            ("after: 4 stages", pa._launch, 4, 4),
            ("after: 3 stages, 8 warps", pa._launch, 3, 8),
            ("before (again)", old._launch, 3, 4),
            ("after (again)", pa._launch, 3, 4)]
shapes = [(1, 450), (1, 7680), (12, 2720), (24, 7680), (32, 7680)]
steps = [("prompt-450", 450, "plan", 1), ("plan-ref", 2720, "plan", 12), ("semantic-ref", 7680, "semantic", 1),
         ("semantic-ref", 7680, "semantic", 24)]
seen = {}
for v in variants:
    use(v)
    t0 = time.perf_counter()
    engine = AREngine(net, cfg.tokens, kv_tokens=32 * (7680 + 6 * 16 + 64), cuda_graphs=True, compile=True)
    wbytes = weight_bytes(engine)
    line = [f"{v[0]:<40}"]
    for rows, ctx in shapes:
        us, nbytes = op_us(engine, rows, ctx)
        line.append(f"op {rows}x{ctx}: {us:7.1f} us ({nbytes / us / 1e6:.2f} TB/s)")
    for name, ctx, kind, b in steps:
        r = _measure(engine, cfg, name, ctx, kind, b, 4, wbytes, kv_token, rate)
        line.append(f"step {b}x{ctx}: {r['step_ms']:.3f} ms ({r['floor_ratio']:.2f} floor)")
    inv = batch_invariance(engine, cfg)
    reqs = [bench_request(cfg, f"ids-{i}", c, k, 64, seed=i) for i, (c, k) in enumerate([(300, "plan"), (2600, "semantic")])]
    ids = [r.ids.tolist() for r in engine.generate(reqs)]
    same = [name for name, other in seen.items() if other == ids]
    seen[v[0]] = ids
    print(" | ".join(line), f"| invariant {inv['identical']} | ids as: {same} | {time.perf_counter() - t0:.0f} s",
          flush=True)
    del engine
    torch.cuda.empty_cache()
