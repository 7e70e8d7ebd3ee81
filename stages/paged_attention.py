"""Decode attention over a paged KV cache: one query per row, each row reading only its own live keys.

The cache of one layer is a pool of pages `[pages, kv_heads, page, head_dim]`; a row's keys live in the pages its
block-table row names, in order. A step's row r brings its raw q/k/v product (position seq_lens[r] − 1): the op
applies the per-head q/k RMSNorm and RoPE (`transformer.qk_norm_rope`, each op rounded as the eager ops round),
stores the new key and value into the row's page, and attends over all seq_lens[r] keys (0 = an idle row: nothing
is read or stored, and its output is zeros). Doing the norm and RoPE here spares the step two launches per layer:
both kernels load q (and the merge kernel the new key) anyway.

On CUDA this is a split-KV ("flash-decoding") pair of Triton kernels: the cached keys of a row are cut into at
most `PROGRAMS` spans of whole pages (`_span`: a 450-key row gets 8 spans of one page, a 7,680-key row 15 of eight
pages); a program handles one row, one KV head (all the query heads of its GQA group at once) and one span, a page
at a time through a pipelined loop, so the grid does not grow with the cache while idle rows cost one load; a second
kernel merges the new key and the spans in order and stores the new key and value (two launches per layer, the
cache write included). The spans depend only on the row's own length, so a row's numbers never depend on which
other rows share the step (batch invariance). SDPA over a padded cache reads every row up to the longest;
`farm bench ar` measures the two side by side. On the CPU the same maths runs in plain PyTorch (tests, tiny
models). docs/ar-engine.md says more.
"""
from __future__ import annotations

import math

import torch

from .kv_cache import to_pool
from .transformer import Dims, qk_norm_rope, split_heads

PROGRAMS = 16        # programs (spans) per (row, KV head): short rows spread over several, long rows over no more
STAGES = 6           # the span loop's pipeline depth (docs/ar-engine.md: 6 measured best, the same bits as 2)
EARLY_ROWS = 8       # at most this many live rows: a span's first page is read before the kernel waits for the
                     # one before (faster at 1-8 rows, slower at 16-32; the same bits: docs/ar-engine.md)


def reference(qkv, q_norm, k_norm, cos, sin, k_pool, v_pool, block_table, seq_lens, eps: float) -> torch.Tensor:
    """Plain PyTorch, row by row (each row's reductions see only its own keys, so rows never affect each other).
    qkv [R, (H + 2·KV)·D] (the raw q/k/v product); q_norm, k_norm [D]; cos, sin [R, D] (each row's position);
    pools [P, KV, page, D] (written in place); block_table [R, max_pages] int; seq_lens [R] → [R, H, D]."""
    kv, page, d = k_pool.shape[1], k_pool.shape[2], k_pool.shape[3]
    heads = qkv.shape[1] // d - 2 * kv
    q, k_new, v_new = split_heads(qkv[:, None], Dims(heads, kv, d, eps))
    q, k_new = qk_norm_rope(q, k_new, q_norm, k_norm, cos[:, None], sin[:, None], eps)
    q, k_new, v_new = q[:, 0], k_new[:, 0], v_new[:, 0]
    out = torch.zeros_like(q)
    for r, length in enumerate(seq_lens.tolist()):
        if length == 0:
            continue
        place = int(block_table[r, (length - 1) // page]), (length - 1) % page
        k_pool[place[0], :, place[1]] = to_pool(k_new[r], k_pool.dtype)
        v_pool[place[0], :, place[1]] = to_pool(v_new[r], v_pool.dtype)
        table = block_table[r, :-(-length // page)].long()
        k = k_pool[table].permute(1, 0, 2, 3).reshape(kv, -1, d)[:, :length]
        v = v_pool[table].permute(1, 0, 2, 3).reshape(kv, -1, d)[:, :length]
        scores = torch.matmul(q[r].reshape(kv, heads // kv, d).float(), k.float().transpose(-1, -2)) / math.sqrt(d)
        out[r] = torch.matmul(torch.softmax(scores, dim=-1), v.float()).reshape(heads, d).to(q.dtype)
    return out


def decode_attention(qkv, q_norm, k_norm, cos, sin, k_pool, v_pool, block_table, seq_lens, eps: float
                     ) -> torch.Tensor:
    """Normalise and rotate each row's new query and key, store its key and value, then attend. The Triton
    kernels on CUDA, the reference elsewhere: one opaque op either way."""
    return torch.ops.yue2.decode_attention(qkv, q_norm, k_norm, cos, sin, k_pool, v_pool, block_table, seq_lens,
                                           eps)


# ---- the Triton kernels (imported only where CUDA is) -----------------------------------------------------------

def _launch(qkv, q_norm, k_norm, cos, sin, k_pool, v_pool, block_table, seq_lens, eps) -> torch.Tensor:
    import triton

    from ._paged_attention_triton import merge_and_store, split_kv_attention
    from .skinny_gemm import pdl

    kv, page, d = k_pool.shape[1], k_pool.shape[2], k_pool.shape[3]
    rows, heads = qkv.shape[0], qkv.shape[1] // d - 2 * kv
    groups = heads // kv
    early = pdl(qkv.device)
    part = torch.empty(rows, heads, PROGRAMS, d, dtype=torch.float32, device=qkv.device)
    lse = torch.empty(rows, heads, PROGRAMS, dtype=torch.float32, device=qkv.device)
    out = torch.empty(rows, heads, d, dtype=qkv.dtype, device=qkv.device)
    qk_scale = 1.0 / math.sqrt(d) * 1.4426950408889634
    common = dict(HEADS=heads, KV=kv, D=d, PAGE=page, PROGRAMS=PROGRAMS, PDL=early, launch_pdl=early,
                  FP8=k_pool.dtype == torch.float8_e4m3fn)
    split_kv_attention[(rows, kv, PROGRAMS)](
        qkv, q_norm, cos, sin, k_pool, v_pool, block_table, seq_lens, part, lse,
        qkv.stride(0), cos.stride(0), k_pool.stride(0), k_pool.stride(1), k_pool.stride(2),
        block_table.stride(0), part.stride(0), part.stride(1), part.stride(2), lse.stride(0), lse.stride(1),
        qk_scale, eps, GROUP_PAD=max(16, triton.next_power_of_2(groups)), IEEE=qkv.dtype == torch.float32,
        STAGES=STAGES, SLOTS=triton.next_power_of_2(rows), EARLY_ROWS=EARLY_ROWS, **common)
    merge_and_store[(rows, heads)](
        qkv, q_norm, k_norm, cos, sin, k_pool, v_pool, block_table, seq_lens, part, lse, out,
        qkv.stride(0), cos.stride(0), k_pool.stride(0), k_pool.stride(1), k_pool.stride(2), block_table.stride(0),
        part.stride(0), part.stride(1), part.stride(2), lse.stride(0), lse.stride(1), out.stride(0), out.stride(1),
        qk_scale, eps, **common)
    return out


def _register() -> None:
    """`yue2::decode_attention` as an opaque custom op (the reference by default, the kernels on CUDA)."""
    @torch.library.custom_op("yue2::decode_attention", mutates_args=("k_pool", "v_pool"))
    def _op(qkv: torch.Tensor, q_norm: torch.Tensor, k_norm: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
            k_pool: torch.Tensor, v_pool: torch.Tensor, block_table: torch.Tensor, seq_lens: torch.Tensor,
            eps: float) -> torch.Tensor:
        return reference(qkv, q_norm, k_norm, cos, sin, k_pool, v_pool, block_table, seq_lens, eps)

    _op.register_kernel("cuda")(_launch)

    @_op.register_fake
    def _(qkv, q_norm, k_norm, cos, sin, k_pool, v_pool, block_table, seq_lens, eps):
        kv, d = k_pool.shape[1], k_pool.shape[3]
        return qkv.new_empty(qkv.shape[0], qkv.shape[1] // d - 2 * kv, d)


_register()
