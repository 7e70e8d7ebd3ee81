"""What the fixed 32-slot step costs when few rows are live (session s27): engines of 32, 8 and 2 slots, the same
forced-length requests at 1 and 2 live rows, ms per step; and the step's profile by kind at one row for each."""
import pathlib
import sys

import torch

sys.path.insert(0, ".")
from farm.bench.ar import _measure, bench_request, copy_rate, weight_bytes  # noqa
from farm.bench.profile import profile_step  # noqa
from stages.ar import AREngine  # noqa
from stages.kv_cache import token_bytes  # noqa
from stages.requests import open_checkpoint  # noqa
from stages.transformer import AR, HEAD  # noqa
from stages.weights import load_model  # noqa

ckpt = open_checkpoint(pathlib.Path("out/ck/model"), pathlib.Path("out/ck/vae"))
cfg = ckpt.cfg
net = load_model(ckpt.model_dir, cfg, {AR, HEAD}, device="cuda")
rate = copy_rate(torch, "cuda")
kv_token = token_bytes(cfg.model, torch.bfloat16)
for slots in (32, 8, 2, 32):
    engine = AREngine(net, cfg.tokens, slots=slots, kv_tokens=4 * (7680 + 200), cuda_graphs=True, compile=True)
    wbytes = weight_bytes(engine)
    line = [f"slots {slots:2d}"]
    for name, ctx, kind, b in (("prompt-450", 450, "plan", 1), ("prompt-450", 450, "plan", 2),
                               ("semantic-ref", 7680, "semantic", 2)):
        r = _measure(engine, cfg, name, ctx, kind, b, 4, wbytes, kv_token, rate)
        line.append(f"{b}x{ctx} {kind}: {r['step_ms']:.3f} ms ({r['floor_ratio']:.2f})")
    p = profile_step(engine, [bench_request(cfg, "p", 450, "plan", 6 * engine.block, seed=100)])
    kinds = ", ".join(f"{k.split(' (')[0]} {v['us']:.0f}" for k, v in p["kinds"].items())
    print(" | ".join(line), "| profile us/step:", kinds, flush=True)
    del engine
    torch.cuda.empty_cache()
