"""Probe (written on a CPU box; run on the GPU machine from the tree's root with a yue2-3b checkpoint in out/ck:
`python docs/measured/2026-12-05-cpu-s49-startup-probe.py OUT_DIR`): where a farm worker's start goes, part by part.

On an H100 on 2026-12-05 a worker hosting every stage took 68.7 s to start with empty caches and 43.2 s with warm
ones (weights 9.2 / 8.2, AR engine 40.8 / 27.4, acoustic 9.3 / 2.1, decode 8.5 / 4.8). Nothing in the AR engine's
build looked like 27 s when read. So each case here runs in a fresh process, as a worker does, in its order
(weights, AR engine with graphs and torch.compile, acoustic engine, decoder), and writes:
- the seconds of each part, and the AR engine's own `build_seconds` (each graph's warm-up and capture apart);
- a cProfile of the AR engine's build (by cumulative and by own time) and torch.compile's own counters;
- cases: `cold` (Triton and Inductor caches in fresh empty folders), then `warm` twice on those folders, then
  `warm-1thread`: warm with TORCHINDUCTOR_COMPILE_THREADS=1 (no pool of compile processes).
Then, in one process, how long faulting in every page of the mapped file takes, and the weights through three
loaders, each twice, alternating: today's (safetensors opened on the card: a pageable copy per tensor from the
mapped file), and two staged ones (each tensor's bytes through two pinned buffers, the copy to the card
asynchronous behind the next part's read), one copying from the mapped file, one read() straight into the pinned
buffers; the same bytes, dtypes and shapes are checked.
"""
from __future__ import annotations

import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CK = "out/ck"


def worker_like() -> dict:
    """One worker's start, part by part, in this process."""
    import torch

    from stages.acoustic import AcousticEngine
    from stages.ar import AREngine
    from stages.requests import open_checkpoint
    from stages.transformer import AR, HEAD, NAR
    from stages.vae import load_decoder
    from stages.weights import load_model

    parts, clock = {}, time.perf_counter()

    def lap(name):
        nonlocal clock
        torch.cuda.synchronize()
        now = time.perf_counter()
        parts[name], clock = now - clock, now

    torch.cuda.init()
    torch.zeros(1, device="cuda")
    lap("cuda context")
    ckpt = open_checkpoint(f"{CK}/model", f"{CK}/vae")
    lap("checkpoint")
    model = load_model(ckpt.model_dir, ckpt.cfg, {AR, HEAD, NAR}, device="cuda")
    lap("weights")
    profile = cProfile.Profile()
    profile.enable()
    engine = AREngine(model, ckpt.cfg.tokens, kv_tokens=4 * ckpt.cfg.model.context, cuda_graphs=True,
                      compile=True)
    profile.disable()
    lap("ar")
    AcousticEngine(model, ckpt.cfg.tokens)
    lap("acoustic")
    load_decoder(ckpt.vae_dir, ckpt.cfg.vae, device="cuda")
    lap("decode")
    by = {}
    for key in ("cumulative", "tottime"):
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats(key).print_stats(40)
        by[key] = text.getvalue()
    try:
        from torch._dynamo.utils import compile_times
        dynamo = compile_times(repr="str", aggregate=True)
    except Exception as exc:       # the counters' API moves between releases; the laps above do not need it
        dynamo = f"unavailable: {exc!r}"
    return {"parts": parts, "ar_build_seconds": engine.build_seconds, "profile": by, "dynamo": dynamo}


DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64", "I64": "int64",
          "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool", "F8_E4M3": "float8_e4m3fn"}


def staged_tensors(path: str, names: list[str], device: str, how: str, chunk_bytes: int = 64 << 20) -> dict:
    """Each tensor's bytes through two pinned buffers in turn, the copy to the card behind the next part's read.
    how="mapped": the parts copied from safetensors' view of the mapped file (a page fault per 4 KiB page);
    how="read": read() from the file straight into the pinned buffer (the header parsed here for the offsets)."""
    import torch
    from safetensors import safe_open

    buffers = [torch.empty(chunk_bytes, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
    done = [torch.cuda.Event(), torch.cuda.Event()]
    stream = torch.cuda.Stream()
    out, turn = {}, 0
    with open(path, "rb", buffering=0) as raw:
        size = int.from_bytes(raw.read(8), "little")
        header = json.loads(raw.read(size))
        begin_data = 8 + size
        mapped = safe_open(path, framework="pt", device="cpu") if how == "mapped" else None
        for name in sorted(names, key=lambda n: header[n]["data_offsets"][0]):
            entry = header[name]
            a0, a1 = entry["data_offsets"]
            target = torch.empty(a1 - a0, dtype=torch.uint8, device=device)
            flat = mapped.get_tensor(name).reshape(-1).view(torch.uint8) if mapped else None
            raw.seek(begin_data + a0)
            for a in range(0, a1 - a0, chunk_bytes):
                n = min(chunk_bytes, a1 - a0 - a)
                done[turn].synchronize()               # that buffer's last copy has left it
                if mapped:
                    buffers[turn][:n].copy_(flat[a:a + n])
                else:
                    view, got = memoryview(buffers[turn].numpy())[:n], 0
                    while got < n:
                        got += raw.readinto(view[got:])
                with torch.cuda.stream(stream):
                    target[a:a + n].copy_(buffers[turn][:n], non_blocking=True)
                    done[turn].record(stream)
                turn ^= 1
            out[name] = target.view(getattr(torch, DTYPES[entry["dtype"]])).reshape(entry["shape"])
    stream.synchronize()
    return out


def loaders() -> dict:
    import torch
    from safetensors import safe_open

    from stages.checkpoint import load_tensors
    from stages.requests import open_checkpoint
    from stages.transformer import AR, HEAD, NAR
    from stages.weights import check_model_file

    ckpt = open_checkpoint(f"{CK}/model", f"{CK}/vae")
    path, names = check_model_file(ckpt.model_dir, ckpt.cfg, {AR, HEAD, NAR})
    torch.zeros(1, device="cuda")
    rows, reference = [], None
    start = time.perf_counter()           # page faults alone: one byte of every 4 KiB page of the mapped file
    with safe_open(str(path), framework="pt", device="cpu") as f:
        touched = sum(int(f.get_tensor(n).reshape(-1).view(torch.uint8)[::4096].sum()) for n in names)
    rows.append({"loader": "touch every mapped page", "seconds": time.perf_counter() - start, "sum": touched})
    print(rows[-1], flush=True)
    for rnd in range(2):
        for kind in ("today", "mapped", "read"):
            torch.cuda.synchronize()
            start = time.perf_counter()
            got = (load_tensors(path, names, dtype=None, device="cuda") if kind == "today"
                   else staged_tensors(str(path), names, "cuda", kind))
            torch.cuda.synchronize()
            seconds = time.perf_counter() - start
            size = sum(t.numel() * t.element_size() for t in got.values())
            if reference is None:
                reference, same = got, True
            else:
                same = all(got[n].dtype == reference[n].dtype and got[n].shape == reference[n].shape
                           and torch.equal(got[n].view(torch.uint8), reference[n].view(torch.uint8)) for n in names)
            rows.append({"round": rnd, "loader": kind, "seconds": seconds, "gb": size / 1e9,
                         "gb_per_s": size / 1e9 / seconds, "same_bytes": same})
            print(rows[-1], flush=True)
            if got is not reference:
                del got
            torch.cuda.empty_cache()
    return {"loaders": rows}


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    # the caches the cold case starts from: the caller's (empty) folders when it names them, so that what runs after
    # the probe finds them warm, else new ones
    caches = Path(tempfile.mkdtemp(prefix="startup-caches-"))
    env = {"TRITON_CACHE_DIR": str(caches / "triton"), "TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"),
           **os.environ}
    for name in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):
        if Path(env[name]).exists() and any(Path(env[name]).iterdir()):
            print(f"{name}={env[name]} is not empty: the cold case will not be cold", flush=True)
    results = {}
    # warm-1thread: Inductor without its pool of compile processes, which it starts on a first compile even when
    # every kernel is in its cache (a warm start compiles nothing)
    for case, extra in (("cold", {}), ("warm", {}), ("warm2", {}),
                        ("warm-1thread", {"TORCHINDUCTOR_COMPILE_THREADS": "1"})):
        start = time.perf_counter()
        run = subprocess.run([sys.executable, __file__, "--child", "worker"], env={**env, **extra},
                             capture_output=True, text=True, timeout=400)
        print(f"{case}: rc {run.returncode} in {time.perf_counter() - start:.1f} s", flush=True)
        with open(out / "startup.stderr", "a") as log:           # one file: a call brings back eight at most
            log.write(f"==== {case}\n{run.stderr[-20000:]}\n")
        if run.returncode == 0:
            results[case] = json.loads(run.stdout.strip().splitlines()[-1])
            print(json.dumps({"parts": results[case]["parts"], "ar": results[case]["ar_build_seconds"]}, indent=1))
    run = subprocess.run([sys.executable, __file__, "--child", "loaders"], env=env, capture_output=True, text=True,
                         timeout=400)
    print(run.stdout[-4000:], run.stderr[-2000:], flush=True)
    if run.returncode == 0:
        results["loaders"] = json.loads(run.stdout.strip().splitlines()[-1])["loaders"]
    (out / "startup.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        result = worker_like() if sys.argv[2] == "worker" else loaders()
        print(json.dumps(result), flush=True)
    else:
        main(Path(sys.argv[1]))
