"""How many counting passes the candidate kernels' K-th-largest search takes: bisection (the kernels' `_select`)
against passes that alternate the point where the counts, taken as linear in the int32 key between the bounds,
would cross K with the midpoint (2026-12-04, session s44; CPU only, the same integer arithmetic in Python). 20
draws each: chunks of 4,096 scores (Gaussian logits rounded to BF16, FP32, BF16 over a temperature of 0.7), and the
row stage's 9,472 candidates of a 151,552-id plan span (37 chunks' best 256, padded to 16,384). Both find the same key.
Run anywhere: python docs/measured/2026-12-04-cpu-s44-topk-passes-probe.py"""
import torch
def keyof(v):
    b = v.view(torch.int32)
    return torch.where(b < 0, b ^ 0x7FFFFFFF, b)
def bis(key, K):
    lo = int(key.reshape(K, -1).max(1).values.min()); hi = int(key.max()); n = 0
    while lo < hi:
        mid = lo + (hi - lo + 1) // 2; n += 1
        if int((key >= mid).sum()) >= K: lo = mid
        else: hi = mid - 1
    return lo, n
def interp(key, K):
    lo = int(key.reshape(K, -1).max(1).values.min()); hi = int(key.max())
    c_lo = int((key >= lo).sum()); c_hi = 0; step = 0; n = 1
    while lo < hi:
        t = lo + (hi - lo + 1) // 2 if step % 2 else lo + 1 + (hi - lo) * (c_lo - K) // (c_lo - c_hi)
        c = int((key >= t).sum()); n += 1
        if c >= K: lo, c_lo = t, c
        else: hi, c_hi = t - 1, c
        step += 1
    return lo, n
torch.manual_seed(0)
for name, gen in [("gaussian*3 bf16", lambda: (torch.randn(4096) * 3).bfloat16().float()),
                  ("gaussian f32", lambda: torch.randn(4096)),
                  ("gaussian/0.7 temp", lambda: (torch.randn(4096) * 3).bfloat16().float() / 0.7),
                  ("row stage 9472 (37x256 best)", None)]:
    tb = ti = 0; R = 20
    for _ in range(R):
        if gen is None:
            x = (torch.randn(151552) * 3).bfloat16().float()
            cand = torch.cat([c.topk(256).values for c in x.split(4096)])
            k = keyof(cand.contiguous())
            k = torch.cat([k, torch.full((16384 - len(k),), -2**31, dtype=torch.int32)])
        else:
            k = keyof(gen().contiguous())
        a, nb = bis(k.long(), 256); b, ni = interp(k.long(), 256)
        assert a == b; tb += nb; ti += ni
    print(f"{name:30} bisection {tb / R:5.1f} passes, interpolating {ti / R:5.1f}")
