"""What the decode attention costs the engine's step, by leaving it out (2026-12-03, session s34; written on the
CPU box, run on an H200). Timing only: the variant's numbers are wrong. At one row each layer's two attention
kernels sit between two layer chains, and every chain program holds 193 KB of an SM's shared memory, so they
cannot overlap it: each layer pays the chain's drain, the attention kernels' start, their work and the next
chain's start. How much of the one-row step that is says what attention inside the chain (one launch per layer,
the megakernel of docs/ar-engine.md) could win at most. Variants, each an engine with CUDA graphs (the graphs keep
the kernels they captured):
- "as is";
- "attention left out": the op's two kernels replaced by one memset of its output (a stand-in for the cheapest
  attention phase there could be);
- "attention and chain left out": the chain replaced by its output's memset too (what the step costs besides its
  layers: the lm_head, the candidates, the sampler and the embedding).
Cases: one plan row at 450 keys, one semantic row at 7,680, 24 semantic rows at 7,680; ms per step, two rounds.
Run from the repository root after `farm init-checkpoint out/ck --config yue2-3b --device cuda`:
python docs/measured/2026-12-03-cpu-s34-no-attention-probe.py"""
import pathlib
import sys

import torch

sys.path.insert(0, ".")
from farm.bench.ar import _measure, copy_rate, weight_bytes  # noqa: E402
from stages import _paged_attention_triton as attention_kernels, layer_chain  # noqa: E402
from stages.ar import AREngine  # noqa: E402
from stages.kv_cache import token_bytes  # noqa: E402
from stages.requests import open_checkpoint  # noqa: E402
from stages.transformer import AR, HEAD  # noqa: E402
from stages.weights import load_model  # noqa: E402

KERNELS = {"split": attention_kernels.split_kv_attention, "merge": attention_kernels.merge_and_store,
           "chain": layer_chain._launch.__code__}


class _Skip:
    """Stands in for a Triton kernel: `[grid](*args)` launches nothing (or zeroes argument `zero`)."""
    def __init__(self, zero=None):
        self.zero = zero

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            if self.zero is not None:
                args[self.zero].zero_()
        return launch


def _chain_memset(attn, x, o, gate_up, down, qkv, eps, state, t=None):
    out = torch.zeros_like(x)
    return out, torch.zeros(len(x), qkv.shape[0] if qkv is not None else 0, dtype=x.dtype, device=x.device)


def use(name: str) -> None:
    skip_attention = name != "as is"
    attention_kernels.split_kv_attention = _Skip() if skip_attention else KERNELS["split"]
    attention_kernels.merge_and_store = _Skip(zero=11) if skip_attention else KERNELS["merge"]
    # the op calls layer_chain._launch through its registered kernel; swap what that function's body runs
    layer_chain._launch.__code__ = (_chain_memset.__code__ if name == "attention and chain left out"
                                    else KERNELS["chain"])


def main() -> None:
    ckpt = open_checkpoint(pathlib.Path("out/ck/model"), pathlib.Path("out/ck/vae"))
    cfg = ckpt.cfg
    net = load_model(ckpt.model_dir, cfg, {AR, HEAD}, device="cuda")
    rate = copy_rate(torch, "cuda")
    kv_token = token_bytes(cfg.model, torch.bfloat16)
    names = ("as is", "attention left out", "attention and chain left out")
    engines = {}
    for name in names:
        use(name)
        engines[name] = AREngine(net, cfg.tokens, kv_tokens=24 * (7680 + 12 * 16 + 64), cuda_graphs=True,
                                 compile=True)
    wbytes = weight_bytes(engines["as is"])
    cases = (("prompt-450", 450, "plan", 1), ("semantic-ref", 7680, "semantic", 1),
             ("semantic-ref", 7680, "semantic", 24))
    for rnd in range(2):
        for case, ctx, kind, rows in cases:
            ms = {}
            for name, engine in engines.items():
                use(name)
                ms[name] = _measure(engine, cfg, case, ctx, kind, rows, 8, wbytes, kv_token, rate)
            print(f"round {rnd} {case} rows {rows}: " + "; ".join(
                f"{n} {r['step_ms']:.3f} ms (× floor {r['floor_ratio']:.2f})" for n, r in ms.items()), flush=True)
    use("as is")


if __name__ == "__main__":
    main()
