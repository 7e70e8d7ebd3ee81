"""The AR step's matrix products on the GPU (run with `pytest -m gpu`; skipped elsewhere): our skinny GEMMs and the
BF16 layer chain against cuBLAS, the dequantised products and their torch references, bitwise repeatable and
row-invariant, on the yue2-3b shapes."""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("n,k,epilogue,eps", [(4096, 2048, "none", None), (2048, 2048, "add", None),
                                              (6144, 2048, "silu_mul", None), (2048, 6144, "add", None),
                                              (256, 128, "silu_mul", None), (4096, 2048, "none", 1e-6),
                                              (6144, 2048, "silu_mul", 1e-6)])
def test_skinny_gemm_matches_cublas_and_is_row_invariant(n, k, epilogue, eps):
    """Our skinny GEMM on the yue2-3b shapes (and a tiny one), with and without the folded RMSNorm: close to the
    cuBLAS result, bitwise repeatable, and a row's result does not change when the other rows do."""
    from stages import skinny_gemm as sg

    g = torch.Generator(device="cuda").manual_seed(n + k)
    rows = 2 * n if epilogue == "silu_mul" else n
    w = (torch.randn(rows, k, device="cuda", generator=g) * 0.02).bfloat16()
    x = torch.randn(32, k, device="cuda", generator=g).bfloat16()
    res = torch.randn(32, n, device="cuda", generator=g).bfloat16() if epilogue == "add" else None
    assert sg.tiling(n, k, epilogue, eps is not None) is not None

    def run(a, r):
        return sg.linear(a, w, epilogue, r, eps)
    got = run(x, res)
    want = sg.reference(x, w, epilogue, res, eps)
    scale = want.float().abs().mean().item()
    assert (got.float() - want.float()).abs().max().item() <= 0.05 * max(scale, 1e-3) + 0.02
    assert torch.equal(got, run(x, res))
    other = x.clone()
    other[1:] = torch.randn(31, k, device="cuda", generator=g).bfloat16()
    other_res = None
    if res is not None:
        other_res = res.clone()
        other_res[1:] = 0
    assert torch.equal(run(other, other_res)[0], got[0])
    assert torch.equal(run(x[:1], None if res is None else res[:1])[0], got[0])


def test_layer_chain_matches_the_separate_products_and_is_row_invariant():
    """The chained o → gate/up → down → next q/k/v kernel (layer_chain.py) on the yue2-3b shapes: as close to an
    FP32 chain as the separate skinny GEMMs are, bitwise repeatable, a row's result independent of the other rows
    (and of how many there are), the same bits on a grid of 64 programs, and no grid barrier timed out."""
    from dataclasses import replace

    from stages import layer_chain, skinny_gemm as sg

    if not layer_chain.supported(torch.device("cuda"), 2048, 6144, 4096):
        pytest.skip("the chain kernel needs Hopper (sm_90)")
    g = torch.Generator(device="cuda").manual_seed(5)
    h, i, q, eps = 2048, 6144, 4096, 1e-6

    def w(rows, k):
        return (torch.randn(rows, k, device="cuda", generator=g) * k ** -0.5).bfloat16()
    o, gate_up, down, qkv = w(h, h), w(2 * i, h), w(h, i), w(q, h)
    a, x = (torch.randn(32, h, device="cuda", generator=g).bfloat16() for _ in range(2))
    state = layer_chain.words(torch.device("cuda"))
    paired = layer_chain.pair_rows(gate_up)
    got = layer_chain.chain(a, x, o, paired, down, qkv, eps, state)
    mid = sg.linear(a, o, "add", x)
    out = sg.linear(sg.linear(mid, gate_up, "silu_mul", None, eps), down, "add", mid)
    separate = (out, sg.linear(out, qkv, "none", None, eps))
    f = [t.float() for t in (a, x, o, gate_up, down, qkv)]
    mid32 = f[1] + f[0] @ f[2].T
    gu = (mid32 * torch.rsqrt(mid32.pow(2).mean(-1, keepdim=True) + eps)) @ f[3].T
    out32 = mid32 + (torch.nn.functional.silu(gu[:, :i]) * gu[:, i:]) @ f[4].T
    fp32 = (out32, (out32 * torch.rsqrt(out32.pow(2).mean(-1, keepdim=True) + eps)) @ f[5].T)
    for c, s, r in zip(got, separate, fp32):
        assert (c.float() - r).abs().max() <= 1.25 * (s.float() - r).abs().max() + 1e-3
    assert all(torch.equal(c, d) for c, d in zip(got, layer_chain.chain(a, x, o, paired, down, qkv, eps, state)))
    a2, x2 = torch.randn_like(a), torch.randn_like(x)
    a2[3], x2[3] = a[3], x[3]
    mixed = layer_chain.chain(a2, x2, o, paired, down, qkv, eps, state)
    alone = layer_chain.chain(a[3:4].clone(), x[3:4].clone(), o, paired, down, qkv, eps, state)
    last, empty = layer_chain.chain(a, x, o, paired, down, None, eps, state)
    fewer = layer_chain._launch(a, x, o, paired, down, qkv, eps, state, replace(layer_chain.TILING, programs=64))
    assert all(torch.equal(c, f) for c, f in zip(got, fewer))      # a tile's result is its own: any grid size
    wide = layer_chain._launch(a, x, o, paired, down, qkv, eps, state, replace(layer_chain.TILING, bk=256, stages=6,
                                                                               xstages=3))
    for c, s, r in zip(wide, separate, fp32):       # k-tiles of 256: as close to FP32 as the separate products
        assert (c.float() - r).abs().max() <= 1.25 * (s.float() - r).abs().max() + 1e-3
    assert all(torch.equal(c[3], m[3]) and torch.equal(c[3], s[0]) for c, m, s in zip(got, mixed, alone))
    assert torch.equal(last, got[0]) and empty.shape == (32, 0)
    assert not state.any()      # no barrier gave up, and every counter is back at zero


def test_a_split_attention_program_fits_beside_a_layer_chain_program():
    """The chain's default tiling leaves room on its SM for one program of the decode attention's split kernel, as
    both compile for this GPU: shared memory (1 KB reserved per program), registers (allocated per warp, in units of
    256) — so the split kernel's programs are resident and waiting when the chain ends (layer_chain.ChainTiling)."""
    from stages import _layer_chain_gluon as chain_kernels, _paged_attention_triton as attention_kernels
    from stages import layer_chain, paged_attention as pa

    if not layer_chain.supported(torch.device("cuda"), 2048, 6144, 4096):
        pytest.skip("the chain kernel needs Hopper (sm_90)")
    for f in (chain_kernels.layer_chain, attention_kernels.split_kv_attention):
        f.device_caches.clear()         # so that only the kernels compiled below are in them
    g = torch.Generator(device="cuda").manual_seed(7)
    h, i, q, heads, kv, d, page = 2048, 6144, 4096, 16, 8, 128, 64
    o, gate_up, down, qkv_w = ((torch.randn(n, k, device="cuda", generator=g) * k ** -0.5).bfloat16()
                               for n, k in ((h, h), (2 * i, h), (h, i), (q, h)))
    a, x = (torch.randn(32, h, device="cuda", generator=g).bfloat16() for _ in range(2))
    layer_chain.chain(a, x, o, layer_chain.pair_rows(gate_up), down, qkv_w, 1e-6, layer_chain.words(a.device))
    qkv = torch.randn(32, (heads + 2 * kv) * d, device="cuda", generator=g).bfloat16()
    pool = torch.zeros(64, kv, page, d, device="cuda", dtype=torch.bfloat16)
    table = torch.arange(1, 33, device="cuda", dtype=torch.int32).reshape(32, 1).repeat(1, 2)
    lens = torch.full((32,), 100, dtype=torch.int32, device="cuda")
    cos, sin = torch.ones(32, d, device="cuda").bfloat16(), torch.zeros(32, d, device="cuda").bfloat16()
    norm = torch.ones(d, device="cuda").bfloat16()
    pa.decode_attention(qkv, norm, norm, cos, sin, pool, pool.clone(), table, lens, 1e-6)
    torch.cuda.synchronize()

    def compiled(f):
        return [k for cache, *_ in f.device_caches.values() for k in cache.values()]
    (chain,), (split,) = compiled(chain_kernels.layer_chain), compiled(attention_kernels.split_kv_attention)

    def registers(k):
        return k.metadata.num_warps * -(-k.n_regs * 32 // 256) * 256
    props = torch.cuda.get_device_properties(0)
    assert chain.metadata.shared + split.metadata.shared + 2 * 1024 <= props.shared_memory_per_multiprocessor
    assert registers(chain) + registers(split) <= props.regs_per_multiprocessor


@pytest.mark.parametrize("fmt", ["fp8", "nvfp4"])
@pytest.mark.parametrize("n,k,epilogue", [(4096, 2048, "none"), (2048, 2048, "add"), (6144, 2048, "silu_mul"),
                                          (2048, 6144, "add")])
def test_quantised_skinny_gemm_matches_the_dequantised_product(n, k, epilogue, fmt):
    """FP8 and NVFP4 weights (quant.py) on the yue2-3b shapes: the kernel equals the FP32 product with the
    quantised values and their scales to BF16 rounding, repeats bit for bit, and a row's result does not depend on
    the others."""
    from stages import quant, skinny_gemm as sg

    g = torch.Generator(device="cuda").manual_seed(n + k + 1)
    rows = 2 * n if epilogue == "silu_mul" else n
    pair = quant.quantize(torch.randn(rows, k, device="cuda", generator=g) * 0.02, fmt)
    assert sg.tiling(n, k, epilogue, fmt=fmt) is not None
    x = torch.randn(32, k, device="cuda", generator=g).bfloat16()
    res = torch.randn(32, n, device="cuda", generator=g).bfloat16() if epilogue == "add" else None
    got = sg.linear(x, pair, epilogue, res)
    group = pair[1] if fmt == "nvfp4" else None
    want = sg.reference(x, pair[0], epilogue, res, scale=pair[-1], group=group)   # FP32 maths, one rounding
    scale = want.float().abs().mean().item()
    assert (got.float() - want.float()).abs().max().item() <= 0.02 * max(scale, 1e-3) + 0.02
    assert torch.equal(got, sg.linear(x, pair, epilogue, res))
    other = x.clone()
    other[1:] = 0
    assert torch.equal(sg.linear(other, pair, epilogue, res)[0], got[0])
