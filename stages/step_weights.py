"""The AR decode step's weights, per format, and the two halves of a layer that read them.

bf16 (the model's own dtype): the RMSNorm weights before q/k/v and gate/up folded into those matrices, so the
skinny-GEMM op does the norm itself (`folded_head`, `folded_tail`). fp8 and nvfp4: quantised tuples (quant.py),
read by the same op, with the norms run on their own (`plain_head`, `plain_tail`). Either way built once per model and
format and kept on the model; a quantised AR checkpoint hands its own pairs in (`set_step_weights`).
"""
from __future__ import annotations

from dataclasses import replace

from . import quant, skinny_gemm
from .transformer import AR, BranchWeights, YuE2, branch_weights, layer_qkv, layer_tail


def for_format(model: YuE2, weight_format: str = "bf16") -> list[BranchWeights]:
    """The AR layers as the decode step runs them, built once per model and format.

    bf16: each RMSNorm weight folded into the matrix after it (q/k/v, gate/up), so the skinny-GEMM op does the
    norm itself (an extra copy of those two matrices: 1.9 GB for yue2-3b); prefill keeps the plain weights.
    fp8, nvfp4: every linear matrix quantised (quant.py), norms not folded (a quantised checkpoint's matrices
    cannot take the norm's weight without a second rounding); prefill runs these too. q, k and v are quantised
    one by one and gate and up too, as a checkpoint holds them (NVFP4's global scale is per matrix)."""
    cache = model.__dict__.setdefault("_branches", {})
    key = f"ar-step-{weight_format}"
    if key not in cache:
        plain = branch_weights(model, AR)
        if weight_format != "bf16":
            d = model.cfg
            q_rows, kv_rows = d.num_attention_heads * d.head_dim, d.num_key_value_heads * d.head_dim

            def q(w, rows):
                return quant.cat([quant.quantize(part, weight_format) for part in w.split(list(rows))])
            cache[key] = [replace(w, qkv=q(w.qkv, (q_rows, kv_rows, kv_rows)), o=q(w.o, (len(w.o),)),
                                  gate_up=q(w.gate_up, (len(w.gate_up) // 2,) * 2), down=q(w.down, (len(w.down),)))
                          for w in plain]
        else:
            cache[key] = [_folded(w) for w in plain]
    return cache[key]


def _folded(w: BranchWeights) -> BranchWeights:
    """A layer with its RMSNorm weights folded into q/k/v and gate/up (the bf16 step's matrices)."""
    return replace(w, qkv=skinny_gemm.fold_norm(w.qkv, w.in_norm),
                   gate_up=skinny_gemm.fold_norm(w.gate_up, w.post_norm))


def for_chain(model: YuE2) -> list[BranchWeights]:
    """The bf16 step weights as the layer chain reads them (layer_chain.py): `for_format(model, "bf16")`'s, with
    each gate/up matrix's rows paired (`layer_chain.pair_rows`). Built once per model, and not beside the bf16 set:
    an engine uses one or the other."""
    from . import layer_chain

    cache = model.__dict__.setdefault("_branches", {})
    if "ar-step-bf16-chain" not in cache:
        cache["ar-step-bf16-chain"] = [replace(f, gate_up=layer_chain.pair_rows(f.gate_up))
                                       for f in map(_folded, branch_weights(model, AR))]
    return cache["ar-step-bf16-chain"]


def for_chain_fp8(model: YuE2) -> list[BranchWeights]:
    """The fp8 step weights as the W8A8 numerics read them (layer_chain_w8a8.py): `for_format(model, "fp8")`'s
    (or a quantised checkpoint's, `set_step_weights`), each gate/up pair — values and per-row scales — with its rows
    paired. Built once per model; prefill keeps reading the unpaired ones."""
    from . import layer_chain

    cache = model.__dict__.setdefault("_branches", {})
    if "ar-step-fp8-chain" not in cache:
        cache["ar-step-fp8-chain"] = [replace(w, gate_up=tuple(layer_chain.pair_rows(t) for t in w.gate_up))
                                      for w in for_format(model, "fp8")]
    return cache["ar-step-fp8-chain"]


def set_step_weights(model: YuE2, weight_format: str, layers: list[BranchWeights]) -> None:
    """Give a model its decode step's weights in a format directly (a quantised AR checkpoint's own values, rather
    than the model's weights quantised by `for_format`)."""
    model.__dict__.setdefault("_branches", {})[f"ar-step-{weight_format}"] = layers


def folded_head(x, in_norm, qkv, d):
    """layer_qkv over explicit tensors (what torch.compile sees as inputs: one graph serves every layer), its
    matrix product in the skinny-GEMM op with the norm folded in; the attention op does the q/k norm and RoPE."""
    return layer_qkv(x, BranchWeights(in_norm, qkv, None, None, None, None, None, None), d, skinny_gemm.linear,
                     folded=True)


def folded_tail(x, attn, o, post_norm, gate_up, down, d):
    return layer_tail(x, attn, BranchWeights(None, None, None, None, o, post_norm, gate_up, down), d,
                      skinny_gemm.linear, folded=True)


def plain_head(x, in_norm, qkv, d):
    """layer_qkv with its own RMSNorm (quantised weights: no folded norm)."""
    return layer_qkv(x, BranchWeights(in_norm, qkv, None, None, None, None, None, None), d, skinny_gemm.linear)


def plain_tail(x, attn, o, post_norm, gate_up, down, d):
    return layer_tail(x, attn, BranchWeights(None, None, None, None, o, post_norm, gate_up, down), d,
                      skinny_gemm.linear)


def layer_halves(folded: bool):
    """(head, tail) of a decode step's layer for folded (bf16) or plain (quantised) step weights."""
    return (folded_head, folded_tail) if folded else (plain_head, plain_tail)
