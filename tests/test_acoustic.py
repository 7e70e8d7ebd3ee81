"""The acoustic stage: solver, chunking, noise slicing (docs/model.md §9.2, §9.3), on the tiny checkpoint."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from stages.acoustic import AcousticEngine, AcousticRequest, chunk_tokens, midpoint_solve, raw_time, song_noise
from stages.config import BYTE_LAYOUT
from stages.protocol import chunk_ranges
from stages.transformer import AR, NAR, timestep_tau
from stages.weights import load_model


def test_solver_with_unit_velocity_calls_64_times_and_starts_at_raw_20():
    calls = []

    def v(x, raw):
        calls.append(raw)
        return torch.ones_like(x)

    noise = torch.randn(3, 8)
    out = midpoint_solve(v, noise, 32)
    assert len(calls) == 64 and calls[0] == 20.0
    assert calls[1] == pytest.approx(float(np.log((1 - 1 / 64) / (1 / 64))))
    torch.testing.assert_close(out, noise - 1, atol=1e-6, rtol=0)
    assert raw_time(1.0) == 20.0 and raw_time(0.0) == -20.0 and raw_time(0.5) == 0.0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_timestep_tau_is_the_sigmoid_of_raw_rounded_once_to_the_dtype(dtype):
    """τ is built on the device from a scalar (no copy that would wait for the card): the scalar must be raw rounded
    once to the dtype, as a tensor copied from the host would hold, at every time the 32-step ODE asks for."""
    raws = []
    midpoint_solve(lambda x, raw: raws.append(raw) or torch.zeros_like(x), torch.zeros(1), 32)
    for raw in raws + [1e-3, -7.3, 0.1 + 0.2]:
        rounded = torch.tensor(raw, dtype=torch.float64).to(dtype)
        for shift in (1.0, 3.0):
            sigma = torch.sigmoid(rounded)
            want = sigma if shift == 1.0 else shift * sigma / (1 + (shift - 1) * sigma)
            assert torch.equal(timestep_tau(raw, dtype, shift, "cpu"), want), (raw, shift)


def test_chunks_noise_and_chunk_tokens():
    ranges = chunk_ranges(11, 2, 15)
    assert [b - a for a, b in ranges] == [5, 5, 1]
    whole = torch.randn((11, 8), generator=torch.Generator("cpu").manual_seed(5))
    noise = song_noise(11, 8, 5)
    assert torch.equal(noise, whole)
    assert torch.equal(torch.cat([noise[a:b] for a, b in ranges]), whole)
    codes = np.arange(11, dtype=np.int32)
    assert chunk_tokens([256, 464], codes, 5, 10, BYTE_LAYOUT) == [256, 464] + [466 + c for c in range(5, 10)] + [465]
    # tiny's latent width is 8: not the first 8 columns of a 64-wide draw
    assert not torch.equal(song_noise(4, 8, 1), song_noise(4, 64, 1)[:, :8])


@pytest.fixture(scope="module")
def engine(tiny_ckpt_dir, tiny_cfg):
    return AcousticEngine(load_model(tiny_ckpt_dir / "model", tiny_cfg, {AR, NAR}), BYTE_LAYOUT)


def test_synthesize_equals_chunk_by_chunk_solves(engine):
    prefix = tuple([256] + list(range(60, 400)) + [464])          # 342 tokens → chunks of (512 − 342 − 3) // 2 = 83
    codes = np.random.default_rng(0).integers(0, 64, 200).astype(np.int32)
    request = AcousticRequest("t", prefix, codes, seed=9, ode_steps=4)
    latents = engine.synthesize(request)
    assert latents.shape == (200, 8) and latents.dtype == np.float32
    ranges = chunk_ranges(200, len(prefix), 512)
    assert len(ranges) == 3
    noise = song_noise(200, 8, 9)
    manual = [engine.solve_chunk(chunk_tokens(prefix, codes, a, b, BYTE_LAYOUT), noise[a:b], 4) for a, b in ranges]
    np.testing.assert_array_equal(latents, torch.cat(manual).numpy())
    assert np.array_equal(latents, engine.synthesize(request))
    assert not np.array_equal(latents, engine.synthesize(AcousticRequest("t", prefix, codes, seed=10, ode_steps=4)))


def test_bad_codes_are_refused(engine):
    from stages.protocol import ProtocolError

    with pytest.raises(ProtocolError, match=r"\[0, 64\)"):
        engine.synthesize(AcousticRequest("t", (256, 464), np.array([3, 64], dtype=np.int32), seed=1, ode_steps=1))


def test_seq_major_kv_buffers_give_the_same_velocity(engine):
    """FlashAttention's K/V layout ([1, S, KV, D] behind the same view) changes where the keys sit, not the maths:
    the same velocity bits through SDPA on the CPU."""
    from stages.transformer import ar_prefill, nar_kv_buffers, velocity

    ids = torch.tensor([256] + list(range(60, 160)) + [464], dtype=torch.long)
    _, kv = ar_prefill(engine.model, ids)
    x = torch.randn(20, 8, generator=torch.Generator("cpu").manual_seed(1))
    plain, seq = (nar_kv_buffers(kv, len(ids), 22, seq_major) for seq_major in (False, True))
    assert seq[0][0].shape == plain[0][0].shape and seq[0][0].transpose(1, 2).is_contiguous()
    assert torch.equal(velocity(engine.model, kv, len(ids), x, 0.3, buffers=plain),
                       velocity(engine.model, kv, len(ids), x, 0.3, buffers=seq))


def test_nar_attention_choice(monkeypatch):
    from stages import nar_attention

    assert nar_attention.pick(torch.device("cpu"), torch.bfloat16).name == "sdpa"
    with pytest.raises(ValueError, match="Hopper or Blackwell"):
        nar_attention.pick(torch.device("cpu"), torch.bfloat16, "fa4")
    monkeypatch.setenv("YUE2_FARM_NAR_ATTENTION", "flash9")
    with pytest.raises(ValueError, match="YUE2_FARM_NAR_ATTENTION: unknown kernel 'flash9'"):
        nar_attention.pick(torch.device("cpu"), torch.bfloat16)


def test_the_last_wave_plan_splits_only_where_sms_would_idle():
    """FA4 on Hopper: the reference chunk (672 tiles on 132 SMs, 5.09 rounds of work in 6) moves its last row
    tile into 8 key ranges; tile counts that fill their rounds, and chunks under one round, stay whole."""
    from stages.nar_attention import WaveSplit, key_ranges, wave_split

    assert wave_split(5373, 16, 15745, 132) == WaveSplit(5248, 8)
    assert wave_split(33 * 128, 16, 12000, 132) == WaveSplit(33 * 128, 1)      # 528 tiles: 4 full rounds
    assert wave_split(302, 16, 3302, 132) == WaveSplit(302, 1)                 # 48 tiles: one round
    assert wave_split(5373, 16, 15745, 114) == WaveSplit(5373, 1)              # 114 SMs: 5.89 rounds in 6
    assert wave_split(5373, 16, 900, 132).splits == 1                          # too few keys to cut
    for keys, s in ((15745, 8), (4502, 2), (700, 3)):
        b = key_ranges(keys, s)
        assert len(b) == s + 1 and b[0] == 0 and b[-1] == keys and all(x < y for x, y in zip(b, b[1:]))
    assert key_ranges(15745, 8)[1:-1] == [2048 * j for j in range(1, 8)]        # whole key tiles


def test_attention_over_key_ranges_merges_to_attention_over_all_keys():
    """merge_partials: per-range outputs and log-sum-exps (FA4's return_lse convention: natural log of the
    scaled scores' exp-sum) give the attention over every key, here in float64 against SDPA."""
    import torch.nn.functional as F

    from stages.nar_attention import key_ranges, merge_partials

    g = torch.Generator().manual_seed(0)
    t, heads, kv, d, keys = 37, 4, 2, 16, 1000
    q, k, v = (torch.randn(1, n, h, d, generator=g, dtype=torch.float64) for n, h in ((t, heads), (keys, kv),
                                                                                    (keys, kv)))
    scale = d ** -0.5
    want = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale=scale,
                                          enable_gqa=True).transpose(1, 2)[0]
    bounds = key_ranges(keys, 3, tile=128)
    outs, lses = [], []
    for a, b in zip(bounds, bounds[1:]):
        kk = k[0, a:b].repeat_interleave(heads // kv, dim=1)
        vv = v[0, a:b].repeat_interleave(heads // kv, dim=1)
        s = torch.einsum("thd,khd->htk", q[0], kk) * scale          # [H, T, keys in range]
        lses.append(torch.logsumexp(s, dim=-1))
        outs.append(torch.einsum("htk,khd->thd", torch.softmax(s, dim=-1), vv))
    got = merge_partials(torch.stack(outs), torch.stack(lses))
    assert got.dtype == torch.float64 and got.shape == (t, heads, d)
    torch.testing.assert_close(got.double(), want, atol=1e-6, rtol=1e-6)


def test_the_merge_compiled_at_warm_up_serves_every_tail_without_compiling_again():
    """The engine compiles merge_partials at warm-up (nar_attention.WARM_TAILS) and then replays songs' chunks in
    CUDA graphs: a compile at a real tail's length would land inside the first song (2.75 s on an H100, 2026-12-07)
    or fail inside a capture. Warmed on a 128-row tail Dynamo tied the tail to the head dim and compiled again."""
    from torch._dynamo.testing import CompileCounter

    from stages.nar_attention import MERGE_COMPILE, WARM_TAILS, merge_partials

    torch._dynamo.reset()
    count = CompileCounter()
    merge = torch.compile(merge_partials, backend=count, **MERGE_COMPILE)
    heads, d = 16, 128

    def call(splits, tail):
        merge(torch.randn(splits, tail, heads, d, dtype=torch.bfloat16),
              torch.randn(heads, splits, tail).transpose(0, 1))
    for tail in WARM_TAILS:
        call(2, tail)
    warmed = count.frame_count
    for splits, tail in ((8, 125), (8, 128), (5, 3), (16, 64), (2, heads), (8, 8), (3, 1), (7, 1000)):
        call(splits, tail)
    assert count.frame_count == warmed == len(WARM_TAILS)
    torch._dynamo.reset()


def test_fa4_s_disk_cache_is_on_unless_the_user_chose(monkeypatch):
    """Whether or not FA4 imports here, looking for it first turns its on-disk kernel cache on; a value the user
    set is kept."""
    from stages import nar_attention

    monkeypatch.delenv(nar_attention.FA4_CACHE, raising=False)
    nar_attention._flash4()
    assert os.environ[nar_attention.FA4_CACHE] == "1"
    monkeypatch.setenv(nar_attention.FA4_CACHE, "0")
    nar_attention._flash4()
    assert os.environ[nar_attention.FA4_CACHE] == "0"


def test_branches_fused_in_or_out_of_inference_mode_are_alike(tiny_ckpt_dir, tiny_cfg):
    """On a model an AR engine and the acoustic stage share, the AR branch is fused when the AR engine is built
    (outside inference mode) and the NAR branch at the acoustic warm-up (inside it). Dynamo guards on whether a
    tensor is an inference tensor, so had the two differed, the compiled acoustic layer would have compiled once for
    the prefill's weights and again for the velocity's."""
    from stages.transformer import branch_weights

    model = load_model(tiny_ckpt_dir / "model", tiny_cfg, {AR, NAR})
    ar = branch_weights(model, AR)
    with torch.inference_mode():
        nar = branch_weights(model, NAR)
    assert not any(t.is_inference() for w in ar + nar for t in w.tensors())


def test_compiled_layer_compiles_once_for_every_chunk_length(engine):
    """The layer as CUDA engines compile it, here through Inductor's CPU backend: only the chunk length is dynamic,
    so chunks of three lengths, their AR prefills included, reuse the same compiles, and the velocity is the eager
    one to rounding. The head compiles twice: in a prefill its K/V buffers hold just its rows, and Dynamo gives
    equal sizes one symbol, so that graph serves only buffers as long as the rows."""
    from torch._dynamo.utils import counters

    from stages.acoustic import _compiled_layer
    from stages.transformer import ar_prefill, nar_kv_buffers, velocity

    head, tail = _compiled_layer()
    before = counters["stats"]["unique_graphs"]
    for prefix, frames in ((40, 6), (90, 17), (61, 9)):
        ids = torch.tensor([256] + list(range(60, 60 + prefix)) + [464], dtype=torch.long)
        with torch.inference_mode():
            _, kv = ar_prefill(engine.model, ids, head, tail)
            buffers = nar_kv_buffers(kv, len(ids), frames + 2)
            x = torch.randn(frames, 8, generator=torch.Generator("cpu").manual_seed(frames))
            got = velocity(engine.model, kv, len(ids), x, 0.3, buffers=buffers, head=head, tail=tail)
            want = velocity(engine.model, kv, len(ids), x, 0.3, buffers=buffers)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    assert counters["stats"]["unique_graphs"] - before == 3       # the head for prefills and velocities, the tail
