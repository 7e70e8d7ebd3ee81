"""A/B in one process (2026-12-02, session s27): the two changes that landed untimed, and GEMM tiles that fit two
programs per SM.
1. The FP8-KV decode op with e4m3 V pages stored transposed (HEAD) vs the plain [token, head_dim] layout, same
   values: µs per layer over 28 layers (CUDA graph), outputs compared bit for bit; the BF16 op beside it.
2. The whole step (engine rebuilt per variant, forced-length requests, ms per step): HEAD (live-row mask), the mask
   dropped (every row read, as before 2026-12-02), GEMM tilings that fit two programs per SM, HEAD again; then an
   FP8-KV engine both ways round. Per variant: the step GEMMs at 32 rows and at one live row (µs per layer), the
   compiled kernels' shared memory, batch invariance and the ids of two requests (which variants draw alike).
Run from the repository root on the GPU machine after `farm init-checkpoint out/ck --config yue2-3b --device cuda`."""
import pathlib
import sys
import time

import torch

sys.path.insert(0, ".")
from farm.bench.ar import _measure, _time_graph, batch_invariance, bench_request, copy_rate, weight_bytes  # noqa
from stages import _skinny_gemm_triton as kern  # noqa
from stages import kv_cache, skinny_gemm  # noqa
from stages import paged_attention as pa  # noqa
from stages.ar import AREngine  # noqa
from stages.kv_cache import token_bytes  # noqa
from stages.requests import open_checkpoint  # noqa
from stages.skinny_gemm import Tiling  # noqa
from stages.transformer import AR, HEAD  # noqa
from stages.weights import load_model  # noqa

ckpt = open_checkpoint(pathlib.Path("out/ck/model"), pathlib.Path("out/ck/vae"))
cfg = ckpt.cfg
m = cfg.model
net = load_model(ckpt.model_dir, cfg, {AR, HEAD}, device="cuda")
rate = copy_rate(torch, "cuda")
print(f"copy rate {rate / 1e12:.2f} TB/s", flush=True)

# ---- 1. the FP8-KV op, V either way round ----------------------------------------------------------------------
L, KVH, D, PAGE = m.num_hidden_layers, m.num_key_value_heads, m.head_dim, kv_cache.PAGE_TOKENS
HEADS = m.num_attention_heads
g = torch.Generator(device="cuda").manual_seed(0)


def op_case(rows, ctx, pool_dtype, transposed):
    pages_per_row = -(-ctx // PAGE)
    pages = rows * pages_per_row + 1
    k = (torch.randn(L, pages, KVH, PAGE, D, device="cuda", generator=g, dtype=torch.bfloat16) * 0.5).to(pool_dtype)
    v0 = (torch.randn(L, pages, KVH, PAGE, D, device="cuda", generator=g, dtype=torch.bfloat16) * 0.5).to(pool_dtype)
    v = v0.transpose(-1, -2).contiguous().transpose(-1, -2) if transposed else v0
    qkv = torch.randn(rows, (HEADS + 2 * KVH) * D, dtype=torch.bfloat16, device="cuda", generator=g)
    norm = torch.ones(D, dtype=torch.bfloat16, device="cuda")
    cos = torch.ones(rows, D, dtype=torch.bfloat16, device="cuda")
    sin = torch.zeros(rows, D, dtype=torch.bfloat16, device="cuda")
    table = torch.zeros(rows, -(-m.context // PAGE), dtype=torch.int32, device="cuda")
    table[:, :pages_per_row] = (torch.arange(rows * pages_per_row, device="cuda") + 1).int().reshape(rows, -1)
    lens = torch.full((rows,), ctx, dtype=torch.int32, device="cuda")
    outs = []

    def layers():
        outs.clear()
        for layer in range(L):
            outs.append(pa.decode_attention(qkv, norm, norm, cos, sin, k[layer], v[layer], table, lens, 1e-6))
    us = _time_graph(layers, repeats=20) / L * 1e6
    layers()
    torch.cuda.synchronize()
    nbytes = 2 * rows * ctx * KVH * D * k.element_size()
    result = torch.stack(outs).clone()
    del k, v, v0
    torch.cuda.empty_cache()
    return us, nbytes, result


for rows, ctx in [(1, 450), (12, 2720), (24, 7680), (32, 7680)]:
    line = [f"op {rows:2d} x {ctx:5d}:"]
    res = {}
    for name, dtype, tr in [("bf16", torch.bfloat16, False), ("e4m3 V plain", torch.float8_e4m3fn, False),
                            ("e4m3 V transposed", torch.float8_e4m3fn, True)]:
        g.manual_seed(rows * 7 + ctx)          # the same values for every layout
        us, nbytes, out = op_case(rows, ctx, dtype, tr)
        res[name] = out
        line.append(f"{name} {us:6.1f} us ({nbytes / us / 1e6:.2f} TB/s)")
    same = torch.equal(res["e4m3 V plain"], res["e4m3 V transposed"])
    print(" | ".join(line), f"| e4m3 layouts bit-identical: {same}", flush=True)

# ---- 2. the whole step per variant ---------------------------------------------------------------------------
BASE = dict(skinny_gemm.MEASURED)
QKV, GU, O, DOWN = (4096, 2048, "none", True), (6144, 2048, "silu_mul", True), (2048, 2048, "add", False), (
    2048, 6144, "add", False)
plain_kernel = skinny_gemm._launch


def no_live(x, w, epilogue, residual, norm_eps=None, scale=None, group=None, live=None):
    return plain_kernel(x, w, epilogue, residual, norm_eps, scale, group, None)


V_PLAIN = {"on": False}
_init = kv_cache.PagedKV.__init__


def init(self, *a, **k):
    _init(self, *a, **k)
    if V_PLAIN["on"] and self.kv_format != "bf16":
        self.v = torch.zeros(self.k.shape, dtype=self.k.dtype, device=self.k.device)


kv_cache.PagedKV.__init__ = init

variants = [
    ("HEAD (live mask)", {}, True, "bf16", False),
    ("no live mask", {}, False, "bf16", False),
    ("2/SM: fewer stages", {QKV: Tiling(64, 256, 1, 4, 2), GU: Tiling(64, 256, 1, 4, 2), O: Tiling(16, 256, 1, 4, 4),
                            DOWN: Tiling(64, 128, 4, 4, 4)}, True, "bf16", False),
    ("2/SM: BK 128", {QKV: Tiling(64, 128, 1, 4, 4), GU: Tiling(64, 128, 1, 4, 4), O: Tiling(16, 128, 1, 4, 5),
                      DOWN: Tiling(64, 128, 4, 4, 4)}, True, "bf16", False),
    ("2/SM: BN 32 norm GEMMs", {QKV: Tiling(32, 256, 1, 4, 3), GU: Tiling(32, 256, 1, 4, 3),
                                O: Tiling(16, 256, 1, 4, 4), DOWN: Tiling(64, 128, 4, 4, 4)}, True, "bf16", False),
    ("norm GEMMs split 2", {QKV: Tiling(64, 256, 2, 4, 4), GU: Tiling(64, 256, 2, 4, 3)}, True, "bf16", False),
    ("split 2 + 2/SM", {QKV: Tiling(64, 256, 2, 4, 2), GU: Tiling(64, 256, 2, 4, 2), O: Tiling(16, 256, 1, 4, 4),
                        DOWN: Tiling(64, 128, 4, 4, 4)}, True, "bf16", False),
    ("HEAD (again)", {}, True, "bf16", False),
    ("kv fp8, V transposed (HEAD)", {}, True, "fp8", False),
    ("kv fp8, V plain", {}, True, "fp8", True),
]
steps = [("prompt-450", 450, "plan", 1), ("prompt-450", 450, "plan", 32), ("plan-ref", 2720, "plan", 12),
         ("semantic-ref", 7680, "semantic", 1), ("semantic-ref", 7680, "semantic", 24)]


def gemm_us(engine):
    slots, one = engine.slots, torch.zeros(engine.slots, dtype=torch.bool, device="cuda")
    one[0] = True
    out = []
    for name, epilogue, norm in (("qkv", "none", True), ("o", "add", False), ("gate_up", "silu_mul", True),
                                 ("down", "add", False)):
        weights = [getattr(w, name) for w in engine.step_weights]
        a = torch.randn(slots, weights[0].shape[1], dtype=engine.dtype, device="cuda")
        res = torch.randn(slots, weights[0].shape[0], dtype=engine.dtype, device="cuda") if epilogue == "add" else None
        eps = 1e-6 if norm else None
        full = _time_graph(lambda: [skinny_gemm.linear(a, w, epilogue, res, eps) for w in weights]) * 1e6 / L
        single = _time_graph(lambda: [skinny_gemm.linear(a, w, epilogue, res, eps, live=one) for w in weights]) * 1e6 / L
        out.append(f"{name} {full:.1f}/{single:.1f}")
    return "gemm us (32 rows / 1 live): " + " ".join(out)


def smem():
    seen = set()
    try:
        for cache in kern.skinny_gemm.device_caches.values():
            for key, k in cache[0].items():
                seen.add((k.metadata.shared // 1024, k.n_regs, k.metadata.num_warps))
    except Exception as e:      # the cache layout differs between Triton releases
        return f"smem: ? ({e})"
    return "skinny kernels (smem KB, regs, warps): " + str(sorted(seen))


seen = {}
for name, tiles, live, kv_format, v_plain in variants:
    skinny_gemm.MEASURED.clear()
    skinny_gemm.MEASURED.update(BASE)
    skinny_gemm.MEASURED.update(tiles)
    torch.library.register_kernel("yue2::skinny_linear", "cuda", plain_kernel if live else no_live)
    V_PLAIN["on"] = v_plain
    try:
        kern.skinny_gemm.device_caches.clear()
    except Exception:
        pass
    t0 = time.perf_counter()
    engine = AREngine(net, cfg.tokens, kv_tokens=32 * (7680 + 6 * 16 + 64), cuda_graphs=True, compile=True,
                      kv_format=kv_format)
    kv_token = token_bytes(m, kv_cache.storage_dtype(kv_format, torch.bfloat16))
    wbytes = weight_bytes(engine)
    line = [f"{name:<30}"]
    for sname, ctx, kind, b in steps:
        r = _measure(engine, cfg, sname, ctx, kind, b, 4, wbytes, kv_token, rate)
        line.append(f"step {b}x{ctx}: {r['step_ms']:.3f} ms ({r['floor_ratio']:.2f})")
    inv = batch_invariance(engine, cfg)
    reqs = [bench_request(cfg, f"ids-{i}", c, k, 64, seed=i) for i, (c, k) in enumerate([(300, "plan"),
                                                                                       (2600, "semantic")])]
    ids = [r.ids.tolist() for r in engine.generate(reqs)]
    same = [n for n, other in seen.items() if other == ids]
    seen[name] = ids
    print(" | ".join(line), f"| invariant {inv['identical']} | ids as: {same} | {time.perf_counter() - t0:.0f} s",
          flush=True)
    if kv_format == "bf16":
        print("   ", gemm_us(engine), "|", smem(), flush=True)
    del engine
    torch.cuda.empty_cache()
