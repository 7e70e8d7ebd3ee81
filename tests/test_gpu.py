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


def _attention_inputs(pool: str, lens: list[int], pages: int):
    """Decode-attention inputs on yue2-3b head shapes: the raw q/k/v rows, the norms, random pools of `pool`, a block
    table giving each row its own pages, the rows' RoPE angles."""
    from stages.kv_cache import storage_dtype, to_pool

    g = torch.Generator(device="cuda").manual_seed(0)
    rows, heads, kv, d, page = len(lens), 16, 8, 128, 64
    per_row = (pages - 1) // rows
    qkv = torch.randn(rows, (heads + 2 * kv) * d, device="cuda", generator=g).bfloat16()
    q_norm, k_norm = ((1 + 0.1 * torch.randn(d, device="cuda", generator=g)).bfloat16() for _ in range(2))
    dtype = storage_dtype(pool, torch.bfloat16)
    k = to_pool(torch.randn(pages, kv, page, d, device="cuda", generator=g), dtype)
    v = to_pool(torch.randn(pages, kv, page, d, device="cuda", generator=g), dtype)
    table = (torch.randperm(pages - 1, device="cuda", generator=g)[:rows * per_row] + 1).int().reshape(rows, per_row)
    lens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    angles = (lens.clamp(min=1) - 1).float()[:, None] * 1e6 ** (-torch.arange(0, d, 2, device="cuda") / d)
    cos, sin = (f(torch.cat([angles, angles], -1)).bfloat16() for f in (torch.cos, torch.sin))
    return qkv, q_norm, k_norm, cos, sin, k, v, table, lens


@pytest.mark.parametrize("pool", ["bf16", "fp8"])
def test_paged_kernel_equals_the_reference(pool):
    """The kernels (q/k norm and RoPE, the cache write, split and merge) against the row-by-row reference, over a
    BF16 cache and an e4m3 one (kv_cache.py; the values the kernel stores equal the reference's exactly)."""
    from stages import paged_attention as pa

    qkv, q_norm, k_norm, cos, sin, k, v, table, lens = _attention_inputs(pool, [0, 1, 63, 129, 960, 2500], 256)
    k2, v2 = k.clone(), v.clone()    # 2,500 keys: spans of 3 pages
    got = pa.decode_attention(qkv, q_norm, k_norm, cos, sin, k, v, table, lens, 1e-6)
    want = pa.reference(qkv, q_norm, k_norm, cos, sin, k2, v2, table, lens, 1e-6)
    torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=0)
    # the stored keys are normalised and rotated in the kernel: the same ops, rounded to BF16 at the same points
    torch.testing.assert_close(k.float(), k2.float(), atol=1e-2, rtol=1e-2 if pool == "bf16" else 2 ** -3)
    assert torch.equal(v.float(), v2.float()) and torch.equal(k[table[0]].float(), k2[table[0]].float())
    assert got[0].abs().max() == 0


@pytest.mark.parametrize("pool", ["bf16", "fp8"])
def test_a_row_gets_the_same_attention_bits_beside_few_or_many_live_rows(pool):
    """With at most `EARLY_ROWS` live rows the split kernel reads a span's first page before it waits, with more
    every page through its loop: the same sums in the same order, so a row's output and the key and value it
    stores are the same bits either way (batch invariance)."""
    from stages import paged_attention as pa

    assert pa.EARLY_ROWS >= 7, "the 7 rows alone must take the early path for this test to compare the two"
    many = [1, 63, 129, 450, 2720, 5000, 7680] + [300 + 97 * i for i in range(pa.EARLY_ROWS + 1)]
    inputs = _attention_inputs(pool, many, 2048)
    qkv, q_norm, k_norm, cos, sin, k, v, table, lens = inputs
    few = lens.clone()
    few[7:] = 0                      # the first 7 rows alone: the first page before the wait
    k2, v2 = k.clone(), v.clone()
    alone = pa.decode_attention(qkv, q_norm, k_norm, cos, sin, k, v, table, few, 1e-6)
    beside = pa.decode_attention(qkv, q_norm, k_norm, cos, sin, k2, v2, table, lens, 1e-6)
    assert torch.equal(alone[:7], beside[:7])
    mine = table[:7].flatten().long()
    assert torch.equal(k[mine], k2[mine]) and torch.equal(v[mine], v2[mine])


def _requests(cfg):
    from farm.bench.ar import bench_request

    short = cfg.model.context // 8
    return [bench_request(cfg, "p", min(300, short), "plan", 70, 1),
            bench_request(cfg, "s1", min(700, short), "semantic", 50, 2),
            bench_request(cfg, "s2", min(500, short), "semantic", 90, 3)]


@pytest.mark.parametrize("kv_format, chain", [(kv, chain) for kv in ("bf16", "fp8") for chain in (True, False)])
def test_fast_sampler_is_batch_invariant_on_the_gpu(gpu_model, kv_format, chain):
    """The same three requests alone (each in another slot) and together give identical ids, over a BF16 cache and
    an e4m3 one, with the layer chain (the default on Hopper) and with the separate products."""
    from stages.ar import AREngine

    model, cfg = gpu_model
    m = cfg.model
    engine = AREngine(model, cfg.tokens, kv_tokens=8 * m.context, cuda_graphs=True, compile=True,
                      kv_format=kv_format, chain=chain)
    graphs = [f"{name} {part}" for name in engine.graphs for part in ("warm-up", "capture")]
    assert list(engine.build_seconds) == ["kv cache and tables", "step weights", *graphs]   # where a start goes
    requests = _requests(cfg)
    together = {r.key: r.ids for r in engine.generate(requests)}
    assert engine.generate(requests)[0].mean_batch > 1
    for shift, r in enumerate(requests):
        engine.free_slots.rotate(7 + shift)
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


def test_fused_snake_equals_eager():
    from stages.vae import _fused_snake, snake

    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(2, 64, 3000, device="cuda", generator=g)
    a, b = (0.3 * torch.randn(64, device="cuda", generator=g) for _ in range(2))
    torch.testing.assert_close(_fused_snake()(x, a, b), snake(x, a, b), atol=1e-5, rtol=1e-5)


def test_tf32_decode_stays_close_to_fp32(tiny_ckpt_dir, tiny_cfg):
    """The faster VAE mode: other bytes, but audio within a few 1e-3 of FP32 (the H200 figures for the release
    shapes are in docs/benchmarks.md); "fp32" runs FP32 convolutions, the same bytes twice; and the default, whose
    kernel cannot take the tiny decoder's widths, falls back to exactly those."""
    import numpy as np

    from stages.vae import decode_audio, load_decoder

    decoder = load_decoder(tiny_ckpt_dir / "vae", tiny_cfg.vae, device="cuda")
    latents = np.random.default_rng(0).standard_normal((600, tiny_cfg.vae.latent_dim)).astype(np.float32)
    core, halo = tiny_cfg.vae.decode_core_frames, tiny_cfg.vae.decode_halo_frames
    fp32, again = (decode_audio(decoder, latents, core, halo, "fp32") for _ in range(2))
    tf32 = decode_audio(decoder, latents, core, halo, "tf32")
    assert np.array_equal(fp32, again) and np.abs(tf32 - fp32).max() < 1e-2
    assert np.array_equal(decode_audio(decoder, latents, core, halo), fp32)


def test_tf32x3_decode_stays_within_fp32_noise_of_fp64():
    """The tensor-core decode (vae_tf32x3.py) on the release widths, every conv through the kernel: audio within a
    few times FP32's own distance from an FP64 decode (the split operands alone err ~1e-7 relative, below FP32's
    accumulation; the MMA's accumulation order adds the rest) and far inside TF32's; the same bytes twice."""
    import copy

    from stages import vae, vae_tf32x3 as tc
    from stages.config import from_toml

    cfg = from_toml("configs/models/yue2-3b.toml").vae
    decoder = vae.OobleckDecoder(cfg)
    raw = {k: v for k, v in vae.random_vae_tensors(cfg, 0).items() if k.startswith("decoder.")}
    decoder.load_state_dict(vae._fold(raw), strict=True)
    decoder = decoder.cuda().eval().requires_grad_(False)
    z = torch.randn(1, cfg.latent_dim, 40, device="cuda", generator=torch.Generator(device="cuda").manual_seed(0))
    with torch.inference_mode():
        fp64 = copy.deepcopy(decoder).double().layers(z.double())
        with vae._tf32(False):                  # cuDNN would take TF32 for "FP32" convs otherwise
            fp32 = decoder(z)
        with vae._tf32(True):
            tf32 = decoder(z)
        plan = tc.plan_for(decoder)
        got, again = tc.forward(plan, z), tc.forward(plan, z)
    err32, err_tf32, err = ((y.double() - fp64).abs().max().item() for y in (fp32, tf32, got))
    assert torch.equal(got, again)
    assert err <= 16 * err32 and err <= err_tf32 / 20, (err, err32, err_tf32)
    # decode_audio's own path: tiles cut from the transposed latents (a batch stride TMA must not see), the last
    # one shorter than a row tile, one frame alone
    latents = np.random.default_rng(0).standard_normal((70, cfg.latent_dim)).astype(np.float32)
    for frames in (70, 1):
        want, tf32, audio = (vae.decode_audio(decoder, latents[:frames], 32, 16, p) for p in ("fp32", "tf32", "tf32x3"))
        assert audio.shape == want.shape and np.abs(audio - want).max() <= np.abs(tf32 - want).max() / 20, frames
        assert np.array_equal(vae.decode_audio(decoder, latents[:frames], 32, 16), audio)     # the default
    # load_decoder's warm-up builds the plan (and compiles its kernels) before the first song: the plan
    # decode_audio then uses, not a second one
    fresh = copy.deepcopy(decoder)
    vae._warm(fresh)
    held = fresh._tf32x3_plan
    assert tc.plan_for(fresh) is held[1]


def test_tensors_reach_the_card_through_the_pinned_buffers_unchanged(tmp_path):
    """Read to the card in parts of 4 KiB (each buffer reused many times, parts that end mid-tensor): the file's
    bytes, every dtype and shape; through load_tensors too, cast on the way."""
    from stages.checkpoint import _read_to_card, load_tensors, write_tensors

    g = torch.Generator().manual_seed(0)
    tensors = {"a": torch.randn(1000, 37, generator=g).bfloat16(), "b": torch.randn(3, 5, 7, generator=g),
               "c": torch.arange(10, dtype=torch.int64), "d": torch.randn(1, generator=g).half()}
    path = tmp_path / "m.safetensors"
    write_tensors(path, tensors, {})
    got = dict(_read_to_card(path, list(tensors), "cuda", stage_bytes=4096))
    for name, t in tensors.items():
        assert got[name].is_cuda and got[name].dtype == t.dtype and torch.equal(got[name].cpu(), t), name
    cast = load_tensors(path, ["a", "b"], dtype=torch.float32, device="cuda")
    assert torch.equal(cast["a"].cpu(), tensors["a"].float()) and torch.equal(cast["b"].cpu(), tensors["b"])
