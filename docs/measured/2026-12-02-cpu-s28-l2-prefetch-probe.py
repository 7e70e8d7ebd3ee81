"""A probe for an H200 (written and compiled for sm_90 on a CPU box; run on the GPU machine from the repository
root: `python docs/measured/2026-12-02-cpu-s28-l2-prefetch-probe.py`). Can the idle DRAM time of a one-row decode
step's attention be spent pulling the next GEMMs' weights into L2?

At one live row the two attention kernels of a layer run a few hundred keys on a few dozen programs for several
microseconds, and the memory system idles; then the o and gate/up GEMMs start cold and ramp. The probe chains the
engine's own skinny-GEMM launches for 28 layers of distinct random weights (qkv → gap → o + residual → gate/up with
SiLU·up → down + residual, the measured tiles), where "gap" stands for attention: a kernel of 64 programs that
spins for GAP µs after the qkv GEMM is done. Variants: without the gap (the GEMMs' own streaming), with it, and with
it plus 64 more programs in the same kernel that ask the L2 for o's whole weight and the first fraction f of every
gate/up row (the columns the gate/up programs read first: each of its 96 programs walks its rows along K) —
`cp.async.bulk.prefetch.L2` per row, fire and forget, issued after the kernel's wait for the qkv GEMM. What the
variants' difference says: how much of the gap an L2 prefetch can turn into saved GEMM time (no result changes:
a prefetch moves no values).
"""
import sys

import triton
import triton.language as tl

M, H, I, L = 32, 2048, 6144, 28
SPIN, FETCH = 64, 64          # spinning and prefetching programs of the gap kernel


@triton.jit
def _now(v):
    """The global timer in ns (v: any int32 scalar, for the shape)."""
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [v], dtype=tl.int64, is_pure=False,
                                     pack=1)


@triton.jit
def _prefetch(p, nbytes):
    return tl.inline_asm_elementwise("cp.async.bulk.prefetch.L2.global [$1], $2;\n\tmov.u32 $0, 0;", "=r,l,r",
                                     [p, nbytes], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def gap(WO, WGU, SINK, gap_ns, gu_bytes, ROWS_O: tl.constexpr, ROWS_GU: tl.constexpr, ROW_BYTES: tl.constexpr,
        SPIN: tl.constexpr, FETCH: tl.constexpr, PER: tl.constexpr):
    """Programs < SPIN spin for gap_ns after the kernel before them is done; the others (FETCH of them, when the
    grid has them) prefetch o's rows in full and gate/up's first gu_bytes of each row. PER rows per program."""
    pid = tl.program_id(0)
    tl.extra.cuda.gdc_wait()
    if pid < SPIN:
        start = _now(pid)
        t = start
        while t - start < gap_ns:
            t = _now(pid)
    else:
        row = tl.minimum((pid - SPIN) * PER + tl.arange(0, PER), ROWS_O + ROWS_GU - 1)   # the tail repeats the last
        in_o = row < ROWS_O
        at = tl.where(in_o, WO.to(tl.pointer_type(tl.int8)) + row.to(tl.int64) * ROW_BYTES,
                      WGU.to(tl.pointer_type(tl.int8)) + (row - ROWS_O).to(tl.int64) * ROW_BYTES)
        size = tl.where(in_o, ROW_BYTES, gu_bytes)
        got = _prefetch(at, tl.maximum(size, 16))
        tl.store(SINK + pid, tl.sum(got, 0), mask=tl.sum(got, 0) != 0)     # never true: keeps the asm alive


def _launch_gap(wo, wgu, sink, gap_us, fraction, fetch):
    rows = wo.shape[0] + wgu.shape[0]
    per = triton.next_power_of_2(triton.cdiv(rows, FETCH))
    gu_bytes = int(wgu.shape[1] * 2 * fraction) // 16 * 16
    gap[(SPIN + (FETCH if fetch else 0),)](wo, wgu, sink, int(gap_us * 1000), gu_bytes, ROWS_O=wo.shape[0],
                                           ROWS_GU=wgu.shape[0], ROW_BYTES=wo.shape[1] * 2, SPIN=SPIN,
                                           FETCH=FETCH, PER=per, num_warps=4, launch_pdl=True)


def compile_only() -> None:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = {"WO": "*bf16", "WGU": "*bf16", "SINK": "*i32", "gap_ns": "i64", "gu_bytes": "i32"}
    const = {"ROWS_O": H, "ROWS_GU": 2 * I, "ROW_BYTES": 2 * H, "SPIN": SPIN, "FETCH": FETCH, "PER": 256}
    sig.update({k: "constexpr" for k in const})
    attrs = {(i,): [["tt.divisibility", 16]] for i, (_, t) in enumerate(sig.items()) if t.startswith("*")}
    k = triton.compile(ASTSource(gap, sig, const, attrs), target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    ptx = k.asm["ptx"]
    print(f"triton {triton.__version__}: bulk prefetches in the PTX: {ptx.count('cp.async.bulk.prefetch.L2')}, "
          f"globaltimer reads: {ptx.count('%globaltimer')}")


def run() -> None:
    import torch

    from farm.bench.ar import _time_graph
    from stages import skinny_gemm

    torch.manual_seed(0)
    dev = "cuda"
    shapes = {"qkv": (4096, H), "o": (H, H), "gu": (2 * I, H), "down": (H, I)}
    ws = {k: [torch.randn(n, kd, dtype=torch.bfloat16, device=dev) * kd ** -0.5 for _ in range(L)]
          for k, (n, kd) in shapes.items()}
    x0 = torch.randn(M, H, dtype=torch.bfloat16, device=dev)
    sink = torch.zeros(SPIN + FETCH, dtype=torch.int32, device=dev)
    layer_bytes = sum(n * kd * 2 for n, kd in shapes.values())

    def chain(gap_us=None, fraction=0.0, fetch=False):
        x = x0
        for layer in range(L):
            q = skinny_gemm._launch(x, ws["qkv"][layer], "none", None)
            if gap_us is not None:
                _launch_gap(ws["o"][layer], ws["gu"][layer], sink, gap_us, fraction, fetch)
            h = skinny_gemm._launch(q[:, :H], ws["o"][layer], "add", x)
            g = skinny_gemm._launch(h, ws["gu"][layer], "silu_mul", None)
            x = skinny_gemm._launch(g, ws["down"][layer], "add", h)
        return x

    want = chain()
    for what, kw in (("again", {}), ("with the gap", {"gap_us": 8.0}), ("with the gap and prefetches",
                                                                       {"gap_us": 8.0, "fraction": 0.5, "fetch": True})):
        got = chain(**kw)
        torch.cuda.synchronize()
        print(f"chain {what}: equal to the first {torch.equal(got, want)}, max abs difference "
              f"{(got.float() - want.float()).abs().max().item():.3g}", flush=True)
    t0 = _time_graph(chain) * 1e6 / L
    print(f"GEMMs alone (qkv, o, gate/up, down): {t0:.2f} µs per layer ({layer_bytes / t0 / 1e6:.2f} TB/s)")
    for gap_us in (4.0, 8.0):
        base = _time_graph(lambda: chain(gap_us)) * 1e6 / L
        print(f"gap {gap_us:.0f} µs, no prefetch: {base:.2f} µs per layer (GEMMs {base - gap_us:.2f} beside the gap)",
              flush=True)
        for fraction in (0.0, 0.25, 0.5, 1.0):
            got = chain(gap_us, fraction, True)
            t = _time_graph(lambda: chain(gap_us, fraction, True)) * 1e6 / L
            print(f"gap {gap_us:.0f} µs, prefetch o + {fraction:.2f} of gate/up's K: {t:.2f} µs per layer "
                  f"({base - t:+.2f} against no prefetch); same output: {torch.equal(got, want)}", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, ".")
    if "--compile-only" in sys.argv:
        compile_only()
    else:
        run()
