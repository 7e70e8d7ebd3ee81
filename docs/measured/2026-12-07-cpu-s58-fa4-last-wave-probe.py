"""The acoustic attention's last wave (session s58; written on the CPU box). FA4's SM90 forward gives each SM whole
tiles of 128 query rows × one head over every key; the reference chunk (5,373 rows × 16 heads = 672 tiles on 132
SMs) then runs 6 rounds of which the last keeps 12 SMs busy, i.e. 5.09 rounds of work in 6 (the ~85 % of the
matmul rate FA4 reached in s36/s37). stages/nar_attention.py's `wave_split` moves the last row tiles into a second,
varlen call over key ranges and merges them by log-sum-exp. This probe, at the attention alone:
- times FA4 whole (today's call) against the split the plan picks and against forced plans (tail tiles × ranges),
  µs per call replayed from a CUDA graph, three rounds, at the reference chunk and at other chunk lengths;
- checks the split against an FP32 attention (max / mean abs, main rows and tail rows apart) beside FA4 whole;
- checks that the main rows keep FA4 whole's bits, and that the graph replays the eager call's bits.
Run on the GPU machine from the repository root with FA4 on the path (out/fa4site)."""
import math
import sys
import time

sys.path[:0] = ["."]
import torch  # noqa: E402

from stages import nar_attention as na  # noqa: E402

H, KVH, D = 16, 8, 128


def graphed_us(fn, n=10):
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    g.replay()
    torch.cuda.synchronize()
    out = []
    for _ in range(3):
        t = time.perf_counter()
        g.replay()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t) / n * 1e6)
    return out


def forced(plan):
    """FA4 split by a given plan."""
    attend = na._flash4(split=True)[0]
    return lambda q, k, v: attend(q, k, v, plan)


def case(rows, prefix, rounds_only=False):
    keys = prefix + rows
    g = torch.Generator(device="cuda").manual_seed(rows)
    q = torch.randn(1, rows, H, D, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(1, keys, KVH, D, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(1, keys, KVH, D, device="cuda", dtype=torch.bfloat16, generator=g)
    qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)      # the engine's views
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    plan = na.wave_split(rows, H, keys, sms)
    flop = 4 * rows * keys * H * D
    whole, split = na._flash4(split=False)[0], na._flash4(split=True)[0]
    print(f"== {rows} rows × {H} heads over {keys} keys ({math.ceil(rows / 128) * H} tiles on {sms} SMs); "
          f"the plan: {plan}", flush=True)
    ref = whole(qh, kh, vh)
    variants = [("fa4 whole", whole), (f"fa4 split (plan {plan.main_rows}, {plan.splits})", split)]
    if not rounds_only:
        blocks = math.ceil(rows / 128)
        for tail in (1, 2):
            for s in (4, 8, 16):
                p = na.WaveSplit((blocks - tail) * 128, s)
                if p != plan and keys // s >= 256:
                    variants.append((f"forced {p.main_rows}, {s}", forced(p)))
    for name, fn in variants:
        try:
            t = graphed_us(lambda: fn(qh, kh, vh))
            out = fn(qh, kh, vh)
            main = plan.main_rows if "plan" in name else rows
            same_main = torch.equal(out[:, :, :main], ref[:, :, :main])
            print(f"  {name:<34} {' '.join(f'{x:8.1f}' for x in t)} µs  {flop / min(t) / 1e6:6.1f} TFLOP/s  "
                  f"main rows = whole's bits: {same_main}", flush=True)
        except Exception as e:  # a probe: say why and go on
            print(f"  {name:<34} failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
    if rounds_only:
        return
    # numerics against FP32, and the graph against eager
    with torch.no_grad():
        want = torch.nn.functional.scaled_dot_product_attention(qh.float(), kh.float(), vh.float(),
                                                                enable_gqa=True)
    got = split(qh, kh, vh)
    m = plan.main_rows
    for name, out in (("fa4 whole", ref), ("fa4 split", got)):
        diff = (out.float() - want).abs()
        print(f"  vs FP32, {name:<10}: all rows max {diff.max().item():.3e} mean {diff.mean().item():.3e}; "
              f"tail rows max {diff[:, :, m:].max().item():.3e} mean {diff[:, :, m:].mean().item():.3e}", flush=True)
    g2 = torch.cuda.CUDAGraph()
    static = split(qh, kh, vh)
    with torch.cuda.graph(g2):
        static = split(qh, kh, vh)
    g2.replay()
    torch.cuda.synchronize()
    print(f"  graph replay == eager: {torch.equal(static, got)}; repeatable: {torch.equal(got, split(qh, kh, vh))}",
          flush=True)


def gemm_rounds():
    """Do the acoustic stage's cuBLAS products lose a last round too? Each NAR product at a few row counts around
    the reference chunk's 5,373 (TFLOP/s; a product whose rate drops at 5,373 against 5,248 = 41 · 128 pays a
    partly idle last round)."""
    print("== the NAR products (cuBLAS, BF16) by row count: µs, TFLOP/s", flush=True)
    for name, n, k in (("q/k/v", 4096, 2048), ("o", 2048, 2048), ("gate/up", 12288, 2048), ("down", 2048, 6144)):
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        cells = []
        for rows in (4992, 5120, 5248, 5373, 5376, 5504):
            x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
            t = min(graphed_us(lambda: x @ w.t()))
            cells.append(f"{rows}: {t:7.1f} {2 * rows * n * k / t / 1e6:5.0f}")
        print(f"  {name:<8} " + " | ".join(cells), flush=True)


def main():
    print(torch.cuda.get_device_name(0), torch.__version__, flush=True)
    case(5373, 10372)                    # the reference chunk
    case(1502, 3000)                     # bench acoustic's numerics request
    for rows, prefix in ((3752, 7000), (7802, 12000), (2502, 5000)):
        case(rows, prefix, rounds_only=True)
    gemm_rounds()


if __name__ == "__main__":
    main()
