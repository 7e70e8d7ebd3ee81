"""A/B in one process (session s27): the acoustic engine's velocity evaluation on the reference chunk (10,372 AR
tokens, 5,371 frames) — (a) as before this session: compiled layer maths with Inductor's SiLU·up, each evaluation
launched anew; (b) SiLU·up in our kernel (swiglu.py), launched anew; (c) (b) replayed as one CUDA graph (the
engine's path now). ms per evaluation, twice each in turn; (b) and (c) compared bit for bit."""
import pathlib
import sys
import time

import numpy as np
import torch

sys.path.insert(0, ".")
from stages import acoustic  # noqa
from stages.acoustic import AcousticEngine, chunk_tokens, song_noise  # noqa
from stages.compiled import compiled  # noqa
from stages.requests import open_checkpoint  # noqa
from stages.transformer import AR, NAR, BranchWeights, ar_prefill, layer_tail, nar_kv_buffers  # noqa
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


def old_tail_fn(h, attn, o, post_norm, gate_up, down, d):
    return layer_tail(h, attn, BranchWeights(None, None, None, None, o, post_norm, gate_up, down), d)


old_compiled = compiled(old_tail_fn, fullgraph=True, dynamic=True)


def old_tail(h, attn, w, d):
    return old_compiled(h, attn, w.o, w.post_norm, w.gate_up, w.down, d)


def ms(fn, n=10):
    fn()
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e3


new_tail = engine.tail
engine.graphs = False
eager = engine.evaluator(len(ids), len(ids), buffers)
engine.tail = old_tail
before = engine.evaluator(len(ids), len(ids), buffers)
engine.tail, engine.graphs = new_tail, True
graphed = engine.evaluator(len(ids), len(ids), buffers)
outs = {}
for rnd in range(2):
    for name, v in (("(a) before: Inductor SiLU-up, launched anew", before), ("(b) our SiLU-up, launched anew", eager),
                    ("(c) (b) as one CUDA graph (engine)", graphed)):
        t = ms(lambda: v(x, 0.5))
        outs[name] = v(x, 0.5).clone()
        print(f"{name:<46} {t:7.2f} ms per evaluation", flush=True)
keys = list(outs)
print("(b) == (c) bit for bit:", torch.equal(outs[keys[1]], outs[keys[2]]),
      "| (a) vs (b) max abs:", (outs[keys[0]].float() - outs[keys[1]].float()).abs().max().item())
