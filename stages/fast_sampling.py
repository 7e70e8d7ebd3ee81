"""The batched sampler of the AR engine's default ("fast") mode: every slot of a step sampled at once, on the device.

Same maths as the reference sampler (sampling.py), in the same order — CFG combine, allowed ids,
min_tokens, window penalty (power of the count), temperature, top-k (ties survive), top-p — with two differences
that make it fast and batch-invariant:
- top-k runs first on a candidate set of the `CANDIDATES` best ids of each row (no full-vocab sort), in a canonical
  order (score descending, id ascending), and top-p works on those candidates only. So top_k must be at most
  CANDIDATES (larger values need the reference sampler, `--exact`). Ties at the k-th score survive, as in the
  reference, as long as they fit in the candidate set.
- the draw is an exponential race over the kept candidates, argmax(p_i / E_i), where E_i = −log U_i and U_i is a
  counter-based hash of (seed, phase, step, id). A row's draw never depends on which rows share the batch, on the
  slot it sits in, or on the device's RNG state. It follows the same distribution as a multinomial draw (tested),
  but not the same stream as torch.multinomial with a seeded generator: the reference stream is `--exact`.
Scores are FP32 for every row (the reference keeps legacy cot-off rows in BF16; legacy rows keep its "top-p keeps
three" rule). Knows nothing about models or caches.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .config import ConfigError, Sampling

CANDIDATES = 256     # the widest top_k the fast sampler takes
WINDOW_MAX = 256     # the longest repetition-penalty window it takes
MASK32 = 0xFFFFFFFF
PHASE_SALT = {"plan": 0x51ED27, "semantic": 0x2C1B3C6D}


def hash32(x):
    """A 32-bit integer mixer (lowbias32) on Python ints or int64 tensors; equal on every device."""
    x = x & MASK32
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & MASK32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & MASK32
    return x ^ (x >> 16)


def request_key(seed: int, phase: str) -> int:
    """The counter key of one request's stage: (seed, phase) → 32 bits."""
    return hash32(hash32(seed & MASK32) ^ hash32(((seed >> 32) & MASK32) ^ PHASE_SALT[phase]))


def uniforms(key: torch.Tensor, step: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """U(0, 1) in FP32, one per (row key, row step, id): key, step [R] int64; ids [R, C] int64 → [R, C]."""
    row = hash32(key ^ hash32(step + 0x9E3779B9))
    bits = hash32(hash32(row[:, None] ^ hash32(ids ^ 0x632BE5AB)) + 0x85EBCA6B)
    return ((bits >> 8).float() + 0.5) * (1.0 / (1 << 24))


def check(s: Sampling, where: str) -> None:
    """Settings the batched sampler cannot honour exactly are refused (the reference sampler, --exact, takes them)."""
    if s.temperature != 0 and s.top_k > CANDIDATES:
        raise ConfigError(f"{where}: top_k must be <= {CANDIDATES} for the batched sampler, got {s.top_k} "
                          f"(--exact runs the reference sampler, which takes any top_k)")
    if s.penalty_window > WINDOW_MAX:
        raise ConfigError(f"{where}: penalty_window must be <= {WINDOW_MAX} for the batched sampler, got "
                          f"{s.penalty_window} (--exact runs the reference sampler, which takes any window)")


@dataclass
class SlotTable:
    """Every slot's settings and sampling state as device tensors [S] (the rows of a step)."""
    temperature: torch.Tensor      # f32
    top_p: torch.Tensor            # f32
    top_k: torch.Tensor            # int64
    penalty: torch.Tensor          # f32
    window: torch.Tensor           # int64, ≥ 1
    min_tokens: torch.Tensor       # int64
    max_tokens: torch.Tensor       # int64
    min_keep: torch.Tensor         # int64: top-p always keeps this many (1, or 3 for legacy rows)
    end: torch.Tensor              # int64: the stage's end id
    lo: torch.Tensor               # int64: allowed ids are [lo, hi) and `end`
    hi: torch.Tensor
    cfg_scale: torch.Tensor        # f32
    use_cfg: torch.Tensor          # bool
    partner: torch.Tensor          # int64: the unconditional slot of a CFG pair (the slot itself otherwise)
    owner: torch.Tensor            # int64: the conditional slot whose draw this slot is fed (itself if conditional)
    is_cond: torch.Tensor          # bool: draws for its request
    key: torch.Tensor              # int64: request_key(seed, phase)
    count: torch.Tensor            # int64: ids emitted so far in this stage (the step counter of the RNG)
    active: torch.Tensor           # bool
    ring: torch.Tensor             # int64 [S, WINDOW_MAX]: the last `window` emitted ids
    counts: torch.Tensor           # f32 [S, vocab]: occurrences of each id in the window

    @classmethod
    def empty(cls, slots: int, vocab: int, device) -> "SlotTable":
        def z(dtype):
            return torch.zeros(slots, dtype=dtype, device=device)
        own = torch.arange(slots, device=device)
        return cls(z(torch.float32) + 1, z(torch.float32) + 1, z(torch.long) + 1, z(torch.float32) + 1,
                   z(torch.long) + 1, z(torch.long), z(torch.long), z(torch.long) + 1, z(torch.long), z(torch.long),
                   z(torch.long), z(torch.float32) + 1, z(torch.bool), own.clone(), own.clone(), z(torch.bool),
                   z(torch.long), z(torch.long), z(torch.bool),
                   torch.zeros(slots, WINDOW_MAX, dtype=torch.long, device=device),
                   torch.zeros(slots, vocab, dtype=torch.float32, device=device))

    def set_slot(self, slot: int, values: dict) -> None:
        """Write one slot's row (values: field → Python scalar); also clears its window."""
        for name, value in values.items():
            getattr(self, name)[slot] = value
        self.ring[slot].zero_()
        self.counts[slot].zero_()


def scores(logits: torch.Tensor, t: SlotTable, first: int = 0) -> torch.Tensor:
    """logits [S, W] (model dtype) of the ids first … first + W − 1 → FP32 scores after CFG, allowed ids,
    min_tokens, penalty and temperature. A span narrower than the vocabulary (`vocab_spans.window`) must hold every
    id its rows may emit and start at 0 or at their end id, which is never booked into a window."""
    c = logits
    u = logits.index_select(0, t.partner)
    mixed = (u.float() + (t.cfg_scale[:, None] * (c - u).float()).to(c.dtype).float()).to(c.dtype)
    x = torch.where(t.use_cfg[:, None], mixed, c).float()
    ids = torch.arange(first, first + x.shape[1], device=x.device)[None]
    end = ids == t.end[:, None]
    allowed = ((ids >= t.lo[:, None]) & (ids < t.hi[:, None])) | end
    allowed = allowed & ~(end & (t.count < t.min_tokens)[:, None])
    x = x.masked_fill(~allowed, float("-inf"))
    # ids never seen have count 0: factor 1, unchanged; an empty ring's zeros fall on the span's first id
    seen = (t.ring - first).clamp(0, x.shape[1] - 1)
    s = x.gather(1, seen)
    factor = t.penalty[:, None] ** t.counts.gather(1, t.ring)
    x = x.scatter(1, seen, torch.where(s < 0, s * factor, s / factor))
    greedy = t.temperature == 0
    return x / torch.where(greedy, torch.ones_like(t.temperature), t.temperature)[:, None]


def top(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores [S, W] → the `CANDIDATES` best (values, column) of each row, in no particular order; a span of fewer
    columns is padded with −∞ at its first column (never drawn: probability 0)."""
    values, ids = x.topk(min(CANDIDATES, x.shape[1]), dim=1, sorted=False)
    if values.shape[1] < CANDIDATES:
        pad = CANDIDATES - values.shape[1]
        values = torch.cat([values, values.new_full((values.shape[0], pad), float("-inf"))], dim=1)
        ids = torch.cat([ids, ids.new_zeros(ids.shape[0], pad)], dim=1)
    return values, ids


def canonical_first(x: torch.Tensor, k: int) -> torch.Tensor:
    """The columns of the first k scores of each row of x [S, W] in the canonical order (score descending, column
    ascending) → [S, k] int64: what `best` selects on CUDA, and the reference its kernels are tested against."""
    bits = x.float().contiguous().view(torch.int32)
    ordered = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits).long()     # the scores' order as integers
    col = torch.arange(x.shape[1], device=x.device)
    packed = (ordered << 32) | (MASK32 - col)                              # no two equal: ties by column
    return MASK32 - (packed.topk(k, dim=1).values & MASK32)


def reference_best(logits: torch.Tensor, t: SlotTable, first: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [S, W] of ids first … → each row's candidates (`top` of its `scores`), ids in the vocabulary's
    numbering, for every slot: what `best` does off CUDA (and what torch.compile fuses there)."""
    values, ids = top(scores(logits, t, first))
    return values, ids + first


def best(logits: torch.Tensor, t: SlotTable, first: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """`reference_best`; on CUDA two Triton kernels (_topk_triton.py) for the slots that draw this step (active and
    conditional), whose candidates are then exactly the first `CANDIDATES` of the span in the canonical order. The
    other slots get −∞ candidates (`pick` books nothing for them)."""
    if logits.is_cuda and logits.shape[1] >= CANDIDATES:
        from ._topk_triton import launch

        return launch(logits, t, first, CANDIDATES)
    return reference_best(logits, t, first)


def keep(values: torch.Tensor, ids: torch.Tensor, t: SlotTable) -> tuple[torch.Tensor, torch.Tensor]:
    """A row's candidates → (ids [S, C], probabilities [S, C]) after top-k and top-p, in canonical order."""
    c = values.shape[1]
    ids, by_id = ids.sort(dim=1)                          # canonical order: score descending, then id ascending
    values = values.gather(1, by_id)
    order = values.argsort(dim=1, descending=True, stable=True)
    values, ids = values.gather(1, order), ids.gather(1, order)
    threshold = values.gather(1, (t.top_k.clamp(1, c) - 1)[:, None])
    values = values.masked_fill(values < threshold, float("-inf"))
    probs = values.softmax(dim=1)
    rank = torch.arange(c, device=values.device)[None]
    removed = (probs.cumsum(dim=1) - probs > t.top_p[:, None]) & (rank >= t.min_keep[:, None])
    removed = removed & (t.top_p < 1)[:, None]
    return ids, values.masked_fill(removed, float("-inf")).softmax(dim=1)


def race(ids: torch.Tensor, probs: torch.Tensor, t: SlotTable) -> torch.Tensor:
    """The exponential race over the kept candidates (argmax at temperature 0) → one id per slot [S] int64."""
    race = probs / -torch.log(uniforms(t.key, t.count, ids))
    drawn = ids.gather(1, race.argmax(dim=1, keepdim=True))[:, 0]
    return torch.where(t.temperature == 0, ids[:, 0], drawn)    # the best score, lowest id among ties


def draw(logits: torch.Tensor, t: SlotTable) -> torch.Tensor:
    """One id per slot [S] int64 from whole-vocabulary logits, without booking: `best`, `keep` and `race`, the
    maths the engine's step runs (there through `pick`)."""
    return race(*keep(*best(logits, t), t), t)


def book(t: SlotTable, drawn: torch.Tensor) -> torch.Tensor:
    """Book one step's draws into each slot's own row of the table (in place) → whether each conditional slot
    goes on (bool [S]; unconditional slots: False).

    An emitted id that is not the end id joins the request's window; a request stops at its end id or once it has
    `max_tokens` ids.
    """
    emit = t.active & t.is_cond
    grow = emit & (drawn != t.end)
    slot_in_ring = (t.count % t.window)[:, None]
    evicted = t.ring.gather(1, slot_in_ring)
    full = (grow & (t.count >= t.window)).float()[:, None]
    t.counts.scatter_add_(1, evicted, -full)
    t.ring.scatter_(1, slot_in_ring, torch.where(grow[:, None], drawn[:, None], evicted))
    t.counts.scatter_add_(1, drawn[:, None], grow.float()[:, None])
    t.count.add_(grow.long())
    return grow & (t.count < t.max_tokens)


def advance(go: torch.Tensor, owner: torch.Tensor, active: torch.Tensor) -> None:
    """The slots that go on after a step (`go` of `book` or `pick`): each slot follows its owner (a SlotTable's
    `owner`), so an unconditional slot goes on or stops with its conditional one. In place, into `active`."""
    torch.index_select(go, 0, owner, out=active)


def pick(values: torch.Tensor, ids: torch.Tensor, t: SlotTable, log: torch.Tensor
         ) -> tuple[torch.Tensor, torch.Tensor]:
    """From each slot's candidates (`top`): keep, race and book in one go → (drawn [S], goes on [S]); `log` [S]
    gets the drawn id of every emitting slot and −1 elsewhere. The slots' `active` is left to the caller (an
    unconditional slot follows its conditional one). On CUDA one Triton kernel (_sampler_triton.py), else
    `keep`, `race` and `book` — the same maths."""
    if values.is_cuda and values.shape[1] == CANDIDATES:
        from ._sampler_triton import launch

        return launch(values, ids, t, log)
    drawn = race(*keep(values, ids, t), t)
    log.copy_(torch.where(t.active & t.is_cond, drawn, torch.full_like(drawn, -1)))
    return drawn, book(t, drawn)


def slot_values(s: Sampling, *, phase: str, seed: int, lo: int, hi: int, end: int, legacy: bool) -> dict:
    """A request's settings as a SlotTable row."""
    return {"temperature": s.temperature, "top_p": s.top_p, "top_k": min(s.top_k, CANDIDATES),
            "penalty": s.repetition_penalty, "window": s.penalty_window, "min_tokens": s.min_tokens,
            "max_tokens": s.max_tokens, "min_keep": 3 if legacy else 1, "end": end, "lo": lo, "hi": hi,
            "key": request_key(seed, phase), "count": 0}
