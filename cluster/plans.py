"""The plan the planner hands to the farm: which stage runs where, with what share and batch, and why.

Responsible for: the frozen records of a plan and their text / JSON forms. Not responsible for: making plans
(placement.py). The farm reads `Plan.workers` to start one engine per (stage, card); `Worker.uuid` and
`Worker.index` pin it (CUDA_VISIBLE_DEVICES / NVML), `batch` sizes its KV slots, `decode_core` its VAE tile.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from .tables import table


@dataclass(frozen=True, kw_only=True)
class Worker:
    stage: str
    card: str                 # "<node>/<index>" ("<node>/cpu" for the CPU fallback)
    node: str
    index: int                # physical index on the node; -1 = CPU
    uuid: str
    model: str                # GPU model (catalogue name) or "cpu"
    share: float              # planned steady-state fraction of the card's time (0..1)
    batch: int                # tracks decoded at once (AR KV slots); 1 for acoustic / decode
    decode_core: int | None   # VAE tile core frames (decode only)
    card_seconds: float       # card time per track at this batch on the full card
    latency_s: float          # first track's time through this stage on the full card

    @property
    def tracks_per_hour(self) -> float:
        return 3600.0 * self.share / self.card_seconds


@dataclass(frozen=True, kw_only=True)
class CardUse:
    card: str
    node: str
    index: int
    uuid: str
    model: str
    stages: tuple[str, ...]
    memory_gib: float
    budget_gib: float
    memory: str               # breakdown sentence


@dataclass(frozen=True)
class StageSummary:
    stage: str
    runnable: bool
    workers: int
    capacity_tracks_s: float  # at the planned shares
    latency_s: float | None   # first track through this stage
    note: str = ""


@dataclass(frozen=True)
class Refusal:
    stage: str
    card: str                 # a class of identical cards: "<model> x<count> (<first card>)"
    reason: str


@dataclass(frozen=True, kw_only=True)
class Plan:
    tracks: int
    audio_seconds: float
    model: str
    method: str               # "exact", "flow" or "cpu"
    assignments_tried: int
    workers: tuple[Worker, ...]
    cards: tuple[CardUse, ...]
    stages: tuple[StageSummary, ...]
    bottleneck: str | None
    makespan_s: float | None  # None when some stage cannot run anywhere
    throughput_tracks_s: float
    one_track_s: float | None     # the pipeline's fill: the first wave through every stage (estimate.py, L_s)
    unrunnable: tuple[str, ...]
    refusals: tuple[Refusal, ...]
    reasons: tuple[str, ...]
    reserve_gib: float
    shared_process: bool
    ar_window: int | None = None   # most tracks inside the AR stages at once (dispatch.py); None: no cap
    ar_format: str = "bf16"        # the AR step's weights on every AR card (workload.AR_FORMAT_BYTES)
    kv_format: str = "bf16"        # the AR engines' KV cache
    forecast_s: float | None = None   # the simulator's makespan for this plan (placement.py); None: not simulated

    @property
    def expected_s(self) -> float | None:
        """The makespan the planner goes by: the simulator's forecast where it ran, else the steady-state estimate
        (`makespan_s`), which does not see batches thin out or a card time-slice its stages."""
        return self.forecast_s if self.forecast_s is not None else self.makespan_s

    @property
    def runnable(self) -> bool:
        return not self.unrunnable

    def workers_for(self, stage: str) -> tuple[Worker, ...]:
        return tuple(w for w in self.workers if w.stage == stage)

    def cards_for(self, stage: str) -> tuple[str, ...]:
        return tuple(w.card for w in self.workers_for(stage))

    def to_dict(self) -> dict:
        data = asdict(self)
        data["runnable"] = self.runnable
        for w, raw in zip(self.workers, data["workers"]):
            raw["tracks_per_hour"] = w.tracks_per_hour
        return data

    def describe(self) -> str:
        if self.makespan_s is None:
            span = "cannot run"
        elif self.forecast_s is None:
            span = f"{self.makespan_s:,.1f} s (steady-state estimate)"
        else:
            span = f"{self.forecast_s:,.1f} s (simulated; steady-state estimate {self.makespan_s:,.1f} s)"
        lines = [f"Plan: {self.tracks} track(s), {self.audio_seconds / 60:.1f} min of audio, model {self.model}; "
                 f"method {self.method} ({self.assignments_tried} assignment(s) evaluated); makespan {span}"]
        if self.bottleneck:
            lines.append(f"bottleneck {self.bottleneck}; steady {self.throughput_tracks_s * 3600:,.1f} tracks/h; "
                         f"first wave through every stage {self.one_track_s:,.1f} s"
                         + (f"; at most {self.ar_window} tracks in AR at once" if self.ar_window else "")
                         + (f"; AR weights {self.ar_format}, KV cache {self.kv_format}"
                            if (self.ar_format, self.kv_format) != ("bf16", "bf16") else ""))
        workers = [[w.stage, w.card, w.model, f"{w.share:.0%}", w.batch, w.decode_core, w.card_seconds,
                    w.latency_s, w.tracks_per_hour] for w in self.workers]
        cards = [[c.card, c.model, ",".join(c.stages) or "unused", c.memory_gib, c.budget_gib] for c in self.cards]
        lines += ["", table(["stage", "card", "model", "share", "batch", "tile", "s/track", "first s", "tracks/h"],
                            _grouped(workers, card_column=1))]
        lines += ["", table(["card", "model", "stages", "GiB used", "GiB usable"], _grouped(cards, card_column=0))]
        lines += ["", table(["stage", "runs", "workers", "tracks/h", "first s", "note"],
                            [[s.stage, "yes" if s.runnable else "NO", s.workers, s.capacity_tracks_s * 3600,
                              s.latency_s, s.note if s.runnable or not s.note.startswith("fits no card")
                              else "fits no card (see Refused)"]
                             for s in self.stages])]
        if self.refusals:
            lines += ["", "Refused:"] + [f"  - {r.reason}" for r in self.refusals]
        lines += ["", "Reasons:"] + [f"  - {r}" for r in self.reasons]
        return "\n".join(lines)


GROUP_ABOVE = 40   # rows; larger tables show one row per identical kind of row, with a count instead of a card


def _grouped(rows: list[list], card_column: int) -> list[list]:
    """Rows as they are, or (beyond GROUP_ABOVE) identical rows but for the card merged into 'N cards'."""
    if len(rows) <= GROUP_ABOVE:
        return rows
    groups: dict[tuple, list] = {}
    for row in rows:
        key = tuple(_rounded(v) for i, v in enumerate(row) if i != card_column)
        groups.setdefault(key, []).append(row)
    out = []
    for members in groups.values():
        row = list(members[0])
        row[card_column] = f"{len(members)} cards" if len(members) > 1 else row[card_column]
        out.append(row)
    return out


def _rounded(value):
    return round(value, 3) if isinstance(value, float) else value
