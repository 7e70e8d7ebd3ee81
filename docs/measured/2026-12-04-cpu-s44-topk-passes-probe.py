"""How many counting passes the candidate kernels' K-th-largest search takes: bisection (the kernels' `_select`)
against passes that alternate the point where the counts, taken as linear in the int32 key between the bounds,
would cross K with the midpoint (2026-12-04, session s44; CPU only, the same integer arithmetic in Python). 20
draws each: chunks of 4,096 scores (Gaussian logits rounded to BF16, FP32, BF16 over a temperature of 0.7), and the
row stage's 9,472 candidates of a 151,552-id plan span (37 chunks' best 256, padded to 16,384). Both find the same key.
Run anywhere: python docs/measured/2026-12-04-cpu-s44-topk-passes-probe.py"""
import torch


def keyof(v):
    """FP32 → int32 with the same order (the kernels' `_key`)."""
    b = v.view(torch.int32)
    return torch.where(b < 0, b ^ 0x7FFFFFFF, b)


def bisection(key, k):
    lo, hi, passes = int(key.reshape(k, -1).max(1).values.min()), int(key.max()), 0
    while lo < hi:
        mid = lo + (hi - lo + 1) // 2
        passes += 1
        if int((key >= mid).sum()) >= k:
            lo = mid
        else:
            hi = mid - 1
    return lo, passes


def interpolating(key, k):
    """count(≥ lo) = c_lo ≥ k and count(≥ hi + 1) = c_hi < k throughout; one pass more for c_lo."""
    lo, hi = int(key.reshape(k, -1).max(1).values.min()), int(key.max())
    c_lo, c_hi, step, passes = int((key >= lo).sum()), 0, 0, 1
    while lo < hi:
        if step % 2:
            t = lo + (hi - lo + 1) // 2
        else:
            t = lo + 1 + (hi - lo) * (c_lo - k) // (c_lo - c_hi)
        c = int((key >= t).sum())
        passes += 1
        if c >= k:
            lo, c_lo = t, c
        else:
            hi, c_hi = t - 1, c
        step += 1
    return lo, passes


def row_stage():
    x = (torch.randn(151552) * 3).bfloat16().float()
    cand = torch.cat([c.topk(256).values for c in x.split(4096)])
    return torch.cat([keyof(cand.contiguous()), torch.full((16384 - len(cand),), -2 ** 31, dtype=torch.int32)])


torch.manual_seed(0)
CASES = {"gaussian*3 bf16": lambda: keyof((torch.randn(4096) * 3).bfloat16().float()),
         "gaussian f32": lambda: keyof(torch.randn(4096)),
         "gaussian/0.7 temp": lambda: keyof(((torch.randn(4096) * 3).bfloat16().float() / 0.7).contiguous()),
         "row stage 9472 (37x256 best)": row_stage}
for name, draw in CASES.items():
    tb = ti = 0
    for _ in range(20):
        key = draw().long()
        (a, nb), (b, ni) = bisection(key, 256), interpolating(key, 256)
        assert a == b
        tb, ti = tb + nb, ti + ni
    print(f"{name:30} bisection {tb / 20:5.1f} passes, interpolating {ti / 20:5.1f}")
