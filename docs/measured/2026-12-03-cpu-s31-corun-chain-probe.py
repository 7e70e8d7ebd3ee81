"""Prepared on a CPU box (2026-12-03, session s31) for the next GPU session: how the AR step with the layer chain
fares beside the acoustic stage on one card, against the separate products (docs/ar-engine.md, "The layer chain").

Why: the chain is one persistent launch whose programs wait for each other at every product. Beside the acoustic
stage's long-running blocks (cuDNN flash attention over a 10k-key prefix, large GEMMs) some of its programs may
find no SM free for a while, and the resident ones then spin. The 2026-11-30 co-run (separate launches, AR at 6
rows beside the acoustic layer) measured AR 5.0× slower and acoustic 1.08× slower; the farm's planner and simulator
use those factors (`configs/calibration/h200.toml` [overlap]). This probe measures them again for both AR paths, as
a farm worker runs the stages (farm/workers.py): the AR engine on the main thread on a highest-priority stream, the
acoustic evaluator looping on a thread of its own on a normal-priority stream.

AR paths: the chain as the engine runs it, the chain on 64 programs (`ChainTiling.programs`: the same ids, and
only 64 SMs need to be free at once), the separate products. Printed for each: ms per AR step at `ROWS` plan rows of a 450-token context alone and beside the acoustic
stage, ms per acoustic velocity evaluation alone and beside AR, and each side's share of its rate alone.
Run from the repository root on the GPU machine after `farm init-checkpoint out/ck --config yue2-3b --device cuda`:
python docs/measured/2026-12-03-cpu-s31-corun-chain-probe.py   (on a CPU box: `... --cpu out/tiny`, a smoke run)"""
import contextlib
import pathlib
import sys
import threading
import time
from dataclasses import replace

import numpy as np
import torch

sys.path.insert(0, ".")
from farm.bench.ar import bench_request  # noqa: E402
from stages import layer_chain  # noqa: E402
from stages.acoustic import AcousticEngine, chunk_tokens, song_noise  # noqa: E402
from stages.ar import AREngine  # noqa: E402
from stages.requests import open_checkpoint  # noqa: E402
from stages.transformer import AR, HEAD, NAR, ar_prefill, nar_kv_buffers  # noqa: E402
from stages.weights import load_model  # noqa: E402

ROWS, BLOCKS = 6, 12


def streams(cuda: bool):
    if not cuda:
        return contextlib.nullcontext, contextlib.nullcontext
    ar, ac = torch.cuda.Stream(priority=-100), torch.cuda.Stream(priority=0)     # as farm/workers.stage_streams
    return (lambda: torch.cuda.stream(ar)), (lambda: torch.cuda.stream(ac))


def sync(cuda: bool) -> None:
    if cuda:
        torch.cuda.current_stream().synchronize()


def ar_step_ms(engine: AREngine, cfg, cuda: bool, tag: str) -> float:
    for i in range(ROWS):
        engine.admit(bench_request(cfg, f"{tag}-{i}", min(450, cfg.model.context // 8), "plan",
                                   (BLOCKS + 1) * engine.block, seed=i))
    engine.step()                               # a warm block
    sync(cuda)
    start = time.perf_counter()
    for _ in range(BLOCKS):
        engine.step()
    assert not engine.live
    return (time.perf_counter() - start) / (BLOCKS * engine.block) * 1e3


def main() -> None:
    cuda = "--cpu" not in sys.argv
    root = pathlib.Path(sys.argv[sys.argv.index("--cpu") + 1] if not cuda else "out/ck")
    device = "cuda" if cuda else "cpu"
    ckpt = open_checkpoint(root / "model", root / "vae")
    cfg = ckpt.cfg
    net = load_model(ckpt.model_dir, cfg, {AR, HEAD, NAR}, device=device)
    acoustic = AcousticEngine(net, cfg.tokens)
    prefix_tokens = min(5000, cfg.model.context // 4)          # the reference chunk, as `farm bench acoustic`
    frames = min(5371, (cfg.model.context - prefix_tokens - 3) // 2)
    rng = np.random.default_rng(0)
    prefix = [int(t) for t in rng.integers(0, cfg.tokens.codec_offset, prefix_tokens)]
    ids = chunk_tokens(prefix, rng.integers(0, cfg.tokens.codebook, frames).astype(np.int32), 0, frames, cfg.tokens)
    ar_stream, ac_stream = streams(cuda)
    with torch.inference_mode():
        _, kv = ar_prefill(net, torch.tensor(ids, device=device))
        buffers = nar_kv_buffers(kv, len(ids), frames + 2)
        del kv
        x = song_noise(frames, cfg.model.latent_dim, 0).to(device=device, dtype=acoustic.dtype)
        with ac_stream():
            v = acoustic.evaluator(len(ids), len(ids), buffers)
            v(x, 0.5)
            v(x, 0.5)                           # the graph is captured on the second call
            sync(cuda)

    def acoustic_ms(stop: threading.Event | None, times: list) -> None:
        with ac_stream(), torch.inference_mode():
            while True:
                start = time.perf_counter()
                v(x, 0.5)
                sync(cuda)
                times.append(time.perf_counter() - start)
                if stop is None and len(times) >= 8 or stop is not None and stop.is_set():
                    return

    alone_ac: list = []
    acoustic_ms(None, alone_ac)
    ac_alone = float(np.median(alone_ac)) * 1e3
    print(f"acoustic alone: {ac_alone:.2f} ms per velocity evaluation ({len(ids)} AR tokens, {frames} frames)",
          flush=True)
    landed = layer_chain.TILING
    for path, chain, tiling in (("chain", True, landed), ("chain on 64 programs", True, replace(landed, programs=64)),
                                ("separate", False, landed)):
        layer_chain.TILING = tiling             # read at each launch, so captured into this engine's graphs
        with ar_stream():
            engine = AREngine(net, cfg.tokens, kv_tokens=4 * cfg.model.context, cuda_graphs=cuda, compile=cuda,
                              chain=chain)
            alone = ar_step_ms(engine, cfg, cuda, f"alone-{path}")
            stop, beside_ac = threading.Event(), []
            worker = threading.Thread(target=acoustic_ms, args=(stop, beside_ac))
            worker.start()
            time.sleep(0.5)                     # the acoustic loop is running
            beside = ar_step_ms(engine, cfg, cuda, f"beside-{path}")
            stop.set()
            worker.join()
        ac_beside = float(np.median(beside_ac)) * 1e3
        print(f"{path}: AR at {ROWS} rows {alone:.3f} ms per step alone, {beside:.3f} beside the acoustic stage "
              f"({alone / beside:.2f} of its rate); acoustic {ac_beside:.2f} ms per evaluation beside AR "
              f"({ac_alone / ac_beside:.2f} of its rate); together {alone / beside + ac_alone / ac_beside:.2f} "
              f"cards' worth; barrier errors {int(engine.chain_state[0]) if engine.chain else '-'}", flush=True)
        del engine
        if cuda:
            torch.cuda.empty_cache()
    layer_chain.TILING = landed


if __name__ == "__main__":
    main()
