"""Probe (written on a CPU box, not yet run; run on the GPU machine from the repository root after
`farm init-checkpoint out/ck --config yue2-3b --device cuda`:
`python docs/measured/2026-12-05-cpu-s47-acoustic-overhead-probe.py [CHECKPOINT]`): where does the acoustic stage's
time beyond its 64 evaluations go?

s44's song spent 4.07 s in the acoustic stage, 64 × 59.15 ms = 3.79 s of it in evaluations (`farm bench acoustic`):
~0.28 s a song is something else — the AR prefill of the 10,372-token chunk, filling the prefix buffers, the first
evaluation (eager) and the graph capture, the noise's and the latents' copies. With the song ~2.5 s from its 18 s
target, a tenth of a second matters. The reference chunk (5,000 prefix tokens, 5,371 frames, random ids) through
`AcousticEngine.synthesize` three times, each piece timed between device synchronisations (which the engine does
not do, so the pieces' sum may exceed the plain call by the host gaps the syncs expose; the plain call is timed too).
"""
from __future__ import annotations

import sys
import time

import numpy as np
import torch

from stages import acoustic
from stages.requests import open_checkpoint
from stages.transformer import AR, NAR
from stages.weights import load_model

PREFIX, FRAMES = 5000, 5371
parts: dict[str, float] = {}


def timed(name: str, fn):
    def run(*args, **kwargs):
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        torch.cuda.synchronize()
        parts[name] = parts.get(name, 0.0) + time.perf_counter() - start
        return out
    return run


class TimedGraph(acoustic._Graphed):
    """`_Graphed` with its first call split into the eager evaluation and the capture, and its replays timed."""

    def __call__(self, x, tau):
        if self.graph is not None:
            return timed("replays (63)", super().__call__)(x, tau)
        out = timed("first evaluation, eager", self.fn)(x, tau)

        def capture():
            self.x, self.tau = x.clone(), tau.clone()
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph, stream=torch.cuda.Stream(), capture_error_mode="thread_local"):
                self.out = self.fn(self.x, self.tau)
        timed("graph capture", capture)()
        return out


def main() -> None:
    root = sys.argv[1] if len(sys.argv) > 1 else "out/ck"
    ckpt = open_checkpoint(f"{root}/model", f"{root}/vae")
    net = load_model(ckpt.model_dir, ckpt.cfg, {AR, NAR}, device="cuda")
    engine = acoustic.AcousticEngine(net, ckpt.cfg.tokens)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, attention {engine.attention.name}", flush=True)
    rng = np.random.default_rng(0)
    request = acoustic.AcousticRequest("probe", tuple(int(t) for t in rng.integers(0, ckpt.cfg.tokens.codec_offset,
                                                                                  PREFIX)),
                                       rng.integers(0, ckpt.cfg.tokens.codebook, FRAMES).astype(np.int32), seed=0)
    for round_ in range(3):
        torch.cuda.synchronize()
        start = time.perf_counter()
        engine.synthesize(request)
        torch.cuda.synchronize()
        print(f"round {round_}: synthesize as the engine runs it {time.perf_counter() - start:.3f} s", flush=True)

    acoustic.ar_prefill = timed("AR prefill", acoustic.ar_prefill)
    acoustic.nar_kv_buffers = timed("prefix buffers", acoustic.nar_kv_buffers)
    acoustic._Graphed = TimedGraph
    acoustic.midpoint_solve = timed("ODE (64 evaluations and the steps' arithmetic)", acoustic.midpoint_solve)
    for round_ in range(3):
        parts.clear()
        total = timed("synthesize, pieces synchronised", engine.synthesize)(request)
        del total
        whole = parts.pop("synthesize, pieces synchronised")
        named = sum(v for k, v in parts.items() if not k.startswith(("first", "graph", "replays")))
        print(f"round {round_}: " + "; ".join(f"{k} {v * 1e3:.1f} ms" for k, v in parts.items())
              + f"; the rest (noise, tokens, latents to the CPU) {1e3 * (whole - named):.1f} ms; whole "
              f"{whole:.3f} s", flush=True)


if __name__ == "__main__":
    main()
