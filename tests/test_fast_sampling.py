"""The batched sampler against the reference sampler: same kept set and probabilities, same distribution of draws,
draws independent of the batch around a row, and the window bookkeeping equal to counting the history afresh."""
from __future__ import annotations

import pytest
import torch

from stages import fast_sampling as fs
from stages import sampling
from stages.config import BYTE_LAYOUT, Sampling

VOCAB = BYTE_LAYOUT.min_vocab if hasattr(BYTE_LAYOUT, "min_vocab") else 640
PLAN = Sampling(0.7, 0.9, 30, 1.005, 100, 4, 4096)
SEMANTIC = Sampling(1.0, 0.95, 100, 1.2, 50, 4, 9000)


def table(rows: int, s: Sampling, phase: str, *, seed: int = 5, legacy: bool = False, cfg: float = 1.0,
          history: list[int] = ()) -> fs.SlotTable:
    """`rows` identical slots of one request (CFG pairs: slot 2i conditional, 2i+1 unconditional)."""
    t = fs.SlotTable.empty(rows, VOCAB, "cpu")
    lo, hi = sampling.allowed_range(phase, BYTE_LAYOUT)
    end = sampling.end_id(phase, BYTE_LAYOUT)
    values = fs.slot_values(s, phase=phase, seed=seed, lo=lo, hi=hi, end=end, legacy=legacy)
    for r in range(rows):
        if cfg != 1.0 and r % 2:
            t.set_slot(r, {"owner": r - 1, "partner": r, "is_cond": False, "active": True})
        else:
            partner = r + 1 if cfg != 1.0 else r
            t.set_slot(r, {**values, "cfg_scale": cfg, "use_cfg": cfg != 1.0, "partner": partner, "owner": r,
                           "is_cond": True, "active": True})
    for token in history:                      # the window, booked the way the engine books it
        fs.advance(fs.book(t, torch.full((rows,), token, dtype=torch.long)), t.owner, t.active)
    return t


def reference_probs(logits, s, phase, history, legacy=False, unconditional=None, cfg=1.0):
    combined = sampling.cfg_combine(logits, unconditional, cfg)
    bias = sampling.allowed_bias(phase, BYTE_LAYOUT, VOCAB, torch.float32, "cpu")
    scores = sampling.step_scores(combined, s, bias, sampling.end_id(phase, BYTE_LAYOUT), list(history),
                                  len(history), legacy)
    return scores.float().softmax(-1)[0]


def fast_probs(logits, t):
    ids, probs = fs.keep(*fs.best(logits, t), t)
    return torch.zeros(logits.shape[0], VOCAB).scatter_add_(1, ids, probs)


@pytest.mark.parametrize("phase, s", [("plan", PLAN), ("semantic", SEMANTIC)])
@pytest.mark.parametrize("history_len", [0, 3, 140])
def test_kept_set_and_probabilities_equal_the_reference(phase, s, history_len):
    g = torch.Generator().manual_seed(history_len)
    logits = torch.randn(1, VOCAB, generator=g) * 3
    lo, hi = sampling.allowed_range(phase, BYTE_LAYOUT)
    history = torch.randint(lo, hi, (history_len,), generator=g).tolist()
    history = [lo + (h % 7) for h in history]               # repeats, so the power-of-count penalty bites
    t = table(1, s, phase, history=history)
    got = fast_probs(logits, t)[0]
    want = reference_probs(logits, s, phase, history)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
    assert (got > 0).sum() == (want > 0).sum()


def test_cfg_legacy_and_min_tokens_follow_the_reference():
    g = torch.Generator().manual_seed(3)
    c, u = torch.randn(1, VOCAB, generator=g).bfloat16(), torch.randn(1, VOCAB, generator=g).bfloat16()
    s = Sampling(1.0, 0.3, 50, 1.1, 20, 8, 100)
    t = table(2, s, "semantic", cfg=1.5, legacy=True)
    got = fast_probs(torch.cat([c, u]), t)[0]
    # legacy rows keep ≥ 3 ids after top-p; the end id is masked before min_tokens
    assert (got > 0).sum() >= 3 and got[BYTE_LAYOUT.music_end] == 0
    ref = reference_probs(c, s, "semantic", [], legacy=True, unconditional=u, cfg=1.5)
    assert set(torch.nonzero(got).flatten().tolist()) == set(torch.nonzero(ref).flatten().tolist())
    torch.testing.assert_close(got, ref.float(), atol=2e-2, rtol=0)    # the reference keeps BF16 throughout
    # the legacy rule is what keeps them: at a top_p that keeps one id, a legacy row keeps three
    tight = Sampling(1.0, 0.01, 50, 1.1, 20, 8, 100)
    kept = {legacy: int((fast_probs(torch.cat([c, u]), table(2, tight, "semantic", cfg=1.5, legacy=legacy))[0] > 0)
                        .sum()) for legacy in (False, True)}
    assert kept == {False: 1, True: 3}


def draws(logits, s, phase, n, seed):
    """n draws of one request's first step under n different step counters (vectorised as n rows)."""
    t = table(1, s, phase, seed=seed)
    rows = fs.SlotTable(*[x.expand(n, *x.shape[1:]).clone() for x in vars(t).values()])
    rows.count.copy_(torch.arange(n))
    rows.min_tokens.zero_()
    rows.max_tokens.fill_(10 ** 9)
    return fs.draw(logits.expand(n, -1), rows)


def tv(a, b):
    return 0.5 * (a - b).abs().sum().item()


@pytest.mark.slow      # 10⁵ draws per phase
@pytest.mark.parametrize("phase, s", [("plan", PLAN), ("semantic", SEMANTIC)])
def test_draws_follow_the_reference_distribution(phase, s):
    """≥ 10⁵ draws each. Expected sampling noise is ~0.005–0.01 in total variation; a sampler 0.05 off in
    temperature is ≥ 0.03 away, so a 0.02 bound cannot pass by accident and does catch a wrong sampler."""
    n = 100_000
    g = torch.Generator().manual_seed(11)
    logits = torch.randn(1, VOCAB, generator=g) * 2
    want = reference_probs(logits, s, phase, [])
    fast = torch.bincount(draws(logits, s, phase, n, seed=1), minlength=VOCAB).float() / n
    ref_draws = torch.multinomial(want, n, replacement=True, generator=torch.Generator().manual_seed(2))
    ref = torch.bincount(ref_draws, minlength=VOCAB).float() / n
    assert tv(fast, want) < 0.02 and tv(fast, ref) < 0.02
    if phase == "semantic":
        return
    from dataclasses import replace

    hotter = replace(s, temperature=s.temperature + 0.05)
    off = torch.bincount(draws(logits, hotter, phase, n, seed=1), minlength=VOCAB).float() / n
    assert tv(off, ref) > 0.03


def test_a_rows_draw_does_not_depend_on_its_neighbours_or_slot():
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(6, VOCAB, generator=g)
    alone = fs.draw(logits[2:3], table(1, SEMANTIC, "semantic", seed=9))
    t = table(6, SEMANTIC, "semantic", seed=9)
    for r in (0, 1, 3, 4, 5):                   # other requests around it
        t.key[r] = fs.request_key(100 + r, "plan")
    assert fs.draw(logits, t)[2] == alone[0]
    t.key[2], t.key[5] = t.key[5].clone(), t.key[2].clone()     # the same request in slot 5 instead
    assert fs.draw(torch.roll(logits, 3, 0), t)[5] == alone[0]


def test_greedy_rows_take_the_argmax():
    logits = torch.randn(1, VOCAB, generator=torch.Generator().manual_seed(6))
    s = Sampling(0.0, 1.0, 1, 1.0, 1, 0, 10)
    drawn = fs.draw(logits, table(1, s, "semantic"))
    lo, hi = sampling.allowed_range("semantic", BYTE_LAYOUT)
    allowed = torch.cat([logits[0, lo:hi], logits[0, BYTE_LAYOUT.music_end:BYTE_LAYOUT.music_end + 1]])
    assert logits[0, drawn[0]] == allowed.max()


def test_window_counts_equal_counting_the_history_afresh():
    s = Sampling(1.0, 1.0, 5, 1.3, 7, 0, 1000)
    ids = torch.randint(466, 470, (40,), generator=torch.Generator().manual_seed(8)).tolist()
    t = table(1, s, "semantic", history=ids)
    want = torch.zeros(VOCAB).index_add_(0, torch.tensor(ids[-7:]), torch.ones(7))
    assert torch.equal(t.counts[0], want) and t.count[0] == 40


def test_the_hash_gives_uniform_variates():
    u = fs.uniforms(torch.tensor([fs.request_key(1, "plan")]), torch.tensor([0]), torch.arange(200_000)[None])[0]
    assert 0 < u.min() and u.max() < 1
    assert abs(u.mean().item() - 0.5) < 0.003
    hist = torch.histc(u, bins=20, min=0, max=1) / u.numel()
    assert (hist - 0.05).abs().max() < 0.003


def test_settings_the_fast_sampler_cannot_honour_are_refused():
    from stages.config import ConfigError

    with pytest.raises(ConfigError, match="top_k must be <= 256"):
        fs.check(Sampling(1.0, 0.9, 300, 1.0, 10, 0, 10), "track 1 sampling.plan")
    with pytest.raises(ConfigError, match="penalty_window"):
        fs.check(Sampling(1.0, 0.9, 30, 1.0, 300, 0, 10), "track 1 sampling.plan")
