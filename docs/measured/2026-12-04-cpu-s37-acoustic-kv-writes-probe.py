"""The acoustic layer writing its keys and values into the prefix buffers itself (2026-12-04, session s37; written on
the CPU box, not yet run). Why: after the length-only compile (s37) an evaluation's kernels are GEMMs 19.9 ms,
attention 30.3 (FA4), Inductor's 3.9 and copies ~0.5–0.9 ms: `velocity_at` copies each layer's new keys and
values into the [1, KV, prefix + T, D] buffers after the compiled head returns them (two copy kernels a layer,
56 an evaluation). Here the compiled head takes the two buffer views and writes them itself (`copy_` inside the
graph: Inductor can store straight into the mutated inputs from the norm/RoPE kernel), so those launches go.
The same values are written; the velocity's bits should be the same as the engine's (printed).
Times one velocity evaluation of the reference chunk (5,000 prefix tokens + 5,371 frames; CUDA graph replays)
with the engine's layer and with the head that writes its keys, three rounds.
Run on an H200 from the repository root after `farm init-checkpoint out/ck --config yue2-3b --device cuda`
(with the FA4 wheels on PYTHONPATH, the engine's attention as in production)."""
import pathlib
import sys
import time

import numpy as np
import torch

sys.path.insert(0, ".")
from stages.acoustic import AcousticEngine, _Graphed, _length_dynamic, chunk_tokens, song_noise  # noqa: E402
from stages.compiled import compiled  # noqa: E402
from stages.requests import open_checkpoint  # noqa: E402
from stages.transformer import (AR, NAR, BranchWeights, ar_prefill, branch_weights, dims, layer_head,  # noqa: E402
                                nar_inputs, nar_kv_buffers, rope_tables, timestep_tau)
from stages.weights import load_model  # noqa: E402


def _head_into(x, in_norm, qkv, q_norm, k_norm, cos, sin, d, k_dst, v_dst):
    q, k, v = layer_head(x, BranchWeights(in_norm, qkv, q_norm, k_norm, None, None, None, None), cos, sin, d)
    k_dst.copy_(k)
    v_dst.copy_(v)
    return q


def writing_evaluator(engine, prefix_len, end, buffers):
    head = compiled(_head_into, fullgraph=True, dynamic=False)
    model = engine.model

    def at(x, tau):
        h = nar_inputs(model, x, tau)[None]
        positions = prefix_len + torch.arange(h.shape[1], device=x.device)
        cos, sin = rope_tables(positions, model.cfg, h.dtype)
        d = dims(model.cfg)
        for w, (kb, vb) in zip(branch_weights(model, NAR), buffers):
            kd, vd = kb[:, :, end:], vb[:, :, end:]
            _length_dynamic((h, 1), (cos, 0), (sin, 0), (kd, 2), (vd, 2))
            q = head(h, w.in_norm, w.qkv, w.q_norm, w.k_norm, cos, sin, d, kd, vd)
            h = engine.tail(h, engine.attention.attend(q, kb, vb), w, d)
        return model.llm2vae(model.model.norm(h[0]))[1:-1]
    f = _Graphed(at)
    return lambda x, raw: f(x, timestep_tau(raw, x.dtype, model.cfg.timestep_shift, x.device))


def main() -> None:
    ckpt = open_checkpoint(pathlib.Path("out/ck/model"), pathlib.Path("out/ck/vae"))
    cfg = ckpt.cfg
    net = load_model(ckpt.model_dir, cfg, {AR, NAR}, device="cuda")
    engine = AcousticEngine(net, cfg.tokens)
    print(f"attention: {engine.attention.name}", flush=True)
    rng = np.random.default_rng(0)
    prefix = [int(t) for t in rng.integers(0, cfg.tokens.codec_offset, 5000)]
    codes = rng.integers(0, cfg.tokens.codebook, 5371).astype(np.int32)
    ids = chunk_tokens(prefix, codes, 0, 5371, cfg.tokens)
    with torch.inference_mode():
        _, kv = ar_prefill(net, torch.tensor(ids, device="cuda"))
        bufs = [nar_kv_buffers(kv, len(ids), 5373, engine.attention.seq_major) for _ in range(2)]
        del kv
        x = song_noise(5371, cfg.model.latent_dim, 0).to(device="cuda", dtype=torch.bfloat16)
        runs = {"engine": engine.evaluator(len(ids), len(ids), bufs[0]),
                "head writes K/V": writing_evaluator(engine, len(ids), len(ids), bufs[1])}
        outs = {name: v(x, 0.5).clone() for name, v in runs.items()}
        for v in runs.values():
            v(x, 0.5)
        print(f"same velocity bits {torch.equal(*outs.values())}; max abs "
              f"{(outs['engine'].float() - outs['head writes K/V'].float()).abs().max().item():.3e}; same buffers "
              f"{all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(*bufs))}", flush=True)
        for rnd in range(3):
            for name, v in runs.items():
                torch.cuda.synchronize()
                t = time.perf_counter()
                for _ in range(10):
                    v(x, 0.5)
                torch.cuda.synchronize()
                print(f"round {rnd} {name:<16} {(time.perf_counter() - t) / 10 * 1e3:7.2f} ms per evaluation",
                      flush=True)


if __name__ == "__main__":
    main()
