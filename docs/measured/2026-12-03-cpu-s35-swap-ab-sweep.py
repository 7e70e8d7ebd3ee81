"""Swap-AB chain: K splits and ring depths swept (timing + FP32 distance), s35."""
import runpy, sys, torch
sys.argv = ["probe"]
ns = runpy.run_path("docs/measured/2026-12-03-cpu-s34-swap-ab-probe.py", run_name="probe")
from farm.bench.ar import _time_graph
from stages import layer_chain
L, H, I, Q, TM = ns["L"], ns["H"], ns["I"], ns["Q"], ns["TM"]
torch.manual_seed(0)
dev = torch.device("cuda")
def w(n, k):
    return torch.randn(n, k, device=dev, dtype=torch.bfloat16) * k ** -0.5
layers = [dict(o=w(H, H), gu=w(2 * I, H), d=w(H, I), q=w(Q, H)) for _ in range(L + 1)]
for lay in layers:
    lay["pair"], lay["pair8"] = layer_chain.pair_rows(lay["gu"]), ns["pair8"](lay["gu"])
a = torch.randn(32, H, device=dev, dtype=torch.bfloat16)
x0 = torch.randn(32, H, device=dev, dtype=torch.bfloat16)
state, tiles = layer_chain.words(dev), torch.zeros(2 * I // TM, dtype=torch.int32, device=dev)
ref = ns["launch"](a, x0, layers[0]["o"], layers[0]["pair8"], layers[0]["d"], layers[1]["q"], 1e-6, state, tiles)
for splits, stages, xstages in (((4, 2, 4, 2), 9, 6), ((2, 1, 2, 1), 9, 6), ((8, 4, 8, 4), 9, 6), ((4, 1, 4, 1), 9, 6),
                                ((4, 2, 4, 2), 10, 4), ((2, 2, 4, 2), 9, 6), ((4, 2, 8, 2), 9, 6)):
    def fn(x, lay, nxt):
        return ns["launch"](a, x, lay["o"], lay["pair8"], lay["d"], nxt["q"], 1e-6, state, tiles, stages=stages,
                            xstages=xstages, splits=splits)
    try:
        got = fn(x0, layers[0], layers[1])
        torch.cuda.synchronize()
        dist = max((g.float() - r.float()).abs().max().item() for g, r in zip(got, ref))
        def run():
            x = x0
            for layer in range(L):
                x, _ = fn(x, layers[layer], layers[layer + 1])
        us = min(_time_graph(run) for _ in range(2)) / L * 1e6
        print(f"splits {splits} stages {stages}/{xstages}: {us:.2f} µs per layer; max abs vs (4,2,4,2) {dist:.4f}; "
              f"spins gave up {int(state[0])}", flush=True)
    except Exception as e:
        print(f"splits {splits} stages {stages}/{xstages}: failed {type(e).__name__}: {str(e)[:200]}", flush=True)
