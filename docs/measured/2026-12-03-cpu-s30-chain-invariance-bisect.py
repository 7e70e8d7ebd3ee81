"""Prepared on a CPU box (2026-12-03, session s30) for the next GPU session: why is the chained engine
(`AREngine(chain=True)`, stages/layer_chain.py) not batch-invariant on an H200 when the kernel alone is?
(docs/ar-engine.md, "The layer chain"; docs/benchmarks.md, 2026-12-03.)

For each variant a fresh chained engine on one loaded model, and the unchained engine as the control:
- batch invariance twice (three requests alone, in other slots, and together), with the first differing token:
  early means a systematic difference, late a rare race;
- determinism: the same three requests together twice, the ids compared;
- ms per step at one row of the 450-token prompt (forced lengths).
Variants (ChainTiling fields): the kernel as landed; the weight warp waiting for the kernel before
(`early_weights=False`); the chain launched without programmatic dependent launch (`pdl=False`); both; and the
landed kernel in an engine without CUDA graphs or torch.compile (eager launches); and (session s31) the o/down
tiles of 32 rows that the chain had before 16 became the default.
`python … [N …]` runs only the variants of those indices (0 = the control).
Run from the repository root on the GPU machine after `farm init-checkpoint out/ck --config yue2-3b --device cuda`:
python docs/measured/2026-12-03-cpu-s30-chain-invariance-bisect.py"""
import pathlib
import sys
from dataclasses import replace

import numpy as np
import torch

sys.path.insert(0, ".")
from farm.bench.ar import _measure, batch_invariance, bench_request, weight_bytes  # noqa: E402
from stages import layer_chain  # noqa: E402
from stages.ar import AREngine  # noqa: E402
from stages.kv_cache import token_bytes  # noqa: E402
from stages.requests import open_checkpoint  # noqa: E402
from stages.transformer import AR, HEAD  # noqa: E402
from stages.weights import load_model  # noqa: E402


def main() -> None:
    ckpt = open_checkpoint(pathlib.Path("out/ck/model"), pathlib.Path("out/ck/vae"))
    cfg = ckpt.cfg
    net = load_model(ckpt.model_dir, cfg, {AR, HEAD}, device="cuda")
    kv_token = token_bytes(cfg.model, torch.bfloat16)
    landed = layer_chain.TILING
    variants = [("separate (control)", None, True), ("chain as landed", landed, True),
                ("chain, weights after the kernel before", replace(landed, early_weights=False), True),
                ("chain without PDL", replace(landed, pdl=False), True),
                ("chain without PDL, weights after", replace(landed, pdl=False, early_weights=False), True),
                ("chain as landed, eager (no graphs, no compile)", landed, False),
                ("chain, o/down tiles of 32 rows (session s30's)", replace(landed, bn_o=32, bn_d=32), True)]
    if len(sys.argv) > 1:
        variants = [variants[int(i)] for i in sys.argv[1:]]
    short = cfg.model.context // 8            # tiny (a CPU smoke run of this script): 64
    requests = [bench_request(cfg, f"det-{i}", min(300 + 200 * i, short), kind, 96, 7 + i)
                for i, kind in enumerate(("plan", "semantic", "semantic"))]
    for name, tiling, graphs in variants:
        if tiling is not None:
            layer_chain.TILING = tiling           # read by each launch, so captured into this engine's graphs
        engine = AREngine(net, cfg.tokens, kv_tokens=8 * cfg.model.context, cuda_graphs=graphs, compile=graphs,
                          chain=tiling is not None)
        checks = [batch_invariance(engine, cfg) for _ in range(2)]
        first, second = ({r.key: r.ids for r in engine.generate(requests)} for _ in range(2))
        repeat = {k: bool(np.array_equal(first[k], second[k])) for k in first}
        step = _measure(engine, cfg, "prompt-450", min(450, short), "plan", 1, 8, weight_bytes(engine), kv_token,
                        None)
        state = "-" if engine.chain_state is None else int(engine.chain_state[0])
        print(f"{name}: invariance {[c['identical'] for c in checks]}, first differing tokens "
              f"{[c['first_difference'] for c in checks]}; together twice identical {repeat}; "
              f"1 × 450 step {step['step_ms']:.3f} ms; barrier errors {state}", flush=True)
        del engine
        torch.cuda.empty_cache()
    layer_chain.TILING = landed


if __name__ == "__main__":
    main()
