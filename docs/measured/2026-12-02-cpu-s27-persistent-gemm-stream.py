"""A probe written on a CPU box (compiled for sm_90 with Triton 3.6 and 3.9, `--compile-only`; its indexing checked
under Triton's interpreter, `TRITON_INTERPRET=1 … --check-on-cpu`) and run on an H200 on 2026-12-02 (third session):
bit-identical to separate launches and ~5× slower (docs/measured/2026-12-02-h200-s28-persistent-gemm-stream.log for
the first version, atomic polls only; -ld.log and -variants.log for this one, with `ld.acquire` polls and the
timing-only variants without waits or with x pipelined; docs/benchmarks.md says what they show). Does a persistent
kernel whose weight copies stay in flight across its grid barriers stream the AR layers' weights faster than
separate launches? (docs/ar-engine.md, "What the compiler can do for a persistent kernel"; the first persistent
probe, docs/measured/2026-12-01-h200-s24-persistent-gemm-probe.py, drained its pipeline at every barrier and lost:
56.9 against 45.3 µs per layer.)

The chain: the four products of the 28 yue2-3b layers at 32 rows, each one's input the output of the one before
(the decode step's dependencies; attention, norms and epilogues left out: this measures streaming only), in BF16
with FP32 accumulation. 128 programs; every GEMM is cut into tiles of 16 output columns over the whole of K, and
each program owns the same number of tiles of every GEMM (q/k/v 2, o 1, gate/up 6, down 1), so no sums cross
programs. One loop runs all of a program's k-tiles of all 112 GEMMs. The weight loads depend on the loop index
alone, so the pipeliner runs them STAGES − 1 k-tiles ahead, straight across the barriers. The activation loads sit
in a branch, which it leaves synchronous, and their address adds an opaque zero computed from the wait's result
(without it the compiled loop read x of a GEMM's first k-tile before that k-tile's wait). A CTA barrier in the loop
would turn the pipelining off, so each thread releases its own stores into its program's counter, and a waiting
program polls all 128 counters at once (one acquire per thread; their minimum, a cross-warp reduction, is its
CTA-wide synchronisation).

Baseline in the same run: the same chain as separate launches of our skinny-GEMM kernel with the same tile (16 × 256,
no split: the same k-order, so the outputs should be equal bit for bit) replayed in a CUDA graph. GPU machine,
repository root: `python docs/measured/2026-12-02-cpu-s27-persistent-gemm-stream.py` (random weights, ~6 GB).
A spin that outlasts LIMIT polls counts an error instead of hanging; all 128 programs must be resident at once
(one per SM of an H200's 132).
"""
import sys

import triton
import triton.language as tl

M, H, I, L = 32, 2048, 6144, 28
BN, BK, PROGRAMS, WARPS = 16, 256, 128, 4
THREADS = 32 * WARPS
# (output width, depth, output tiles per program) of q/k/v, o, gate/up, down
GEMMS = ((4096, H, 2), (H, H, 1), (2 * I, H, 6), (H, I, 1))
LIMIT = 1 << 20


@triton.jit
def opaque_zero(v):
    """0, computed from v by inline PTX the compiler cannot see through."""
    return tl.inline_asm_elementwise("mov.u32 $0, 0;", "=r,r", [v], dtype=tl.int32, is_pure=True, pack=1)


@triton.jit
def load_acquire(p):
    """*p with acquire semantics at GPU scope: a plain load, not a read-modify-write, so that 128 programs polling the
    same counters do not queue at the L2's atomic units."""
    return tl.inline_asm_elementwise("ld.acquire.gpu.global.b32 $0, [$1];", "=r,l", [p], dtype=tl.int32,
                                     is_pure=False, pack=1)


@triton.jit
def poll(p, LD_POLL: tl.constexpr):
    if LD_POLL:
        return load_acquire(p)
    else:
        return tl.atomic_add(p, 0, sem="acquire", scope="gpu")


@triton.jit
def _zero(v):
    return v * 0


@triton.jit
def pick(g, a, b, c, d):
    return tl.where(g == 0, a, tl.where(g == 1, b, tl.where(g == 2, c, d)))


@triton.jit
def chain(W0, W1, W2, W3, A, O0, O1, O2, O3, FLAG, ERR, layers,
          N0: tl.constexpr, K0: tl.constexpr, T0: tl.constexpr, N1: tl.constexpr, K1: tl.constexpr,
          T1: tl.constexpr, N2: tl.constexpr, K2: tl.constexpr, T2: tl.constexpr, N3: tl.constexpr,
          K3: tl.constexpr, T3: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
          P: tl.constexpr, THREADS: tl.constexpr, STAGES: tl.constexpr, LIMIT: tl.constexpr,
          LD_POLL: tl.constexpr, WAIT: tl.constexpr, X_SYNC: tl.constexpr):
    """Layer l: O0[l] = x·W0[l]ᵀ with x = O3[l − 1] (A for l = 0), O1[l] = O0[l][:, :K1]·W1[l]ᵀ, O2[l] = O1[l]·W2[l]ᵀ,
    O3[l] = O2[l][:, :K3]·W3[l]ᵀ, all [layers, BM, N] BF16. FLAG [4·layers, P]: THREADS per program once it is done
    with that phase (zeroed by the caller)."""
    pid = tl.program_id(0)
    m = tl.arange(0, BM)
    kk = tl.arange(0, BK)
    cols = tl.arange(0, BN)
    programs = tl.arange(0, P)
    lanes = tl.zeros([THREADS], tl.int32)
    E0: tl.constexpr = T0 * (K0 // BK)                    # a program's k-tiles per layer, cumulated over the GEMMs
    E1: tl.constexpr = E0 + T1 * (K1 // BK)
    E2: tl.constexpr = E1 + T2 * (K2 // BK)
    E3: tl.constexpr = E2 + T3 * (K3 // BK)
    acc = tl.zeros([BN, BM], tl.float32)
    for i in tl.range(0, layers * E3, num_stages=STAGES):
        layer = i // E3
        j = i % E3
        g = (j >= E0).to(tl.int32) + (j >= E1).to(tl.int32) + (j >= E2).to(tl.int32)
        local = j - pick(g, 0, E0, E1, E2)
        depth = pick(g, K0, K1, K2, K3)
        width = pick(g, N0, N1, N2, N3)
        kts = depth // BK                                  # k-tiles per output tile
        n = (pid + (local // kts) * P) * BN + cols         # this program's tiles: pid, pid + P, …
        k = (local % kts) * BK + kk
        w_at = pick(g, W0, W1, W2, W3) + layer.to(tl.int64) * width * depth
        w = tl.load(w_at + n[:, None].to(tl.int64) * depth + k[None, :])
        phase = layer * 4 + g
        ready = 0
        if WAIT:
            if (local == 0) & (phase > 0):                 # the GEMM's first k-tile here: wait for its input
                done = tl.min(poll(FLAG + (phase - 1) * P + programs, LD_POLL), 0)
                spins = 0
                while (done < THREADS) & (spins < LIMIT):
                    done = tl.min(poll(FLAG + (phase - 1) * P + programs, LD_POLL), 0)
                    spins += 1
                if spins >= LIMIT:
                    tl.atomic_add(ERR, 1)
                ready = opaque_zero(done)      # x's address depends on the wait: the scheduler cannot put x first
        if local % kts == 0:
            acc = tl.zeros([BN, BM], tl.float32)
        if X_SYNC:
            if phase == 0:
                x = tl.load(A + m[None, :] * K0 + k[:, None])
            else:
                src_width = pick(g, N3, N0, N1, N2)
                prev = tl.where(g == 0, layer - 1, layer)
                x_at = pick(g, O3, O0, O1, O2) + ready + prev.to(tl.int64) * BM * src_width
                x = tl.load(x_at + m[None, :] * src_width + k[:, None], cache_modifier=".cg")
        else:                              # timing only: x pipelined like w, so read before it is written
            src_width = tl.where(phase == 0, K0, pick(g, N3, N0, N1, N2))
            prev = tl.where(g == 0, layer - 1, layer)
            x_at = tl.where(phase == 0, A, pick(g, O3, O0, O1, O2) + prev.to(tl.int64) * BM * src_width)
            x = tl.load(x_at + m[None, :] * src_width + k[:, None], cache_modifier=".cg")
        acc = tl.dot(w, x, acc)
        if local % kts == kts - 1:
            out_at = pick(g, O0, O1, O2, O3) + layer.to(tl.int64) * BM * width
            tl.store(out_at + m[None, :] * width + n[:, None], acc.to(O0.dtype.element_ty))
            if local == pick(g, E0, E1 - E0, E2 - E1, E3 - E2) - 1:     # this program's last tile of the GEMM:
                tl.atomic_add(FLAG + phase * P + pid + lanes, 1, sem="release", scope="gpu")   # each thread


def constexprs(stages: int, gemms=GEMMS, bn=BN, bk=BK, programs=PROGRAMS, rows=M, ld_poll=True, wait=True,
               x_sync=True) -> dict:
    c = {"BM": rows, "BN": bn, "BK": bk, "P": programs, "THREADS": THREADS, "STAGES": stages, "LIMIT": LIMIT,
         "LD_POLL": ld_poll, "WAIT": wait, "X_SYNC": x_sync}
    for g, (n, k, t) in enumerate(gemms):
        assert n == bn * programs * t and k % bk == 0, (n, k, t)
        c.update({f"N{g}": n, f"K{g}": k, f"T{g}": t})
    return c


def check_on_cpu() -> None:
    """The kernel's indexing under Triton's interpreter (TRITON_INTERPRET=1; FP32, one program, so that its
    barriers only wait for itself, and small shapes) against the chain in PyTorch."""
    import torch

    globals()["opaque_zero"] = _zero         # the interpreter runs no inline PTX (its programs run one by one anyway)
    torch.manual_seed(0)
    layers, rows, bn, bk = 2, 16, 16, 16
    gemms = ((64, 32, 4), (32, 32, 2), (96, 32, 6), (32, 48, 2))      # o reads 32 of q/k/v's 64, down 48 of 96
    ws = [torch.randn(layers, n, k) * k ** -0.5 for n, k, _ in gemms]
    a = torch.randn(rows, gemms[0][1])
    outs = [torch.empty(layers, rows, n) for n, _, _ in gemms]
    flag = torch.zeros(4 * layers, 1, dtype=torch.int32)
    err = torch.zeros(1, dtype=torch.int32)
    chain[(1,)](*ws, a, *outs, flag, err, layers, **constexprs(2, gemms, bn, bk, 1, rows, ld_poll=False))
    x = a
    for layer in range(layers):
        for g, (_, k, _) in enumerate(gemms):
            x = x[:, :k] @ ws[g][layer].t()
            assert torch.allclose(outs[g][layer], x, atol=1e-4), (layer, g)
    assert int(err.item()) == 0 and bool((flag == THREADS).all())
    print("ok: the interpreted kernel equals the PyTorch chain")


def compile_only() -> None:
    """Compile for sm_90 without a GPU; print what the pipeliner made of the two loads."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = {name: "*bf16" for name in ("W0", "W1", "W2", "W3", "A", "O0", "O1", "O2", "O3")}
    sig.update({"FLAG": "*i32", "ERR": "*i32", "layers": "i32"})
    const = constexprs(4)
    sig.update({k: "constexpr" for k in const})
    attrs = {(i,): [["tt.divisibility", 16]] for i, (_, t) in enumerate(sig.items()) if t.startswith("*")}
    k = triton.compile(ASTSource(chain, sig, const, attrs), target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": WARPS})
    lines = k.asm["ttgir"].splitlines()
    count = {v: (sum("async_copy_global_to_local" in s and s.strip().startswith(f"%{v}") for s in lines),
                 sum("tt.load " in s and s.strip().startswith(f"%{v}") for s in lines)) for v in "wx"}
    print(f"triton {triton.__version__}: shared memory {k.metadata.shared // 1024} KB; (asynchronous copies, plain "
          f"loads) of w {count['w']}, of x {count['x']}")


def run() -> None:
    import torch

    from farm.bench.ar import _time_graph        # seconds per call of fn replayed as one CUDA graph
    from stages import skinny_gemm

    torch.manual_seed(0)
    dev = "cuda"
    ws = [torch.randn(L, n, k, dtype=torch.bfloat16, device=dev) * k ** -0.5 for n, k, _ in GEMMS]
    a = torch.randn(M, H, dtype=torch.bfloat16, device=dev)
    outs = [torch.empty(L, M, n, dtype=torch.bfloat16, device=dev) for n, _, _ in GEMMS]
    flag = torch.zeros(4 * L, PROGRAMS, dtype=torch.int32, device=dev)
    err = torch.zeros(1, dtype=torch.int32, device=dev)
    tile = skinny_gemm.Tiling(BN, BK, 1, WARPS, 4)
    depths = [k for _, k, _ in GEMMS]

    def separate():
        x, got = a, []
        for layer in range(L):
            for g in range(4):
                x = skinny_gemm._launch(x[:, :depths[g]], ws[g][layer], "none", None, t=tile)   # a strided view
                got.append(x)
        return got

    def persistent(stages, ld_poll=True, **timing_only):
        flag.zero_()
        chain[(PROGRAMS,)](*ws, a, *outs, flag, err, L, **constexprs(stages, ld_poll=ld_poll, **timing_only),
                           num_warps=WARPS)

    nbytes = sum(w[0].numel() * 2 for w in ws)
    want = separate()
    t = _time_graph(separate) * 1e6 / L
    print(f"separate launches, tile {BN} x {BK}: {t:.2f} µs per layer ({nbytes / t / 1e6:.2f} TB/s)", flush=True)
    for stages, ld_poll in ((4, False), (4, True)):
        outs[3].zero_()
        persistent(stages, ld_poll)
        torch.cuda.synchronize()
        equal = all(torch.equal(outs[g][layer], want[4 * layer + g]) for layer in range(L) for g in range(4))
        t = _time_graph(lambda: persistent(stages, ld_poll)) * 1e6 / L
        how = "ld.acquire polls" if ld_poll else "atomic polls"
        print(f"persistent, {stages} stages, {how}: {t:.2f} µs per layer ({nbytes / t / 1e6:.2f} TB/s; the counters' "
              f"zeroing included); equal to separate launches: {equal}; spin errors {int(err.item())}", flush=True)
    # Where the time goes (wrong results, timing only): without the waits; and without them with x pipelined too.
    for what, kw in (("no waits", {"wait": False}), ("no waits, x pipelined", {"wait": False, "x_sync": False})):
        t = _time_graph(lambda: persistent(4, **kw)) * 1e6 / L
        print(f"timing only, 4 stages, {what}: {t:.2f} µs per layer ({nbytes / t / 1e6:.2f} TB/s)", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, ".")
    if "--compile-only" in sys.argv:
        compile_only()
    elif "--check-on-cpu" in sys.argv:
        check_on_cpu()
    else:
        run()
