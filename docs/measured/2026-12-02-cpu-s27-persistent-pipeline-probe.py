"""Compile-only probe (no GPU: Triton compiles for sm_90 on the CPU box; pointer arguments declared 16-byte aligned,
as the JIT specialises them on a GPU — without that no load becomes an asynchronous copy). Question: can Triton's
software pipeliner keep a persistent kernel's weight loads in flight across the grid barriers between the GEMMs of
a layer chain, while the activation loads wait for the barrier? A chain of 4 GEMMs (32-row x, 32-column weight
tiles, K 2,048 in tiles of 256), one loop over the GEMMs with a spin-wait barrier (an acquire atomic) at the start
of each and a release after its store, the k-loop inside; printed per variant: the loops' trip counts, the TTGIR's
asynchronous copies and plain loads. Run: `python docs/measured/2026-12-02-cpu-s27-persistent-pipeline-probe.py`."""
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


@triton.jit
def opaque_zero(v):
    return tl.inline_asm_elementwise("mov.u32 $0, 0;", "=r,r", [v], dtype=tl.int32, is_pure=True, pack=1)


@triton.jit
def chain(W, X, OUT, FLAG, N: tl.constexpr, K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
          GEMMS: tl.constexpr, STAGES: tl.constexpr, FLAT: tl.constexpr, VOLATILE: tl.constexpr, DEP: tl.constexpr,
          BRANCH: tl.constexpr, SYNC: tl.constexpr):
    nprog = tl.num_programs(0)
    n = tl.program_id(0) * BN + tl.arange(0, BN)
    m = tl.arange(0, BM)
    kk = tl.arange(0, BK)
    for g in tl.range(0, GEMMS, flatten=FLAT):
        seen = tl.atomic_add(FLAG + g, 0, sem="acquire")
        while seen < nprog:
            seen = tl.atomic_add(FLAG + g, 0, sem="acquire")
        dep = opaque_zero(seen) if DEP else 0
        acc = tl.zeros([BN, BM], tl.float32)
        for kt in tl.range(0, K // BK, num_stages=STAGES):
            w = tl.load(W + g * N * K + n[:, None] * K + (kt * BK + kk)[None, :])
            if BRANCH:     # x loaded inside a branch (here a trivial one: the first GEMM reads its own input)
                if g == 0:
                    x = tl.load(X + m[None, :] * K + (kt * BK + kk)[:, None])
                else:
                    x = tl.load(X + g * BM * K + m[None, :] * K + (kt * BK + kk)[:, None])
            else:
                x = tl.load(X + dep + g * BM * K + m[None, :] * K + (kt * BK + kk)[:, None], volatile=VOLATILE)
            acc = tl.dot(w, x, acc)
        tl.store(OUT + g * N * BM + n[:, None] * BM + m[None, :], acc.to(tl.bfloat16))
        if SYNC:           # every thread's store done before the program signals (a CTA barrier)
            tl.debug_barrier()
        tl.atomic_add(FLAG + g + 1, 1, sem="release")


def build(**c):
    sig = {"W": "*bf16", "X": "*bf16", "OUT": "*bf16", "FLAG": "*i32"}
    const = {"N": 4096, "K": 2048, "BM": 32, "BN": 32, "BK": 256, "GEMMS": 4, "STAGES": 4, **c}
    sig.update({k: "constexpr" for k in const})
    attrs = {(i,): [["tt.divisibility", 16]] for i, (_, t) in enumerate(sig.items()) if t.startswith("*")}
    return triton.compile(ASTSource(chain, sig, const, attrs), target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": 4})


print("triton", triton.__version__)
VARIANTS = ((False, False, False, False, False), (True, False, False, False, False), (True, True, False, False, False),
            (True, False, True, False, False), (True, False, False, True, False), (True, False, False, True, True))
for flat, volatile, dep, branch, sync in VARIANTS:
    lines = build(FLAT=flat, VOLATILE=volatile, DEP=dep, BRANCH=branch, SYNC=sync).asm["ttgir"].splitlines()
    loops = [line.split("to ")[1].split(" ")[0] for line in lines if "scf.for" in line]
    copies = {v: sum(1 for line in lines if "async_copy_global_to_local" in line and line.strip().startswith(f"%{v}_"))
              for v in "wx"}
    plain = {v: sum(1 for line in lines if "tt.load " in line and line.strip().startswith(f"%{v}_")) for v in "wx"}
    print(f"flatten={flat!s:5} volatile x={volatile!s:5} x behind an opaque read of the barrier={dep!s:5} "
          f"x in a branch={branch!s:5} CTA barrier before the signal={sync!s:5}: "
          f"loops with trip counts {loops}; asynchronous copies of w {copies['w']}, of x {copies['x']}; "
          f"plain loads of w {plain['w']}, of x {plain['x']}")
