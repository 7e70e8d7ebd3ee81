"""Checks that need CUDA (run on the GPU machine with `pytest -m gpu`; skipped elsewhere).

They use the checkpoint named by FARM_GPU_CKPT (a `farm init-checkpoint --config yue2-3b` directory, for the real
shapes) when it is set, else the tiny checkpoint cast to BF16.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpu_model(tiny_ckpt_dir, tiny_cfg):
    from stages.config_json import from_checkpoint
    from stages.transformer import AR, HEAD
    from stages.weights import load_model

    root = Path(os.environ.get("FARM_GPU_CKPT", tiny_ckpt_dir))
    cfg = from_checkpoint(root / "model", root / "vae")
    return load_model(root / "model", cfg, {AR, HEAD}, device="cuda", dtype=torch.bfloat16), cfg


@pytest.mark.parametrize("pool", ["bf16", "fp8"])
def test_paged_kernel_equals_the_reference(pool):
    """The kernels (q/k norm and RoPE, the cache write, split and merge) against the row-by-row reference, over a
    BF16 cache and an e4m3 one (kv_cache.py; the values the kernel stores equal the reference's exactly)."""
    from stages import paged_attention as pa
    from stages.kv_cache import storage_dtype, to_pool

    g = torch.Generator(device="cuda").manual_seed(0)
    rows, heads, kv, d, page, pages = 6, 16, 8, 128, 64, 256
    qkv = torch.randn(rows, (heads + 2 * kv) * d, device="cuda", generator=g).bfloat16()
    q_norm, k_norm = ((1 + 0.1 * torch.randn(d, device="cuda", generator=g)).bfloat16() for _ in range(2))
    dtype = storage_dtype(pool, torch.bfloat16)
    k = to_pool(torch.randn(pages, kv, page, d, device="cuda", generator=g), dtype)
    v = to_pool(torch.randn(pages, kv, page, d, device="cuda", generator=g), dtype)
    table = (torch.randperm(pages - 1, device="cuda", generator=g)[:rows * 40] + 1).int().reshape(rows, 40)
    lens = torch.tensor([0, 1, 63, 129, 960, 2500], dtype=torch.int32, device="cuda")   # 2,500: spans of 3 pages
    angles = (lens.clamp(min=1) - 1).float()[:, None] * 1e6 ** (-torch.arange(0, d, 2, device="cuda") / d)
    cos, sin = (f(torch.cat([angles, angles], -1)).bfloat16() for f in (torch.cos, torch.sin))
    k2, v2 = k.clone(), v.clone()
    got = pa.decode_attention(qkv, q_norm, k_norm, cos, sin, k, v, table, lens, 1e-6)
    want = pa.reference(qkv, q_norm, k_norm, cos, sin, k2, v2, table, lens, 1e-6)
    torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=0)
    # the stored keys are normalised and rotated in the kernel: the same ops, rounded to BF16 at the same points
    torch.testing.assert_close(k.float(), k2.float(), atol=1e-2, rtol=1e-2 if pool == "bf16" else 2 ** -3)
    assert torch.equal(v.float(), v2.float()) and torch.equal(k[table[0]].float(), k2[table[0]].float())
    assert got[0].abs().max() == 0


def _requests(cfg):
    from farm.bench.ar import bench_request

    short = cfg.model.context // 8
    return [bench_request(cfg, "p", min(300, short), "plan", 70, 1),
            bench_request(cfg, "s1", min(700, short), "semantic", 50, 2),
            bench_request(cfg, "s2", min(500, short), "semantic", 90, 3)]


@pytest.mark.parametrize("chain", [True, False])
@pytest.mark.parametrize("kv_format", ["bf16", "fp8"])
def test_fast_sampler_is_batch_invariant_on_the_gpu(gpu_model, kv_format, chain):
    """The same three requests alone (each in another slot) and together give identical ids, over a BF16 cache and
    an e4m3 one, with the layer chain (the default on Hopper) and with the separate products."""
    from stages.ar import AREngine

    model, cfg = gpu_model
    engine = AREngine(model, cfg.tokens, kv_tokens=8 * cfg.model.context, cuda_graphs=True, compile=True,
                      kv_format=kv_format, chain=chain)
    requests = _requests(cfg)
    together = {r.key: r.ids for r in engine.generate(requests)}
    assert engine.generate(requests)[0].mean_batch > 1
    for shift, r in enumerate(requests):
        engine.free_slots.rotate(7 + shift)
        (alone,) = engine.generate([r])
        assert np.array_equal(alone.ids, together[r.key]), r.key


def test_w8a8_chain_engine_is_batch_invariant_on_the_gpu(gpu_model):
    """FP8 weights through the W8A8 layer chain (layer_chain_w8a8.py; asked for, not yet the default): the same
    three requests alone and together give identical ids."""
    from stages import layer_chain_w8a8
    from stages.ar import AREngine

    model, cfg = gpu_model
    m = cfg.model
    if not layer_chain_w8a8.supported(torch.device("cuda"), m.hidden_size, m.intermediate_size,
                                      (m.num_attention_heads + 2 * m.num_key_value_heads) * m.head_dim):
        pytest.skip("the W8A8 chain kernel needs Hopper (sm_90) and shapes its 256-value k-tiles divide")
    engine = AREngine(model, cfg.tokens, kv_tokens=8 * m.context, cuda_graphs=True, compile=True,
                      weight_format="fp8", chain=True)
    assert engine.w8a8
    requests = _requests(cfg)
    together = {r.key: r.ids for r in engine.generate(requests)}
    for shift, r in enumerate(requests):
        engine.free_slots.rotate(5 + shift)
        (alone,) = engine.generate([r])
        assert np.array_equal(alone.ids, together[r.key]), r.key


def test_pick_kernel_equals_the_pytorch_sampler_on_the_gpu():
    """The Triton pick against keep, race and book in PyTorch on the same card, over the yue2-3b vocabulary: 32
    slots under plan- and semantic-like settings (and greedy, top_p 1, legacy min_keep), 24 steps: the same ids,
    stops, logged ids, windows and counters."""
    import copy

    from stages import fast_sampling as fs
    from stages._sampler_triton import launch

    slots, vocab = 32, 184704
    g = torch.Generator(device="cuda").manual_seed(0)
    t = fs.SlotTable.empty(slots, vocab, "cuda")
    settings = [(0.7, 0.9, 30, 1, 1.005, 100), (1.0, 0.95, 100, 1, 1.2, 50), (0.0, 1.0, 1, 1, 1.0, 1),
                (1.0, 1.0, 256, 1, 1.1, 7), (1.0, 0.3, 50, 3, 1.1, 20)]
    for r in range(slots):
        temp, top_p, top_k, keep, penalty, window = settings[r % len(settings)]
        t.set_slot(r, {"temperature": temp, "top_p": top_p, "top_k": top_k, "min_keep": keep, "penalty": penalty,
                       "window": window, "max_tokens": 10 + r, "end": 5 + r, "key": fs.request_key(r, "semantic"),
                       "count": 0, "active": r % 9 != 4, "is_cond": True, "lo": 0, "hi": vocab})
    for step in range(24):
        logits = (torch.randn(slots, vocab, device="cuda", generator=g) * 3).bfloat16()
        values, ids = fs.top(fs.scores(logits, t))
        ref = copy.deepcopy(t)
        want = fs.race(*fs.keep(values, ids, ref), ref)
        want_log = torch.where(ref.active & ref.is_cond, want, -1)
        want_go = fs.book(ref, want)
        log = torch.empty(slots, dtype=torch.long, device="cuda")
        got, go = launch(values, ids, t, log)
        assert torch.equal(got, want) and torch.equal(go, want_go) and torch.equal(log, want_log), step
        assert all(torch.equal(getattr(t, n), getattr(ref, n)) for n in ("count", "ring", "counts")), step
        t.active.copy_(go)


@pytest.mark.parametrize("span", [(0, 151_424), (151_389, 184_704)])
def test_candidate_kernels_equal_the_pytorch_scores_on_the_gpu(span):
    """`fast_sampling.best` on CUDA (two Triton kernels) against `scores` in PyTorch and the canonical first 256, on
    yue2-3b-sized spans: 32 slots, CFG pairs, penalties, greedy rows, ties, inactive slots; bit for bit."""
    from stages import fast_sampling as fs

    first, last = span
    slots, vocab, width = 32, 184704, last - first
    g = torch.Generator(device="cuda").manual_seed(1)
    t = fs.SlotTable.empty(slots, vocab, "cuda")
    for r in range(slots):
        t.set_slot(r, {"temperature": (0.7, 1.0, 0.0, 1.3)[r % 4], "penalty": (1.005, 1.2, 1.1, 1.0)[r % 4],
                       "window": 1 + 9 * r, "min_tokens": 3, "max_tokens": 10_000, "end": first + r,
                       "lo": first + 40 + r, "hi": last - r, "cfg_scale": 1.5, "use_cfg": r % 4 == 0,
                       "partner": r + 1 if r % 4 == 0 else r, "owner": r - 1 if r % 4 == 1 else r,
                       "is_cond": r % 4 != 1, "active": r % 7 != 6, "key": r})   # 4i + 1: 4i's unconditional half
    drawing = t.active & t.is_cond
    for step in range(8):
        logits = (torch.randn(slots, width, device="cuda", generator=g) * 3).bfloat16()
        logits[2, 8000:20000] = 5.0
        values, ids = fs.best(logits, t, first)
        x = fs.scores(logits, t, first)
        want = fs.canonical_first(x, fs.CANDIDATES)
        got, order = (ids - first).sort(dim=1)
        assert torch.equal(got[drawing], want[drawing].sort(dim=1).values), step
        assert torch.equal(values.gather(1, order)[drawing], x.gather(1, got)[drawing]), step
        assert torch.isinf(values[~drawing]).all() and (ids[~drawing] == first).all()
        fs.book(t, first + 40 + torch.randint(0, 200, (slots,), device="cuda", generator=g))


def test_the_rope_table_gives_what_rope_tables_computes_on_the_gpu(gpu_model):
    """The step's cos and sin gathered from the engine's table (computed once) are the bits the CUDA kernels give
    for the step's own positions."""
    from stages.ar import AREngine
    from stages.transformer import rope_tables

    model, cfg = gpu_model
    engine = AREngine(model, cfg.tokens, kv_tokens=cfg.model.context)
    context = cfg.model.context
    positions = torch.cat([torch.tensor([0, 1, context]), torch.randint(0, context + 1, (61,))]).cuda()
    assert all(torch.equal(a, b) for a, b in zip(engine.rope[:, positions], rope_tables(positions, cfg.model,
                                                                                        engine.dtype)))


@pytest.mark.parametrize("chain", [True, False])
@pytest.mark.parametrize("sampler", ["fast", "exact"])
def test_graph_step_equals_eager_step(gpu_model, sampler, chain):
    from stages.ar import AREngine

    model, cfg = gpu_model
    runs = []
    for graphs in (True, False):
        engine = AREngine(model, cfg.tokens, kv_tokens=8 * cfg.model.context, cuda_graphs=graphs,
                          compile=True, sampler=sampler, chain=chain)
        runs.append({r.key: r.ids for r in engine.generate(_requests(cfg))})
    for key in runs[0]:
        assert np.array_equal(runs[0][key], runs[1][key]), key


def test_compiled_step_is_as_close_to_fp32_as_the_eager_step(gpu_model, tiny_ckpt_dir):
    """torch.compile fuses the elementwise work (other BF16 roundings): its teacher-forced logits must stay as close
    to an FP32 forward as the eager step's are."""
    from stages.ar import AREngine
    from stages.transformer import AR, HEAD, ar_prefill, logits
    from stages.weights import load_model

    model, cfg = gpu_model
    root = Path(os.environ.get("FARM_GPU_CKPT", tiny_ckpt_dir))
    ids = torch.randint(0, cfg.tokens.eod, (200,), generator=torch.Generator().manual_seed(3)).tolist()
    fp32 = load_model(root / "model", cfg, {AR, HEAD}, device="cuda", dtype=torch.float32)
    with torch.inference_mode():
        hidden, _ = ar_prefill(fp32, torch.tensor(ids, device="cuda"))
        ref = logits(fp32, hidden)[0, 99:-1]
    del fp32, hidden
    error = {}
    for compiled in (True, False):
        engine = AREngine(model, cfg.tokens, kv_tokens=2 * cfg.model.context, compile=compiled)
        engine.prefill(0, ids[:100])
        got = [engine.next_logits[0].float().clone()] + [engine.decode({0: t})[0].float() for t in ids[100:-1]]
        error[compiled] = (torch.stack(got) - ref).abs().mean().item()
    assert error[True] <= 1.1 * error[False], error


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


def _acoustic_case(tiny_ckpt_dir, prefix: int, frames: int):
    """The GPU checkpoint's (or tiny's) AR and NAR branches in BF16, and a two-step acoustic request."""
    from stages.acoustic import AcousticRequest
    from stages.config_json import from_checkpoint
    from stages.transformer import AR, NAR
    from stages.weights import load_model

    root = Path(os.environ.get("FARM_GPU_CKPT", tiny_ckpt_dir))
    cfg = from_checkpoint(root / "model", root / "vae")
    model = load_model(root / "model", cfg, {AR, NAR}, device="cuda", dtype=torch.bfloat16)
    rng = np.random.default_rng(0)
    request = AcousticRequest("a", tuple(int(t) for t in rng.integers(0, 100, prefix)),
                              rng.integers(0, cfg.tokens.codebook, frames).astype(np.int32), seed=3, ode_steps=2)
    return model, cfg, request


def test_compiled_acoustic_layer_stays_close_to_eager(tiny_ckpt_dir):
    """The acoustic engine on CUDA (compiled layer maths, prefix K/V buffers) against the eager layer maths: the
    same latents to BF16 rounding."""
    from stages.acoustic import AcousticEngine
    from stages.transformer import layer_head, layer_tail

    model, cfg, request = _acoustic_case(tiny_ckpt_dir, 200, 120)
    fast = AcousticEngine(model, cfg.tokens)
    assert fast.head is not layer_head
    plain = AcousticEngine(model, cfg.tokens)
    plain.head, plain.tail = layer_head, layer_tail
    got, want = fast.synthesize(request), plain.synthesize(request)
    assert np.abs(got - want).mean() <= 0.02 * np.abs(want).mean(), np.abs(got - want).mean()
    assert np.array_equal(got, fast.synthesize(request))                   # repeatable
    eager = AcousticEngine(model, cfg.tokens)
    eager.graphs = False                     # each evaluation launched anew: the replayed graph's bits exactly
    assert np.array_equal(got, eager.synthesize(request))


def test_flash_attention_4_acoustic_stays_close_to_sdpa(tiny_ckpt_dir):
    """The acoustic engine with FlashAttention-4 (seq-major K/V buffers) against the same engine with SDPA: the
    same latents to BF16 rounding; repeatable, and the replayed graph gives the eager launches' bits."""
    pytest.importorskip("flash_attn.cute.interface")
    from stages.acoustic import AcousticEngine

    model, cfg, request = _acoustic_case(tiny_ckpt_dir, 300, 150)
    fa4, sdpa = AcousticEngine(model, cfg.tokens, "fa4"), AcousticEngine(model, cfg.tokens, "sdpa")
    assert (fa4.attention.name, sdpa.attention.name) == ("fa4", "sdpa")
    got, want = fa4.synthesize(request), sdpa.synthesize(request)
    assert np.abs(got - want).mean() <= 0.02 * np.abs(want).mean(), np.abs(got - want).mean()
    assert np.array_equal(got, fa4.synthesize(request))
    eager = AcousticEngine(model, cfg.tokens, "fa4")
    eager.graphs = False
    assert np.array_equal(got, eager.synthesize(request))


def test_fused_snake_equals_eager():
    from stages.vae import _fused_snake, snake

    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(2, 64, 3000, device="cuda", generator=g)
    a, b = (0.3 * torch.randn(64, device="cuda", generator=g) for _ in range(2))
    torch.testing.assert_close(_fused_snake()(x, a, b), snake(x, a, b), atol=1e-5, rtol=1e-5)


def test_tf32_decode_stays_close_to_fp32(tiny_ckpt_dir, tiny_cfg):
    """The faster VAE mode: other bytes, but audio within a few 1e-3 of FP32 (the H200 figures for the release
    shapes are in docs/benchmarks.md); and the FP32 default still runs FP32 convolutions."""
    import numpy as np

    from stages.vae import decode_audio, load_decoder

    decoder = load_decoder(tiny_ckpt_dir / "vae", tiny_cfg.vae, device="cuda")
    latents = np.random.default_rng(0).standard_normal((600, tiny_cfg.vae.latent_dim)).astype(np.float32)
    core, halo = tiny_cfg.vae.decode_core_frames, tiny_cfg.vae.decode_halo_frames
    fp32, again = (decode_audio(decoder, latents, core, halo) for _ in range(2))
    tf32 = decode_audio(decoder, latents, core, halo, "tf32")
    assert np.array_equal(fp32, again) and np.abs(tf32 - fp32).max() < 1e-2


def test_w8a8_chain_matches_its_reference_and_is_row_invariant():
    """The W8A8 chain kernel (activations quantised per row inside it) on the yue2-3b shapes against the op's
    torch reference: close (MMA summation order, the norm factor's); bitwise repeatable, a row's result
    independent of the other rows, the last layer's form (no q/k/v), and no grid barrier timed out."""
    from stages import layer_chain, layer_chain_w8a8 as w8
    from stages.quant import quantize_fp8

    if not w8.supported(torch.device("cuda"), 2048, 6144, 4096):
        pytest.skip("the W8A8 chain kernel needs Hopper (sm_90)")
    g = torch.Generator(device="cuda").manual_seed(6)
    h, i, q, eps = 2048, 6144, 4096, 1e-6

    def w(rows, k):
        return quantize_fp8((torch.randn(rows, k, device="cuda", generator=g) * k ** -0.5).bfloat16())
    o, gate_up, down, qkv = w(h, h), w(2 * i, h), w(h, i), w(q, h)
    gamma_post, gamma_in = ((1 + 0.1 * torch.randn(h, device="cuda", generator=g)).bfloat16() for _ in range(2))
    a, x = (torch.randn(32, h, device="cuda", generator=g).bfloat16() for _ in range(2))
    state = layer_chain.words(torch.device("cuda"))

    def run(a_, x_, nxt=qkv, g_in=gamma_in):
        return w8.chain(a_, x_, o, gate_up, down, nxt, gamma_post, g_in, eps, state)
    got = run(a, x)
    want = w8.reference(a, x, o, gate_up, down, qkv, gamma_post, gamma_in, eps)
    for c, r in zip(got, want):
        assert (c.float() - r.float()).abs().mean() <= 0.01 * r.float().abs().mean()
    assert all(torch.equal(c, d) for c, d in zip(got, run(a, x)))
    a2, x2 = torch.randn_like(a), torch.randn_like(x)
    a2[3], x2[3] = a[3], x[3]
    mixed, alone = run(a2, x2), run(a[3:4].clone(), x[3:4].clone())
    assert all(torch.equal(c[3], m[3]) and torch.equal(c[3:4], s) for c, m, s in zip(got, mixed, alone))
    last, empty = run(a, x, None, None)
    assert torch.equal(last, got[0]) and empty.shape == (32, 0)
    assert not layer_chain.timed_out(state)
