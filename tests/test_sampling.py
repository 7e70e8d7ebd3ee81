"""Sampler semantics, step by step (docs/model.md §4, §9.6)."""
from __future__ import annotations

import torch

from stages.config import BYTE_LAYOUT, Sampling
from stages.sampling import allowed_bias, cfg_combine, draw, step_scores, window_penalty

PLAIN = Sampling(1.0, 1.0, 640, 1.0, 50, 0, 100)


def test_window_penalty_is_a_power_of_the_count():
    scores = torch.tensor([[2.0, -2.0, 3.0, 1.0]])
    out = window_penalty(scores, [0, 0, 1, 1, 1], 2.0)
    assert out.tolist() == [[2.0 / 4, -2.0 * 8, 3.0, 1.0]]
    assert window_penalty(scores, [], 2.0) is scores


def test_only_the_last_window_of_generated_ids_is_penalised():
    s = Sampling(0.0, 1.0, 640, 2.0, 2, 0, 100)
    bias = allowed_bias("plan", BYTE_LAYOUT, 640, torch.float32, "cpu")
    logits = torch.zeros(1, 640)
    logits[0, 5], logits[0, 6] = 4.0, 3.0
    # 5 appeared three times but only once in the last two generated ids: 4/2 = 2 < 3 → argmax 6
    assert step_scores(logits, s, bias, 461, [5, 5, 9, 5], 4, False).argmax().item() == 6
    assert step_scores(logits, s, bias, 461, [5, 5, 9, 9], 4, False).argmax().item() == 5


def test_allowed_set_and_min_tokens_mask_the_end_id():
    bias = allowed_bias("semantic", BYTE_LAYOUT, 640, torch.float32, "cpu")
    finite = torch.isfinite(bias[0]).nonzero().flatten().tolist()
    assert finite == [465] + list(range(466, 530))
    logits = torch.zeros(1, 640)
    logits[0, 465] = 50.0
    s = Sampling(0.0, 1.0, 640, 1.0, 50, 3, 100)
    assert step_scores(logits, s, bias, 465, [], 2, False)[0, 465] == float("-inf")
    assert step_scores(logits, s, bias, 465, [], 3, False).argmax().item() == 465


def test_top_k_keeps_ties():
    logits = torch.tensor([[5.0, 4.0, 4.0, 4.0, 1.0]])
    bias = torch.zeros(1, 5)
    s = Sampling(1.0, 1.0, 2, 1.0, 50, 0, 100)
    out = step_scores(logits, s, bias, 0, [], 0, False)
    assert torch.isfinite(out).tolist() == [[True, True, True, True, False]]


def test_top_p_keeps_at_least_one_and_three_in_legacy_mode():
    logits = torch.tensor([[10.0, 0.0, 0.0, 0.0, 0.0]])
    bias = torch.zeros(1, 5)
    s = Sampling(1.0, 0.5, 5, 1.0, 50, 0, 100)
    assert torch.isfinite(step_scores(logits, s, bias, 0, [], 0, False)).sum() == 1
    legacy = step_scores(logits.bfloat16(), s, bias, 0, [], 0, True)
    assert legacy.dtype == torch.bfloat16 and torch.isfinite(legacy).sum() == 3


def test_full_and_melody_upcast_while_legacy_stays_in_the_logits_dtype():
    logits = torch.randn(1, 640).bfloat16()
    bias = allowed_bias("semantic", BYTE_LAYOUT, 640, torch.float32, "cpu")
    assert step_scores(logits, PLAIN, bias, 465, [], 0, False).dtype == torch.float32
    assert step_scores(logits, PLAIN, bias, 465, [], 0, True).dtype == torch.bfloat16


def test_draws_repeat_for_a_seed_and_use_the_whole_row():
    scores = torch.randn(1, 640)
    a = [draw(scores, PLAIN, g).item() for g in [torch.Generator().manual_seed(3)] for _ in range(20)]
    b = [draw(scores, PLAIN, g).item() for g in [torch.Generator().manual_seed(3)] for _ in range(20)]
    assert a == b and len(set(a)) > 1
    g = torch.Generator().manual_seed(3)
    assert draw(scores, PLAIN, g).item() == torch.multinomial(scores.softmax(-1), 1,
                                                             generator=torch.Generator().manual_seed(3)).item()


def test_temperature_zero_is_argmax_and_cfg_combines_in_the_logits_dtype():
    logits = torch.tensor([[0.0, 3.0, 1.0]])
    s = Sampling(0.0, 0.9, 1, 1.0, 50, 0, 100)
    assert draw(step_scores(logits, s, torch.zeros(1, 3), 0, [], 0, False), s, None).item() == 1
    c, u = torch.tensor([[1.0, 2.0]]).bfloat16(), torch.tensor([[0.5, 4.0]]).bfloat16()
    out = cfg_combine(c, u, 1.5)
    assert out.dtype == torch.bfloat16 and out.float().tolist() == [[1.25, 1.0]]
    assert cfg_combine(c, u, 1.0) is c
