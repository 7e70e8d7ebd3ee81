"""Probe (written on the CPU box in s51; run from the tree's root on the GPU machine with a yue2-3b checkpoint in
out/ck: `python docs/measured/2026-12-05-cpu-s51-ptxas-probe.py OUT_DIR`): do a machine's processes find each
other's Triton kernels in the compile cache?

s50 measured a worker's AR engine build at 41.4 s with empty caches, 31.7 s in the second process and 12.8 s from
the third: the second process compiled again. The suspect (read from torch 2.11's and Triton 3.6's source): Triton
keys its cache by the version of the ptxas it would run, read once per process; Inductor points it at torch's own
ptxas (CUDA 13.0, Triton's is 12.8) only when it compiles in the calling process, which a warm start does and a cold
one (its pool of compile processes) does not. The tree now pins that variable when `stages` is imported.

Part 1, the mechanism (~1 min): two fresh processes on one pair of empty caches. The first launches our skinny
GEMM, then compiles an Inductor function; the second the other way round, with one compile thread (Inductor then
compiles in the process, as a warm start does). With the tree's pin, and with the pin stubbed out: the ptxas each
process keyed its kernels by, and the cache folders holding the GEMM after each.
Part 2 (~2 min): the s49 probe's worker start (weights, AR engine, acoustic engine, decoder) in three fresh
processes on empty caches (cold, then warm twice), with the pin; `--nopin-startup` runs only part 2, without it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).parent
CHILD = """
import json, os, re, sys, torch
if sys.argv[1] == "nopin":                      # the tree without its pin: stages/__init__ imports this stub
    import types
    stub = types.ModuleType("stages.ptxas")
    stub.pin_ptxas = lambda *a: None
    sys.modules["stages.ptxas"] = stub
import stages
from stages import skinny_gemm

def ours():
    x = torch.randn(2, 256, device="cuda", dtype=torch.bfloat16)
    skinny_gemm.linear(x, torch.randn(512, 256, device="cuda", dtype=torch.bfloat16))

def inductor(k):      # a function of its own per k: a compile the cache has not seen
    torch.compile(lambda t: (t * k).sin())(torch.ones(8, device="cuda"))

for step in sys.argv[2:]:
    ours() if step == "ours" else inductor(float(step.split("-")[1]))
torch.cuda.synchronize()
from triton.backends.nvidia.compiler import get_ptxas_version
major, minor = torch.cuda.get_device_capability()
keyed = re.search(r"release ([0-9.]+)", get_ptxas_version(major * 10 + minor)).group(1)
print(json.dumps({"TRITON_PTXAS_PATH": os.environ.get("TRITON_PTXAS_PATH"), "keyed_by_ptxas": keyed}))
"""


def gemm_folders(cache: Path) -> list[str]:
    return sorted({p.parent.name for p in cache.rglob("skinny_gemm*.json")})


def mechanism() -> dict:
    out = {}
    for mode in ("pin", "nopin"):
        caches = Path(tempfile.mkdtemp(prefix=f"s51-{mode}-"))
        env = {k: v for k, v in os.environ.items() if k != "TRITON_PTXAS_PATH"}
        env.update(TRITON_CACHE_DIR=str(caches / "triton"), TORCHINDUCTOR_CACHE_DIR=str(caches / "inductor"),
                   PYTHONPATH=os.getcwd())
        runs = []
        one_thread = {"TORCHINDUCTOR_COMPILE_THREADS": "1"}
        for order, extra in ((["ours", "inductor-2"], {}), (["inductor-3", "ours"], one_thread)):
            start = time.perf_counter()
            run = subprocess.run([sys.executable, "-c", CHILD, mode, *order], env={**env, **extra},
                                 capture_output=True, text=True, timeout=300)
            row = {"order": order, "rc": run.returncode, "seconds": round(time.perf_counter() - start, 2),
                   "gemm_cache_folders": gemm_folders(caches / "triton")}
            if run.returncode == 0:
                row.update(json.loads(run.stdout.strip().splitlines()[-1]))
            else:
                row["stderr"] = run.stderr[-3000:]
            runs.append(row)
            print(mode, json.dumps(row), flush=True)
        again = runs[0]["gemm_cache_folders"] != runs[1]["gemm_cache_folders"]
        out[mode] = {"runs": runs, "second_compiled_again": again}
        print(mode, "second process compiled the GEMM again:", out[mode]["second_compiled_again"], flush=True)
    return out


NOPIN = """
import runpy, sys, types
stub = types.ModuleType("stages.ptxas")
stub.pin_ptxas = lambda *a: None
sys.modules["stages.ptxas"] = stub
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def startup(pin: bool = True, default_dirs: bool = False) -> dict:
    """default_dirs (added at the end of s51, for the next session): TRITON_CACHE_DIR left unset, as a user's
    machine has it, and HOME in the temporary folder, so Triton's own default (~/.triton/cache) starts empty too.
    Inductor sets TRITON_CACHE_DIR to its own folder when it builds a kernel object in the calling process, which a
    cold process whose kernels its compile pool builds may never do: then our kernels would sit in one folder after
    a cold start and be looked for in the other on the next. Each case lists how many kernels each folder holds."""
    caches = Path(tempfile.mkdtemp(prefix="s51-startup-"))
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_PTXAS_PATH", "TRITON_CACHE_DIR", "TRITON_HOME")}
    env.update(TORCHINDUCTOR_CACHE_DIR=str(caches / "inductor"), PYTHONPATH=os.getcwd())
    if default_dirs:
        env.update(HOME=str(caches / "home"))
    else:
        env.update(TRITON_CACHE_DIR=str(caches / "triton"))
    probe = HERE / "2026-12-05-cpu-s49-startup-probe.py"
    out = {}
    for case in ("cold", "warm", "warm2"):
        start = time.perf_counter()
        command = [str(probe), "--child", "worker"] if pin else ["-c", NOPIN, str(probe), "--child", "worker"]
        run = subprocess.run([sys.executable, *command], env=env, capture_output=True, text=True, timeout=400)
        print(f"{case}: rc {run.returncode} in {time.perf_counter() - start:.1f} s", flush=True)
        if run.returncode == 0:
            got = json.loads(run.stdout.strip().splitlines()[-1])
            out[case] = {"parts": got["parts"], "ar_build_seconds": got["ar_build_seconds"], "dynamo": got["dynamo"]}
            print(json.dumps({"parts": got["parts"], "ar": got["ar_build_seconds"]}, indent=1), flush=True)
        else:
            out[case] = {"stderr": run.stderr[-5000:]}
            print(run.stderr[-3000:], flush=True)
        out[case]["kernels by folder"] = {str(d.relative_to(caches)): len(list(d.rglob("*.json")))
                                          for d in (caches / "home/.triton/cache", caches / "inductor/triton",
                                                    caches / "triton") if d.exists()}
        print(case, out[case]["kernels by folder"], flush=True)
    return out


if __name__ == "__main__":
    target = Path(sys.argv[1])
    target.mkdir(parents=True, exist_ok=True)
    if "--test-child" in sys.argv:       # (added after the first calls) the GPU test's two processes, pin and not
        from tests.test_ptxas import _CACHE_CHILD, cache_runs   # in tests/test_gpu.py when it ran
        stub = "import sys, types; sys.modules['stages.ptxas'] = types.ModuleType('stages.ptxas'); "
        stub += "sys.modules['stages.ptxas'].pin_ptxas = lambda *a: None\n"
        for mode, child in (("pin", _CACHE_CHILD), ("nopin", stub + _CACHE_CHILD)):
            first, second = cache_runs(Path(tempfile.mkdtemp(prefix=f"s51-test-{mode}-")), child)
            print(mode, "first", sorted(first), "second", sorted(second), "compiled again:", first != second)
        sys.exit(0)
    if "--default-dirs" in sys.argv:         # (added at the end of s51) see startup()
        (target / "s51-ptxas-default-dirs.json").write_text(json.dumps(startup(default_dirs=True), indent=1))
        sys.exit(0)
    if "--nopin-startup" in sys.argv:        # (added after the first calls) the same machine's control for part 2
        (target / "s51-ptxas-nopin-startup.json").write_text(json.dumps(startup(pin=False), indent=1))
        sys.exit(0)
    result = {"mechanism": mechanism()}
    (target / "s51-ptxas-probe.json").write_text(json.dumps(result, indent=1))
    if "--no-startup" not in sys.argv:
        result["startup"] = startup()
    (target / "s51-ptxas-probe.json").write_text(json.dumps(result, indent=1))
