"""Probe (session s54): does an evaluation over several songs' chunks raise the acoustic stage's throughput?

Issue 9 asks for chunks of several songs batched into one evaluation "when that raises throughput"; no session had
measured it. Here the NAR rows of several chunks are concatenated along the sequence for every product and
elementwise kernel (the engine's compiled layer, its length dynamic), while each chunk's attention reads its own
prefix buffers (the engine's kernel, one call per chunk), so chunks of any lengths can share an evaluation. The
whole evaluation replays as one CUDA graph, as the engine's does. Printed per geometry: ms an evaluation for each
chunk alone (the engine) and for the group, ms per song, and how far the group's velocities are from the lone ones
(the products' kernels may change with the row count, and with them the bits).

Run on the device: python3 docs/measured/2026-12-06-cpu-s54-acoustic-batch-probe.py out/ck
"""
from __future__ import annotations

import sys
import time

import numpy as np
import torch

sys.path.insert(0, ".")
from farm.models import resolve_model  # noqa: E402
from stages.acoustic import AcousticEngine, _Graphed, chunk_tokens, song_noise  # noqa: E402
from stages.requests import open_checkpoint  # noqa: E402
from stages.transformer import (AR, NAR, ar_prefill, branch_weights, dims, nar_inputs, nar_kv_buffers,  # noqa: E402
                                rope_tables, timestep_tau)
from stages.weights import load_model  # noqa: E402


def chunk(net, cfg, engine, prefix_tokens: int, frames: int, seed: int):
    rng = np.random.default_rng(seed)
    prefix = [int(t) for t in rng.integers(0, cfg.tokens.codec_offset, prefix_tokens)]
    codes = rng.integers(0, cfg.tokens.codebook, frames).astype(np.int32)
    ids = chunk_tokens(prefix, codes, 0, frames, cfg.tokens)
    _, kv = ar_prefill(net, torch.tensor(ids, device=engine.device))
    buffers = nar_kv_buffers(kv, len(ids), frames + 2, engine.attention.seq_major)
    x = song_noise(frames, cfg.model.latent_dim, seed).to(device=engine.device, dtype=engine.dtype)
    return {"prefix_len": len(ids), "end": len(ids), "buffers": buffers, "x": x}


def grouped(net, engine, chunks):
    """v(x_all, tau) over the chunks' NAR rows side by side: x_all is the chunks' latents concatenated."""
    d, sizes = dims(net.cfg), [c["x"].shape[0] for c in chunks]
    layers = branch_weights(net, NAR)

    def at(x_all, tau):
        xs = x_all.split(sizes)
        h = torch.cat([nar_inputs(net, x, tau) for x in xs])[None]
        positions = torch.cat([c["prefix_len"] + torch.arange(n + 2, device=h.device) for c, n in zip(chunks, sizes)])
        cos, sin = rope_tables(positions, net.cfg, h.dtype)
        for i, w in enumerate(layers):
            q, k, v = engine.head(h, w, cos, sin, d)
            outs, a = [], 0
            for c, n in zip(chunks, sizes):
                kb, vb = c["buffers"][i]
                kb[:, :, c["end"]:], vb[:, :, c["end"]:] = k[:, :, a:a + n + 2], v[:, :, a:a + n + 2]
                outs.append(engine.attention.attend(q[:, :, a:a + n + 2], kb, vb))
                a += n + 2
            h = engine.tail(h, torch.cat(outs, dim=2), w, d)
        out = net.llm2vae(net.model.norm(h[0]))
        pieces, a = [], 0
        for n in sizes:
            pieces.append(out[a + 1:a + 1 + n])
            a += n + 2
        return torch.cat(pieces)

    return _Graphed(at) if engine.graphs else at


def timed(fn, n: int) -> float:
    fn()
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / n


def main(model_dir: str) -> None:
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    paths = resolve_model(model_dir, None)
    cfg = open_checkpoint(paths.model_dir, paths.vae_dir).cfg
    net = load_model(paths.model_dir, cfg, {AR, NAR}, device="cuda")
    engine = AcousticEngine(net, cfg.tokens)
    print(f"attention: {engine.attention.name}")
    geometries = {
        "2 reference chunks (5,000 + 5,371 frames each)": [(5000, 5371)] * 2,
        "reference + a 2.5-minute chunk (3,000 + 3,750)": [(5000, 5371), (3000, 3750)],
        "4 one-minute chunks (2,000 + 1,500)": [(2000, 1500)] * 4,
        "2 one-minute chunks (2,000 + 1,500)": [(2000, 1500)] * 2,
    }
    with torch.inference_mode():
        tau = timestep_tau(0.5, engine.dtype, cfg.model.timestep_shift, "cuda")
        for name, shapes in geometries.items():
            chunks = [chunk(net, cfg, engine, p, f, seed) for seed, (p, f) in enumerate(shapes)]
            alone, lone_v = 0.0, []
            for c in chunks:
                v = engine.evaluator(c["prefix_len"], c["end"], c["buffers"])
                alone += timed(lambda: v(c["x"], 0.5), 20)
                lone_v.append(v(c["x"], 0.5).float())
            group = grouped(net, engine, chunks)
            x_all = torch.cat([c["x"] for c in chunks])
            together = timed(lambda: group(x_all, tau), 20)
            diff = (group(x_all, tau).float() - torch.cat(lone_v)).abs()
            print(f"{name}: alone {alone * 1e3:.2f} ms for the {len(chunks)} ({alone / len(chunks) * 1e3:.2f} a "
                  f"song), together {together * 1e3:.2f} ms ({together / len(chunks) * 1e3:.2f} a song): "
                  f"{alone / together:.3f}x; velocities together vs alone: max abs {diff.max():.3g}, "
                  f"mean abs {diff.mean():.3g}")
            del chunks, group
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1])
