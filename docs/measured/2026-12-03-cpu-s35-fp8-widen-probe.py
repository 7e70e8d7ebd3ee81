"""The FP8 KV cache's widening by bit operations (2026-12-03, session s35; written on the CPU box, not yet run: the
session's device time was spent). The split kernel reads e4m3 pages at ~1.9 TB/s where BF16 pages go at ~4 (2026-12-02:
"the widening, not the bytes, sets its time"): each pair of values takes one `cvt.rn.f16x2.e4m3x2`, and V, needed
with the keys along the contraction, is read from shared memory byte by byte. Here an e4m3 byte becomes the FP16
whose bits are its sign, then its exponent and mantissa one place lower — the same value times 2⁻⁸, exactly (e4m3's
subnormals land on FP16's) — with integer ops only; the 2⁸ goes into the score scale and into the span's output.
Every step of that is a power-of-two scaling of exact FP16 products and normal FP32 sums, so the bits must equal the
current kernel's (checked here). Kernel level: `paged_attention._launch` (split + merge) over random pools at 24 rows
× 7,680 keys, 12 × 2,720 and 1 × 7,680: the BF16 cache, the e4m3 cache as it is, and the variant; µs per call in a
CUDA graph, two rounds.
Run from the repository root (at commit 515bfba's kernel): python docs/measured/2026-12-03-cpu-s35-fp8-widen-probe.py
`--compile-only` (Triton 3.6, any box): compiles the variant's split kernel for sm_90 — no `cvt…e4m3x2` left (64
before), V still read from shared memory byte by byte (64 `ld.shared.b8`, as before). In Triton's interpreter
(CPU) the variant gave the same bits as the kernel as it is, over 64- and 16-key pages."""
import importlib.util
import pathlib
import sys
import tempfile

sys.path.insert(0, ".")

SOURCE = pathlib.Path("stages/_paged_attention_triton.py").read_text()
SUBS = [
    ("""@triton.jit
def _span(""", """@triton.jit
def _widen(x):
    \"\"\"e4m3 → the FP16 of the same value times 2⁻⁸, by its bits: sign to bit 15, exponent and mantissa one place
    down (exact, subnormals included).\"\"\"
    b = x.to(tl.uint8, bitcast=True).to(tl.uint16)
    return (((b & 0x80) << 8) | ((b & 0x7F) << 7)).to(tl.float16, bitcast=True)


@triton.jit
def _span("""),
    ("                s = tl.dot(q.to(tl.float16), tl.trans(k.to(tl.float16))) * qk_scale\n",
     "                s = tl.dot(q.to(tl.float16), tl.trans(_widen(k))) * (qk_scale * 256.0)\n"),
    ("                acc = acc * alpha[:, None] + tl.dot(weights.to(tl.float16), v.to(tl.float16))\n",
     "                acc = acc * alpha[:, None] + tl.dot(weights.to(tl.float16), _widen(v))\n"),
    ("        part = PART + row * sp_r + heads[:, None] * sp_h + split * sp_s + d[None, :]\n",
     "        if FP8:\n            acc = acc * 256.0\n"
     "        part = PART + row * sp_r + heads[:, None] * sp_h + split * sp_s + d[None, :]\n"),
]


def variant():
    src = SOURCE
    for old, new in SUBS:
        assert src.count(old) == 1, old
        src = src.replace(old, new)
    path = pathlib.Path(tempfile.mkdtemp()) / "attention_widen.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def compile_only() -> None:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    k = variant()
    names = ["QKV", "QW", "COS", "SIN", "K", "V", "BT", "LENS", "PART", "LSE", "s_r", "scs_r", "sk_p", "sk_h", "sk_t",
             "sbt_r", "sp_r", "sp_h", "sp_s", "sl_r", "sl_h", "qk_scale", "eps"]
    types = ["*bf16"] * 4 + ["*fp8e4nv"] * 2 + ["*i32", "*i32", "*fp32", "*fp32"] + ["i32"] * 11 + ["fp32", "fp32"]
    sig = dict(zip(names, types))
    const = dict(HEADS=16, KV=8, GROUP_PAD=16, D=128, PAGE=64, IEEE=False, PROGRAMS=16, STAGES=2, PDL=True, FP8=True)
    sig.update({c: "constexpr" for c in const})
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(0, 21)}     # what the JIT specialises
    kk = triton.compile(ASTSource(k.split_kv_attention, sig, const, attrs), target=GPUTarget("cuda", 90, 32),
                        options={"num_warps": 4, "launch_pdl": True})
    ptx = kk.asm["ptx"]
    print(f"triton {triton.__version__}: shared {kk.metadata.shared} B, cvt.e4m3 {ptx.count('e4m3x2')}, "
          f"ld.shared.b8 {ptx.count('ld.shared.b8')}, ldmatrix {ptx.count('ldmatrix')}, mma {ptx.count('mma.sync')}")


def main() -> None:
    import torch

    import stages
    from farm.bench.ar import _time_graph
    from stages import paged_attention as pa
    from stages import _paged_attention_triton as as_is
    from stages.kv_cache import to_pool

    widened = variant()

    def use(mod):
        sys.modules["stages._paged_attention_triton"] = stages._paged_attention_triton = mod

    g = torch.Generator(device="cuda").manual_seed(0)
    heads, kv, d, page = 16, 8, 128, 64
    for rows, keys in ((24, 7680), (12, 2720), (1, 7680)):
        per_row = (keys + page - 1) // page + 1
        pages = rows * per_row + 1
        qkv = torch.randn(rows, (heads + 2 * kv) * d, device="cuda", generator=g).bfloat16()
        q_norm, k_norm = ((1 + 0.1 * torch.randn(d, device="cuda", generator=g)).bfloat16() for _ in range(2))
        raw_k, raw_v = (torch.randn(pages, kv, page, d, device="cuda", generator=g) for _ in range(2))
        table = (torch.randperm(pages - 1, device="cuda", generator=g)[:rows * per_row] + 1).int().reshape(rows, -1)
        lens = torch.full((rows,), keys, dtype=torch.int32, device="cuda")
        angles = (lens - 1).float()[:, None] * 1e6 ** (-torch.arange(0, d, 2, device="cuda") / d)
        cos, sin = (f(torch.cat([angles, angles], -1)).bfloat16() for f in (torch.cos, torch.sin))
        pools = {"bf16": (raw_k.bfloat16(), raw_v.bfloat16()),
                 "fp8": (to_pool(raw_k, torch.float8_e4m3fn), to_pool(raw_v, torch.float8_e4m3fn))}
        cases = (("BF16 cache", as_is, "bf16"), ("e4m3 cache as it is", as_is, "fp8"),
                 ("e4m3 cache, bit widening", widened, "fp8"))
        outs = {}
        for name, mod, pool in cases:
            use(mod)
            k, v = (p.clone() for p in pools[pool])
            outs[name] = pa._launch(qkv, q_norm, k_norm, cos, sin, k, v, table, lens, 1e-6)
        torch.cuda.synchronize()
        same = torch.equal(outs["e4m3 cache as it is"], outs["e4m3 cache, bit widening"])
        print(f"{rows} × {keys}: the bit widening gives the same bits {same}", flush=True)
        for rnd in range(2):
            line = []
            for name, mod, pool in cases:
                use(mod)
                k, v = (p.clone() for p in pools[pool])
                us = _time_graph(lambda: pa._launch(qkv, q_norm, k_norm, cos, sin, k, v, table, lens, 1e-6)) * 1e6
                gbytes = rows * keys * kv * d * 2 * k.element_size() / 1e9
                line.append(f"{name} {us:.1f} µs ({gbytes / us * 1e3:.2f} TB/s of pages)")
            print(f"round {rnd} {rows} × {keys}: " + "; ".join(line), flush=True)
        use(as_is)


if __name__ == "__main__":
    compile_only() if "--compile-only" in sys.argv else main()
