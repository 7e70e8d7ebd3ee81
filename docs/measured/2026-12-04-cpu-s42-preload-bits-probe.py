"""The split kernel with its first page read before the wait against the kernel before it (2026-12-04, session s42).
Why: commit-to-commit, the same decode attention must give the same bits (the same sums in the same order), so a
song drawn before the change is drawn again after it. Both kernels through the registered op on yue2-3b head
shapes (BF16 and e4m3 pools), rows of 0 to 7,680 keys: outputs and the stored keys and values compared bitwise.
Run from the repository root on a CUDA machine, with the old kernels' file as the first argument
(`git show 90a51ba:stages/_paged_attention_triton.py > /tmp/old_pat.py`):
python docs/measured/2026-12-04-cpu-s42-preload-bits-probe.py /tmp/old_pat.py"""
import importlib.util
import sys

import torch

sys.path.insert(0, ".")
from stages import _paged_attention_triton as new  # noqa: E402
from stages import paged_attention as pa  # noqa: E402
from stages.kv_cache import storage_dtype, to_pool  # noqa: E402


def main() -> None:
    spec = importlib.util.spec_from_file_location("old_pat", sys.argv[1])
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    g = torch.Generator(device="cuda").manual_seed(3)
    rows, heads, kv, d, page, pages = 8, 16, 8, 128, 64, 1024
    lens = torch.tensor([0, 1, 63, 129, 450, 2720, 5000, 7680], dtype=torch.int32, device="cuda")
    qkv = torch.randn(rows, (heads + 2 * kv) * d, device="cuda", generator=g).bfloat16()
    q_norm, k_norm = ((1 + 0.1 * torch.randn(d, device="cuda", generator=g)).bfloat16() for _ in range(2))
    table = (torch.randperm(pages - 1, device="cuda", generator=g)[:rows * 121] + 1).int().reshape(rows, 121)
    angles = (lens.clamp(min=1) - 1).float()[:, None] * 1e6 ** (-torch.arange(0, d, 2, device="cuda") / d)
    cos, sin = (f(torch.cat([angles, angles], -1)).bfloat16() for f in (torch.cos, torch.sin))
    for pool in ("bf16", "fp8"):
        dtype = storage_dtype(pool, torch.bfloat16)
        k = to_pool(torch.randn(pages, kv, page, d, device="cuda", generator=g), dtype)
        v = to_pool(torch.randn(pages, kv, page, d, device="cuda", generator=g), dtype)
        got = {}
        for name, module in (("old", old), ("new", new)):
            new_split = new.split_kv_attention
            new.split_kv_attention = module.split_kv_attention     # `_launch` imports it at each call
            try:
                k2, v2 = k.clone(), v.clone()
                got[name] = (pa.decode_attention(qkv, q_norm, k_norm, cos, sin, k2, v2, table, lens, 1e-6), k2, v2)
            finally:
                new.split_kv_attention = new_split
        same = all(torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in zip(got["old"], got["new"]))
        print(f"{pool} pool, lengths {lens.tolist()}: first page before the wait gives the old kernel's bits: {same}",
              flush=True)


if __name__ == "__main__":
    main()
