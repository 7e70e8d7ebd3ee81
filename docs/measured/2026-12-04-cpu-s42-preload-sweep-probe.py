"""The split kernel with its first page read before the wait against the kernel before it, every row count on one
machine (2026-12-04, session s42; written on the CPU box for the next session's device time).
Why: on two machines an hour apart, `farm bench ar` gave rows 1-8 1-4 % faster and rows 12-32 1-5 % slower after
the change (`…-s42-bench-ar.log` against `…-s42-bench-ar-preload.log`), while the tenth session's probe, both
kernels in one process, found 12 and 24 rows level (`…-s42-fused-attention-kept-chain.log`). The two kernels give
the same bits (`…-s42-preload-bits.log`), so only their time is in question: here both in one process, engines with
CUDA graphs built in turn, the kernel of commit 90a51ba swapped in by module attribute (the op's launch imports it
at each call, and a graph keeps what it captured), ms per step, two rounds.
Run from the repository root after `farm init-checkpoint out/ck --config yue2-3b --device cuda`, with the old
kernels' file as the first argument (`git show 90a51ba:stages/_paged_attention_triton.py > /tmp/old_pat.py`):
python docs/measured/2026-12-04-cpu-s42-preload-sweep-probe.py /tmp/old_pat.py"""
import gc
import importlib.util
import pathlib
import sys
import time

import torch

sys.path.insert(0, ".")
from farm.bench.ar import _measure, copy_rate, weight_bytes  # noqa: E402
from stages import _paged_attention_triton as new  # noqa: E402
from stages.ar import AREngine  # noqa: E402
from stages.kv_cache import token_bytes  # noqa: E402
from stages.requests import open_checkpoint  # noqa: E402
from stages.transformer import AR, HEAD  # noqa: E402
from stages.weights import load_model  # noqa: E402

ROWS = (1, 2, 4, 8, 12, 16, 24, 32)
CONTEXTS = (("prompt-450", 450, "plan"), ("plan-ref", 2720, "plan"), ("semantic-ref", 7680, "semantic"))


def main() -> None:
    spec = importlib.util.spec_from_file_location("old_pat", sys.argv[1])
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    kernels = {"first page before the wait (tree)": new.split_kv_attention,
               "first page in the loop (90a51ba)": old.split_kv_attention}
    ckpt = open_checkpoint(pathlib.Path("out/ck/model"), pathlib.Path("out/ck/vae"))
    cfg = ckpt.cfg
    net = load_model(ckpt.model_dir, cfg, {AR, HEAD}, device="cuda")
    rate = copy_rate(torch, "cuda")
    kv_token = token_bytes(cfg.model, torch.bfloat16)
    results = {}
    tree = new.split_kv_attention
    try:
        for rnd in range(2):
            for name, kernel in kernels.items():
                new.split_kv_attention = kernel
                t = time.perf_counter()
                engine = AREngine(net, cfg.tokens, kv_tokens=32 * (7680 + 12 * 16 + 64), cuda_graphs=True,
                                  compile=True)
                wbytes = weight_bytes(engine)
                for case, ctx, kind in CONTEXTS:
                    for rows in ROWS:
                        ms = _measure(engine, cfg, case, ctx, kind, rows, 4, wbytes, kv_token, rate)["step_ms"]
                        results.setdefault((case, rows), {}).setdefault(name, []).append(ms)
                del engine
                gc.collect()
                torch.cuda.empty_cache()
                print(f"round {rnd} {name}: {time.perf_counter() - t:.1f} s", flush=True)
    finally:
        new.split_kv_attention = tree
    print(f"copy rate {rate / 1e12:.2f} TB/s; ms per step, rounds 0 / 1")
    for (case, rows), by in results.items():
        print(f"{case} rows {rows}: " + "; ".join(f"{n} {a:.3f}/{b:.3f}" for n, (a, b) in by.items()), flush=True)


if __name__ == "__main__":
    main()
