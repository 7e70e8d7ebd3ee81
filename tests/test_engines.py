"""Parity of the production forms against the simple ones (docs/model.md §9.1, §9.4), on the tiny random checkpoint."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from stages.ar import AREngine
from stages.transformer import AR, HEAD, NAR, ar_prefill, dense_velocity, logits, velocity
from stages.weights import load_model


@pytest.fixture(scope="module")
def model(tiny_ckpt_dir, tiny_cfg):
    return load_model(tiny_ckpt_dir / "model", tiny_cfg, {AR, HEAD, NAR}, dtype=torch.float32)


def full_logits(model, ids):
    hidden, _ = ar_prefill(model, torch.tensor(ids))
    return logits(model, hidden)[0]


@pytest.mark.parametrize("raw", [20.0, 0.0, -2.3])
@pytest.mark.parametrize("cond_end", [0, 5])
def test_cached_velocity_equals_dense_masked_forward(model, tiny_cfg, raw, cond_end):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, tiny_cfg.model.vocab_size, (23,), generator=g)
    x = torch.randn(9, tiny_cfg.model.latent_dim, generator=g)
    with torch.inference_mode():
        _, prefix_kv = ar_prefill(model, ids)
        cached = velocity(model, prefix_kv, len(ids), x, raw, cond_end)
        dense = dense_velocity(model, ids, x, raw, cond_end)
    assert cached.shape == (9, tiny_cfg.model.latent_dim)
    torch.testing.assert_close(cached, dense, atol=2e-6, rtol=0)


def test_cond_end_changes_what_the_nar_rows_see(model, tiny_cfg):
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, tiny_cfg.model.vocab_size, (20,), generator=g)
    x = torch.randn(4, tiny_cfg.model.latent_dim, generator=g)
    with torch.inference_mode():
        _, kv = ar_prefill(model, ids)
        assert not torch.allclose(velocity(model, kv, 20, x, 0.0, 0), velocity(model, kv, 20, x, 0.0, 6))
        torch.testing.assert_close(velocity(model, kv, 20, x, 0.0, 0), velocity(model, kv, 20, x, 0.0, 20))


@torch.inference_mode()
@pytest.mark.parametrize("chunk", [None, 4])
def test_prefill_then_decode_equals_full_forward(model, chunk):
    engine = AREngine(model, _layout(model), slots=2, kv_tokens=1024)
    prompt, fed = [256, 5, 9, 200, 33, 77, 1], [12, 460, 99, 3, 250, 17, 8, 8, 8, 120, 45, 301, 6, 2]
    steps = [engine.prefill(0, prompt, chunk=chunk)]
    for token in fed:
        steps.append(engine.decode({0: token})[0])
    reference = full_logits(model, prompt + fed)[len(prompt) - 1:]
    torch.testing.assert_close(torch.stack(steps), reference, atol=1e-5, rtol=0)


@torch.inference_mode()
def test_batch_of_two_prompts_of_different_lengths(model):
    engine = AREngine(model, _layout(model), slots=3, kv_tokens=1536)
    a, b = [256, 1, 2, 3], [256, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49]
    fa, fb = [7, 8, 9, 10, 11, 12], [100, 101, 102, 103, 104, 105]
    got_a, got_b = [engine.prefill(0, a)], [engine.prefill(2, b)]
    for ta, tb in zip(fa, fb):
        out = engine.decode({0: ta, 2: tb})
        got_a.append(out[0])
        got_b.append(out[2])
    torch.testing.assert_close(torch.stack(got_a), full_logits(model, a + fa)[len(a) - 1:], atol=1e-5, rtol=0)
    torch.testing.assert_close(torch.stack(got_b), full_logits(model, b + fb)[len(b) - 1:], atol=1e-5, rtol=0)


@torch.inference_mode()
@pytest.mark.parametrize("window, legacy", [(50, False), (3, True)])
def test_cfg_pair_with_unequal_prefixes_equals_two_single_runs(model, tiny_cfg, window, legacy):
    """The engine's CFG draws = drawing by hand from two independent full forwards, with a list history."""
    from stages import sampling
    from stages.ar import ARRequest
    from stages.config import Sampling

    s = Sampling(1.0, 0.95, 100, 1.2, window, 4, 12)
    pos, neg = tuple([256] + list(range(30, 52)) + [464]), (256, 71, 72, 464)
    pair = ARRequest("x", "semantic", pos, s, seed=7, negative=neg, cfg_scale=1.5, legacy=legacy)
    engine = AREngine(model, _layout(model), slots=2, kv_tokens=1024, sampler="exact")
    (result,) = engine.generate([pair])
    layout = _layout(model)
    g = torch.Generator().manual_seed(7)
    bias = sampling.allowed_bias("semantic", layout, tiny_cfg.model.vocab_size, torch.float32, "cpu")
    history: list[int] = []
    for step, token in enumerate(result.ids.tolist()):
        c = full_logits(model, list(pos) + history)[-1:]
        u = full_logits(model, list(neg) + history)[-1:]
        scores = sampling.step_scores(sampling.cfg_combine(c, u, 1.5), s, bias, layout.music_end, history, step,
                                      legacy)
        assert sampling.draw(scores, s, g).item() == token
        history.append(token)
    assert len(history) == 12 and result.truncated


def _requests():
    from stages.ar import ARRequest
    from stages.config import Sampling

    def req(key, n, seed, cfg=1.0):
        s = Sampling(1.0, 0.95, 100, 1.2, 50, n, n)
        prefix = tuple([256] + list(range(40, 40 + 3 * seed)) + [464])
        return ARRequest(key, "semantic", prefix, s, seed, negative=(256, 464) if cfg != 1 else None, cfg_scale=cfg)

    return [req("a", 20, 1), req("b", 7, 2, cfg=1.3), req("c", 15, 3), req("d", 9, 4)]


@torch.inference_mode()
@pytest.mark.parametrize("sampler", ["fast", "exact"])
def test_continuous_batching_gives_each_request_its_solo_result(model, sampler):
    """Requests joining and leaving a shared batch draw exactly what they draw alone, in any slot."""
    requests = _requests()
    together = {r.key: r for r in AREngine(model, _layout(model), slots=8, kv_tokens=4096,
                                           sampler=sampler).generate(requests)}
    assert together["a"].mean_batch > 1
    for r in requests:
        engine = AREngine(model, _layout(model), slots=8, kv_tokens=4096, sampler=sampler)
        engine.free_slots.rotate(3)                      # another slot than in the shared run
        (alone,) = engine.generate([r])
        assert np.array_equal(alone.ids, together[r.key].ids), r.key
        assert len(alone.ids) == r.sampling.max_tokens and alone.truncated


@torch.inference_mode()
def test_fast_engine_stops_on_the_end_id_inside_a_block(model):
    """With the end id allowed from the start, requests stop at different steps inside a 16-step block; each
    result is exactly its prefix of the same request run with a longer min_tokens, up to the end id."""
    from dataclasses import replace

    requests = [replace(r, sampling=replace(r.sampling, min_tokens=0, max_tokens=60)) for r in _requests()]
    engine = AREngine(model, _layout(model), slots=8, kv_tokens=4096, block=16)
    results = {r.key: r for r in engine.generate(requests)}
    assert not engine.live and sorted(engine.free_slots) == list(range(8)) and len(engine.kv.free) == engine.kv.pages - 1
    for r in requests:
        got = results[r.key]
        assert 0 <= len(got.ids) <= 60
        assert (got.truncated and len(got.ids) == 60) or not got.truncated
        assert _layout(model).music_end not in got.ids.tolist()


@torch.inference_mode()
def test_batched_forward_equals_per_row_forwards(model):
    """One step of several slots at different lengths = each slot's own step, row by row (same engine shape)."""
    prompts = {0: [256, 1, 2, 3], 3: [256] + list(range(60, 90)), 5: [256, 7]}
    together = AREngine(model, _layout(model), slots=6, kv_tokens=6 * 512)
    for slot, p in prompts.items():
        together.prefill(slot, p)
    out = together.decode({slot: 100 + slot for slot in prompts})
    for slot, p in prompts.items():
        alone = AREngine(model, _layout(model), slots=6, kv_tokens=6 * 512)
        alone.prefill(slot, p)
        assert torch.equal(alone.decode({slot: 100 + slot})[slot], out[slot])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_rope_table_gives_what_rope_tables_computes(dtype):
    """The engine gathers each step's cos and sin from `rope_table` (computed once, `AREngine.rope`): the same bits
    as computing them for the step's positions, for any positions up to the context (yue2-3b's shapes)."""
    from pathlib import Path

    from stages.config import from_toml
    from stages.transformer import rope_table, rope_tables

    cfg = from_toml(Path(__file__).parents[1] / "configs" / "models" / "yue2-3b.toml").model
    table = rope_table(cfg, dtype)
    positions = torch.cat([torch.tensor([0, 1, cfg.context]), torch.randint(0, cfg.context + 1, (61,))])
    assert all(torch.equal(a, b) for a, b in zip(table[:, positions], rope_tables(positions, cfg, dtype)))
    run = rope_tables(torch.arange(4093, 4500), cfg, dtype)       # a prefill's run of positions
    assert all(torch.equal(a, b) for a, b in zip(table[:, 4093:4500], run))


def test_a_step_reads_only_the_spans_of_the_vocabulary_its_phases_draw_from():
    """Plan-only steps read the lm_head's text span (82 % of yue2-3b's vocabulary), semantic-only steps its codec
    span (18 %), each with its phase's end id and widened to a multiple of 64 ids; a step of both reads the two."""
    from pathlib import Path

    from stages.vocab_spans import for_phases
    from stages.config import BYTE_LAYOUT, from_toml
    from stages.sampling import allowed_range, end_id

    cfg = from_toml(Path(__file__).parents[1] / "configs" / "models" / "yue2-3b.toml")
    for layout, vocab in ((cfg.tokens, cfg.model.vocab_size), (BYTE_LAYOUT, 640)):
        variants = for_phases(layout, vocab)
        for phase in ("plan", "semantic"):
            (a, b), = variants[frozenset({phase})].spans
            lo, hi = allowed_range(phase, layout)
            assert a <= lo < hi <= b and a <= end_id(phase, layout) < b and a in (0, end_id(phase, layout))
            assert (b - a) % 64 == 0 and b <= vocab
        assert variants[frozenset({"plan", "semantic"})].spans == (variants[frozenset({"plan"})].spans
                                                                   + variants[frozenset({"semantic"})].spans)
    (_, plan), = for_phases(cfg.tokens, cfg.model.vocab_size)[frozenset({"plan"})].spans
    (a, b), = for_phases(cfg.tokens, cfg.model.vocab_size)[frozenset({"semantic"})].spans
    assert (plan, a, b) == (151872, 151852, 184684) and round(plan / 184704, 3) == 0.822


def _layout(model):
    from stages.config import BYTE_LAYOUT

    return BYTE_LAYOUT


def test_the_layer_chain_takes_only_shapes_whose_tiles_fill_whole_weight_slots(monkeypatch):
    """A 32-row weight slot holds two k-tiles of a 16-row tile: a product whose K is one k-tile would leave the
    kernel's two rings out of step (a hang), so `supported` refuses such a shape and the op takes the reference
    path. Checked on the CPU as if on Hopper with Gluon: a 128-wide model is refused for that rule alone, a
    256-wide one and yue2-3b are taken."""
    from stages import layer_chain

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(layer_chain, "_gluon", lambda: True)
    hopper = torch.device("cuda")
    assert layer_chain.supported(hopper, 2048, 6144, 4096) and layer_chain.supported(hopper, 256, 512, 512)
    assert not layer_chain.supported(hopper, 128, 256, 256)


def test_the_layer_chain_takes_only_shapes_with_at_least_16_norm_partial_sums(monkeypatch):
    """The signal warp adds the norms' partial sums (one per 16-row output tile) 16 at a time: a 128-wide model has
    8, so its factor would be rsqrt(eps). With 64-wide k-tiles its slots fill, so this rule alone refuses it."""
    from dataclasses import replace

    from stages import layer_chain

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(layer_chain, "_gluon", lambda: True)
    hopper, t = torch.device("cuda"), replace(layer_chain.TILING, bk=64)
    assert layer_chain.supported(hopper, 256, 512, 512, t) and not layer_chain.supported(hopper, 128, 256, 256, t)


@torch.inference_mode()
def test_layer_chain_pairs_gate_and_up_rows():
    """The chain reads gate/up with its rows paired (gate n, then up n): pair_rows and unpair_rows are inverses,
    and the reference op over paired rows is the separate products over the plain [gate; up] matrix."""
    from stages import layer_chain, skinny_gemm

    g = torch.Generator().manual_seed(0)
    h, i, q, eps = 64, 96, 48, 1e-6
    gate_up = torch.randn(2 * i, h, generator=g)
    paired = layer_chain.pair_rows(gate_up)
    assert torch.equal(paired[0], gate_up[0]) and torch.equal(paired[1], gate_up[i])
    assert torch.equal(paired[5], gate_up[i + 2]) and torch.equal(layer_chain.unpair_rows(paired), gate_up)
    attn, x = torch.randn(3, h, generator=g), torch.randn(3, h, generator=g)
    o, down, qkv = torch.randn(h, h, generator=g), torch.randn(h, i, generator=g), torch.randn(q, h, generator=g)
    out, nxt = layer_chain.reference(attn, x, o, paired, down, qkv, eps)
    mid = skinny_gemm.reference(attn, o, "add", x)
    want = skinny_gemm.reference(skinny_gemm.reference(mid, gate_up, "silu_mul", None, eps), down, "add", mid)
    assert torch.equal(out, want)
    assert torch.equal(nxt, skinny_gemm.reference(want, qkv, "none", None, eps))


def test_layer_chain_step_draws_what_the_separate_products_draw(model):
    """The step with each layer's products after attention as one op (layer_chain.py; on the CPU its reference)
    draws exactly the ids of the step that runs them as separate ops, alone and batched."""
    requests = _requests()
    engines = {chain: AREngine(model, _layout(model), slots=8, kv_tokens=4096, chain=chain) for chain in (True, False)}
    assert engines[True].chain and not engines[False].chain
    results = {chain: {r.key: r for r in e.generate(requests)} for chain, e in engines.items()}
    for r in requests:
        assert np.array_equal(results[True][r.key].ids, results[False][r.key].ids), r.key
