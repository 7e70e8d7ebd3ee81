"""The acoustic stage on the GPU (run with `pytest -m gpu`; skipped elsewhere): the compiled layer against eager,
FlashAttention-4 against SDPA, the last wave's split against FA4 whole, a warm-up that leaves nothing to compile,
and evaluations that never wait for the card. They use the checkpoint named by FARM_GPU_CKPT when it is set, else
the tiny checkpoint cast to BF16."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.gpu


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
    from stages.transformer import layer_head_into, layer_tail_open

    model, cfg, request = _acoustic_case(tiny_ckpt_dir, 200, 120)
    fast = AcousticEngine(model, cfg.tokens)
    assert fast.head is not layer_head_into
    plain = AcousticEngine(model, cfg.tokens)
    plain.head, plain.tail = layer_head_into, layer_tail_open
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


def test_fa4_last_wave_split_keeps_the_main_rows_and_stays_close_on_the_tail():
    """The reference chunk's attention (5,373 rows, 15,745 keys) with its last row tile over key ranges against FA4
    whole: the main rows the same bits, the tail rows within BF16 rounding of them and at most twice as far from
    an FP32 attention (one rounding more); repeatable, and a CUDA graph replays the eager call's bits."""
    pytest.importorskip("flash_attn.cute.interface")
    from stages import nar_attention as na

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows, keys = 5373, 15745
    plan = na.wave_split(rows, 16, keys, sms)
    if torch.cuda.get_device_capability(0)[0] != 9 or plan.splits == 1:
        pytest.skip(f"no split on this card: {plan}")
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(1, rows, 16, 128, device="cuda", dtype=torch.bfloat16, generator=g).transpose(1, 2)
    k, v = (torch.randn(1, keys, 8, 128, device="cuda", dtype=torch.bfloat16, generator=g).transpose(1, 2)
            for _ in range(2))
    split, whole = na._flash4(split=True)[0], na._flash4(split=False)[0]
    got, ref = split(q, k, v), whole(q, k, v)
    m = plan.main_rows
    assert torch.equal(got[:, :, :m], ref[:, :, :m])
    want = torch.nn.functional.scaled_dot_product_attention(q[:, :, m:].float(), k.float(), v.float(),
                                                            enable_gqa=True)
    err_split, err_whole = ((x[:, :, m:].float() - want).abs().mean().item() for x in (got, ref))
    assert err_split <= 2 * err_whole, (err_split, err_whole)      # their partials are rounded once more
    assert (got[:, :, m:].float() - ref[:, :, m:].float()).abs().max().item() < 2e-2
    assert torch.equal(got, split(q, k, v))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = split(q, k, v)
    graph.replay()
    assert torch.equal(static, got)


def test_acoustic_warm_up_leaves_nothing_to_compile_for_a_split_chunk(tiny_ckpt_dir):
    """After the engine's build, a chunk whose last wave splits (any tail length) compiles nothing: on 2026-12-07 a
    warm-up outside inference mode left the merge to compile again inside the first split song (+1.4–2.8 s of its
    acoustic stage on an H200)."""
    pytest.importorskip("flash_attn.cute.interface")
    from stages import nar_attention as na
    from stages.acoustic import AcousticEngine

    if torch.cuda.get_device_capability(0)[0] != 9:
        pytest.skip("the last-wave split runs on Hopper only")
    model, cfg, _ = _acoustic_case(tiny_ckpt_dir, 200, 120)
    engine = AcousticEngine(model, cfg.tokens, "fa4")
    m = cfg.model
    heads, kv, d = m.num_attention_heads, m.num_key_value_heads, m.head_dim
    with torch.inference_mode(), torch._dynamo.config.patch(error_on_recompile=True):
        for tail in (77, 1, na.TILE_ROWS):
            q = torch.randn(1, 2 * na.TILE_ROWS + tail, heads, d, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(1, 5 * na.MIN_RANGE_KEYS, kv, d, device="cuda", dtype=torch.bfloat16)
            out = engine.attention.attend(q.transpose(1, 2), k.transpose(1, 2), k.transpose(1, 2),
                                          na.WaveSplit(2 * na.TILE_ROWS, 3))
            assert out.shape == q.transpose(1, 2).shape and torch.isfinite(out).all()


def test_acoustic_evaluations_after_the_capture_never_wait_for_the_card(tiny_ckpt_dir):
    """Once a chunk's graph is captured its ODE queues work without a host synchronisation (sync debug mode "error"
    raises on one): τ copied from pageable host memory each evaluation made the host wait for the card to drain,
    leaving it idle while the next replay was launched (~0.27 ms an evaluation on an H100)."""
    from stages.acoustic import AcousticEngine, chunk_tokens, midpoint_solve, song_noise

    model, cfg, request = _acoustic_case(tiny_ckpt_dir, 200, 120)
    engine = AcousticEngine(model, cfg.tokens)
    frames = len(request.codes)
    with torch.inference_mode():
        v = engine.chunk_velocity(chunk_tokens(request.prefix, request.codes, 0, frames, cfg.tokens), frames)
        x = song_noise(frames, cfg.model.latent_dim, 0).to("cuda", torch.bfloat16)
        v(x, 20.0)                                              # the eager call, then the capture
        torch.cuda.set_sync_debug_mode("error")
        try:
            latents = midpoint_solve(v, x, 4)
        finally:
            torch.cuda.set_sync_debug_mode(0)
        assert torch.isfinite(latents).all()
