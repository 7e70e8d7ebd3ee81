"""The AR engine's paged KV cache: a pool of fixed-size pages shared by every slot, and a block table per slot.

A request reserves the pages for its whole budget (prefix + max_tokens) when it is admitted and gives them back
when it ends, so many requests of different lengths share one pool and no step ever reads another request's keys.
Page 0 is never handed out: idle slots point at it, and writes of idle slots land there (the "trash" page).
Knows nothing about models or sampling.
"""
from __future__ import annotations

import torch

from .config import ModelConfig

PAGE_TOKENS = 64
KV_FORMATS = ("bf16", "fp8")   # "bf16": the model's own dtype; "fp8": e4m3, half the bytes a step reads
FP8_MAX = 448.0


def storage_dtype(kv_format: str, dtype: torch.dtype) -> torch.dtype:
    if kv_format not in KV_FORMATS:
        raise ValueError(f"kv format must be one of {KV_FORMATS}, got {kv_format!r}")
    return torch.float8_e4m3fn if kv_format == "fp8" else dtype


def to_pool(x: torch.Tensor, pool_dtype: torch.dtype) -> torch.Tensor:
    """Keys or values as the pool stores them. FP8 keeps no scale: the keys are RMS-normalised per head and the
    values of a layer are of order one, far inside e4m3's ±448; beyond it they saturate (a plain cast would give
    NaN)."""
    if pool_dtype == torch.float8_e4m3fn:
        return x.float().clamp(-FP8_MAX, FP8_MAX).to(pool_dtype)
    return x.to(pool_dtype)


def token_bytes(cfg: ModelConfig, dtype: torch.dtype) -> int:
    """K and V of one token over every layer (112 KiB for yue2-3b in BF16)."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    return 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * itemsize


def tokens_for_memory(cfg: ModelConfig, dtype: torch.dtype, free_bytes: int, *, keep_free: int = 4 << 30,
                      fraction: float = 0.8) -> int:
    """The capacity rule: the KV tokens that fit in `fraction` of what is free after `keep_free` bytes of headroom
    (activations, the acoustic stage's working set, the allocator's slack)."""
    usable = max(0, int((free_bytes - keep_free) * fraction))
    return usable // token_bytes(cfg, dtype)


class PagedKV:
    """k, v: [layers, pages, kv_heads, PAGE_TOKENS, head_dim]; block_table [slots, pages per slot] int32.
    `dtype` is the model's; `kv_format` "fp8" stores e4m3 instead (`read` gives the model's dtype back)."""

    def __init__(self, cfg: ModelConfig, *, slots: int, tokens: int, device, dtype, page: int = PAGE_TOKENS,
                 kv_format: str = "bf16"):
        self.page, self.dtype, self.kv_format = page, dtype, kv_format
        pool = storage_dtype(kv_format, dtype)
        self.pages = 1 + -(-tokens // page)
        self.per_slot = -(-cfg.context // page)
        shape = (cfg.num_hidden_layers, self.pages, cfg.num_key_value_heads, page, cfg.head_dim)
        self.k = torch.zeros(shape, dtype=pool, device=device)
        self.v = torch.zeros(shape, dtype=pool, device=device)
        self.block_table = torch.zeros(slots, self.per_slot, dtype=torch.int32, device=device)
        self.heads = torch.arange(cfg.num_key_value_heads, device=device)
        self.free = list(range(1, self.pages))
        self.owned: dict[int, list[int]] = {}

    def pages_for(self, tokens: int) -> int:
        return -(-tokens // self.page)

    def reserve(self, slot: int, tokens: int) -> None:
        n = self.pages_for(tokens)
        if n > len(self.free) or n > self.per_slot:
            raise RuntimeError(f"KV cache: {tokens} tokens need {n} pages, {len(self.free)} free")
        pages, self.free = self.free[:n], self.free[n:]
        self.owned[slot] = pages
        row = torch.zeros(self.per_slot, dtype=torch.int32)
        row[:n] = torch.tensor(pages, dtype=torch.int32)
        self.block_table[slot].copy_(row, non_blocking=True)

    def release(self, slot: int) -> None:
        self.free.extend(self.owned.pop(slot, []))
        self.block_table[slot].zero_()

    def where(self, slot: int, start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(page, offset) of positions [start, end) of `slot`, as device tensors."""
        positions = torch.arange(start, end)
        pages = torch.tensor(self.owned[slot], dtype=torch.long)[positions // self.page]
        device = self.k.device
        return pages.to(device), (positions % self.page).to(device)

    def write(self, layer: int, pages: torch.Tensor, offsets: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        """k, v [T, kv_heads, head_dim] into the given (page, offset) places of `layer`."""
        index = (pages[:, None], self.heads[None, :], offsets[:, None])
        self.k[layer].index_put_(index, to_pool(k, self.k.dtype))
        self.v[layer].index_put_(index, to_pool(v, self.v.dtype))

    def stored(self, x: torch.Tensor) -> torch.Tensor:
        """x as a read of the pool would give it back (rounded through the storage dtype)."""
        return to_pool(x, self.k.dtype).to(self.dtype)

    def read(self, layer: int, slot: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The first `end` keys and values of `slot` → [1, kv_heads, end, head_dim] each."""
        pages = torch.tensor(self.owned[slot][:self.pages_for(end)], dtype=torch.long, device=self.k.device)

        def gather(pool):
            x = pool[layer][pages].permute(1, 0, 2, 3).to(self.dtype)
            return x.reshape(x.shape[0], -1, x.shape[-1])[None, :, :end]
        return gather(self.k), gather(self.v)
