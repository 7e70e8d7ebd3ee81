"""Where a compiled velocity evaluation's time goes (session s27), and what might take some of it back: the reference
chunk (10,372 AR tokens, 5,371 frames) on the engine path, profiled (kernels by name, GPU busy against wall), then
variants timed in the same process: SDPA backends for the NAR attention, and the whole evaluation replayed as one
CUDA graph. Run from the repository root on the GPU machine after `farm init-checkpoint out/ck ...`."""
import pathlib
import sys
import time
from collections import defaultdict

import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, ".")
from stages import transformer  # noqa
from stages.acoustic import AcousticEngine, chunk_tokens, song_noise  # noqa
from stages.requests import open_checkpoint  # noqa
from stages.transformer import AR, NAR, ar_prefill, nar_kv_buffers, velocity  # noqa
from stages.weights import load_model  # noqa

ckpt = open_checkpoint(pathlib.Path("out/ck/model"), pathlib.Path("out/ck/vae"))
cfg = ckpt.cfg
net = load_model(ckpt.model_dir, cfg, {AR, NAR}, device="cuda")
engine = AcousticEngine(net, cfg.tokens)
rng = np.random.default_rng(0)
prefix = [int(t) for t in rng.integers(0, cfg.tokens.codec_offset, 5000)]
codes = rng.integers(0, cfg.tokens.codebook, 5371).astype(np.int32)
ids = chunk_tokens(prefix, codes, 0, 5371, cfg.tokens)
torch.inference_mode().__enter__()
_, kv = ar_prefill(net, torch.tensor(ids, device="cuda"))
buffers = nar_kv_buffers(kv, len(ids), 5371 + 2)
del kv
x = song_noise(5371, cfg.model.latent_dim, 0).to(device="cuda", dtype=torch.bfloat16)


def v():
    return velocity(net, None, len(ids), x, 0.5, 0, buffers, engine.head, engine.tail)


def ms(fn, n=10):
    fn()
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e3


base = v()
print(f"engine path: {ms(v):.2f} ms per evaluation", flush=True)
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for _ in range(3):
        v()
    torch.cuda.synchronize()
per = defaultdict(lambda: [0.0, 0])
for e in prof.events():
    if e.device_type == torch.autograd.DeviceType.CUDA:
        per[e.name][0] += e.device_time / 3
        per[e.name][1] += 1
busy = sum(t for t, _ in per.values())
print(f"GPU busy {busy / 1e3:.2f} ms per evaluation, {sum(c for _, c in per.values()) // 3} kernels")
for name, (us, c) in sorted(per.items(), key=lambda kv: -kv[1][0])[:30]:
    print(f"  {us / 1e3:8.3f} ms {c // 3:5d}x  {name[:150]}")

# SDPA backends for one layer's NAR attention (q 5,373 rows against 15,745 keys, GQA)
q = torch.randn(1, 16, 5373, 128, dtype=torch.bfloat16, device="cuda")
kb, vb = buffers[0]
flop = 4 * 5373 * kb.shape[2] * 16 * 128
for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
                      ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
    try:
        with sdpa_kernel([backend]):
            t = ms(lambda: transformer.attend(q, kb, vb))
        print(f"attention {name}: {t:.3f} ms ({flop / t / 1e9:.0f} TFLOP/s)", flush=True)
    except Exception as e:
        print(f"attention {name}: failed ({str(e)[:120]})")
try:
    from torch.nn.attention.flex_attention import flex_attention
    flex = torch.compile(flex_attention, dynamic=False)
    t = ms(lambda: flex(q, kb, vb, enable_gqa=True))
    print(f"attention flex (compiled): {t:.3f} ms ({flop / t / 1e9:.0f} TFLOP/s)", flush=True)
except Exception as e:
    print(f"attention flex: failed ({str(e)[:200]})")

# the whole evaluation as one CUDA graph
try:
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        v()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = v()
    graph.replay()
    torch.cuda.synchronize()
    print(f"one CUDA graph: {ms(graph.replay):.2f} ms per evaluation; equal to eager: {torch.equal(out, base)}",
          flush=True)
except Exception as e:
    print(f"CUDA graph: failed ({str(e)[:300]})")
