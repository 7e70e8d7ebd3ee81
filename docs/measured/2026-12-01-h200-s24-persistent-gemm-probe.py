"""Probe: a persistent kernel running the 4 GEMMs of all 28 layers (attention left out) with grid-wide phase
barriers and the next weight tile loaded before each wait, against the same chain as separate skinny-GEMM
launches replayed in a CUDA graph. Also: the cost of a bare barrier."""
import sys, time
import torch, triton, triton.language as tl
sys.path.insert(0, ".")
from stages import skinny_gemm as sg
from stages._skinny_gemm_triton import _tile, _finish

M, H, I, L = 32, 2048, 6144, 28
QKV_N = 4096


@triton.jit
def _arrive(BAR):
    tl.debug_barrier()
    tl.atomic_add(BAR, 1, sem="release", scope="gpu")


@triton.jit
def _wait(BAR, target, ERR, LIMIT: tl.constexpr):
    v = tl.atomic_add(BAR, 0, sem="acquire", scope="gpu")
    spins = 0
    while (v < target) & (spins < LIMIT):
        v = tl.atomic_add(BAR, 0, sem="acquire", scope="gpu")
        spins += 1
    if spins >= LIMIT:
        tl.atomic_add(ERR, 1)
    tl.debug_barrier()


@triton.jit
def barriers(BAR, ERR, n, G: tl.constexpr, LIMIT: tl.constexpr):
    for i in range(n):
        _arrive(BAR)
        _wait(BAR, (i + 1) * G, ERR, LIMIT)


@triton.jit
def _first(W, n, k_lo, sw, BK: tl.constexpr):
    kk = tl.arange(0, BK)
    return tl.load(W + n[:, None].to(tl.int64) * sw + (k_lo + kk)[None, :])


@triton.jit
def _gemm_phase(X, W, OUT, RES, PART, COUNT, task, w_first, w_first2, M, N, sx, sw, so, sr, eps,
                K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, SPLIT: tl.constexpr,
                EPI: tl.constexpr, NORM: tl.constexpr, STAGES: tl.constexpr):
    tile = task // SPLIT
    part = task % SPLIT
    n = tile * BN + tl.arange(0, BN)
    K_PART: tl.constexpr = K // SPLIT
    k_lo = part * K_PART
    MMA: tl.constexpr = X.dtype.element_ty
    acc, squares = _tile(X, W, M, sx, sw, n, k_lo, w_first, K_PART, BM, BN, BK, STAGES, NORM, MMA)
    acc2 = acc
    if EPI == 2:
        acc2, _ = _tile(X, W, M, sx, sw, n + N, k_lo, w_first2, K_PART, BM, BN, BK, STAGES, False, MMA)
    if NORM:
        factor = tl.rsqrt(squares / K + eps)[None, :]
        acc = acc * factor
        acc2 = acc2 * factor
    if SPLIT == 1:
        _finish(acc, acc2, OUT, RES, M, so, sr, n, EPI, BM)
    else:
        m = tl.arange(0, BM)
        cell = n[:, None] * BM + m[None, :]
        tl.store(PART + (part * 2) * N * BM + cell, acc)
        done = tl.atomic_add(COUNT + tile, 1, sem="acq_rel")
        if done == SPLIT - 1:
            total = tl.zeros([BN, BM], tl.float32)
            for s in tl.static_range(SPLIT):
                total += tl.load(PART + (s * 2) * N * BM + cell, cache_modifier=".cg")
            tl.store(COUNT + tile, 0)
            _finish(total, total, OUT, RES, M, so, sr, n, EPI, BM)


@triton.jit
def chain(X, QKV, HB, WQ, WO, WG, WD, PART, COUNT, BAR, ERR, M, eps, layers,
          H: tl.constexpr, I: tl.constexpr, QN: tl.constexpr, BM: tl.constexpr, G: tl.constexpr,
          LIMIT: tl.constexpr):
    """Per layer: QKV = norm(X)·Wq (folded), X += QKV[:, :H]·Wo, HB = silu·up(norm(X)·Wg), X += HB·Wd."""
    pid = tl.program_id(0)
    phase = 0
    for l in range(layers):
        wq = WQ + l * QN * H
        wo = WO + l * H * H
        wg = WG + l * 2 * I * H
        wd = WD + l * H * I
        # phase A: q/k/v (BN 64, BK 256, 64 tiles)
        if pid < QN // 64:
            wf = _first(wq, pid * 64 + tl.arange(0, 64), 0, H, 256)
            _wait(BAR, phase * G, ERR, LIMIT)
            _gemm_phase(X, wq, QKV, X, PART, COUNT, pid, wf, wf, M, QN, H, H, QN, H, eps,
                        H, BM, 64, 256, 1, 0, True, 4)
        else:
            _wait(BAR, phase * G, ERR, LIMIT)
        _arrive(BAR)
        phase += 1
        # phase B: o (BN 16, BK 256, 128 tiles), residual add in place
        if pid < H // 16:
            wf = _first(wo, pid * 16 + tl.arange(0, 16), 0, H, 256)
            _wait(BAR, phase * G, ERR, LIMIT)
            _gemm_phase(QKV, wo, X, X, PART, COUNT, pid, wf, wf, M, H, QN, H, H, H, eps,
                        H, BM, 16, 256, 1, 1, False, 5)
        else:
            _wait(BAR, phase * G, ERR, LIMIT)
        _arrive(BAR)
        phase += 1
        # phase C: gate/up + norm (BN 64, BK 256, 96 tiles)
        if pid < I // 64:
            n = pid * 64 + tl.arange(0, 64)
            wf = _first(wg, n, 0, H, 256)
            wf2 = _first(wg, n + I, 0, H, 256)
            _wait(BAR, phase * G, ERR, LIMIT)
            _gemm_phase(X, wg, HB, X, PART, COUNT, pid, wf, wf2, M, I, H, H, I, H, eps,
                        H, BM, 64, 256, 1, 2, True, 3)
        else:
            _wait(BAR, phase * G, ERR, LIMIT)
        _arrive(BAR)
        phase += 1
        # phase D: down, split 4 (BN 64, BK 128, 32 tiles x 4), residual add in place
        if pid < (H // 64) * 4:
            n = (pid // 4) * 64 + tl.arange(0, 64)
            wf = _first(wd, n, (pid % 4) * (I // 4), I, 128)
            _wait(BAR, phase * G, ERR, LIMIT)
            _gemm_phase(HB, wd, X, X, PART, COUNT, pid, wf, wf, M, H, I, I, H, H, eps,
                        I, BM, 64, 128, 4, 1, False, 5)
        else:
            _wait(BAR, phase * G, ERR, LIMIT)
        _arrive(BAR)
        phase += 1


def graph_time(fn, reps=20):
    fn(); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        g.replay()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / reps * 1e3  # µs


def main():
    dev = "cuda"
    torch.manual_seed(0)
    G = 128
    props = torch.cuda.get_device_properties(0)
    print("SMs", props.multi_processor_count, torch.__version__, triton.__version__)
    bar = torch.zeros(1, dtype=torch.int32, device=dev)
    err = torch.zeros(1, dtype=torch.int32, device=dev)
    for g_ in (32, 64, 128, 132):
        for n in (1000,):
            bar.zero_()
            barriers[(g_,)](bar, err, n, G=g_, LIMIT=1 << 20)
            torch.cuda.synchronize()
            bar.zero_()
            t0 = time.perf_counter()
            barriers[(g_,)](bar, err, n, G=g_, LIMIT=1 << 20)
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            print(f"bare barrier, {g_} programs: {dt / n * 1e6:.2f} µs per barrier (err {err.item()})", flush=True)
    s = 0.02
    wq = (torch.randn(L, QKV_N, H, device=dev) * s).bfloat16()
    wo = (torch.randn(L, H, H, device=dev) * s).bfloat16()
    wg = (torch.randn(L, 2 * I, H, device=dev) * s).bfloat16()
    wd = (torch.randn(L, H, I, device=dev) * s).bfloat16()
    x0 = torch.randn(M, H, device=dev).bfloat16()
    eps = 1e-6

    def reference():
        x = x0.clone()
        for l in range(L):
            qkv = sg.linear(x, wq[l], "none", None, eps)
            x = sg.linear(qkv[:, :H].contiguous(), wo[l], "add", x)
            h = sg.linear(x, wg[l], "silu_mul", None, eps)
            x = sg.linear(h, wd[l], "add", x)
        return x
    ref = reference()
    t_ref = graph_time(reference)
    print(f"separate launches (graph): {t_ref:.1f} µs for {L} layers = {t_ref / L:.2f} µs per layer", flush=True)
    X = torch.empty_like(x0)
    QKV = torch.empty(M, QKV_N, dtype=torch.bfloat16, device=dev)
    HB = torch.empty(M, I, dtype=torch.bfloat16, device=dev)
    PART = torch.empty(4, 2, H, 32, dtype=torch.float32, device=dev)
    COUNT = torch.zeros(H // 64, dtype=torch.int32, device=dev)

    def persistent(stages_note=""):
        X.copy_(x0)
        bar.zero_()
        chain[(G,)](X, QKV, HB, wq, wo, wg, wd, PART, COUNT, bar, err, M, eps, L, H=H, I=I, QN=QKV_N, BM=32, G=G,
                    LIMIT=1 << 22, num_warps=4)
        return X
    # NB: a qkv[:, :H] view differs from the reference's contiguous copy only in its row stride
    got = persistent().clone()
    torch.cuda.synchronize()
    print("errors", err.item(), "equal to separate launches:", torch.equal(got, ref),
          "max abs diff", (got.float() - ref.float()).abs().max().item(), flush=True)
    t_p = graph_time(persistent)
    print(f"persistent: {t_p:.1f} µs for {L} layers = {t_p / L:.2f} µs per layer (incl. copy + zero)", flush=True)
    for reps in range(3):
        again = persistent().clone(); torch.cuda.synchronize()
        print("repeat equal:", torch.equal(again, got), flush=True)
    bytes_layer = 2 * (QKV_N * H + H * H + 2 * I * H + H * I)
    print(f"bytes per layer {bytes_layer / 1e6:.1f} MB: separate {bytes_layer / (t_ref / L) / 1e6:.2f} TB/s, "
          f"persistent {bytes_layer / (t_p / L) / 1e6:.2f} TB/s")


main()
