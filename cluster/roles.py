"""What each kind of card can do: card classes, and the role configurations (stages hosted, batches, memory, speed).

Responsible for: grouping identical cards into classes, checking which stages fit a class alone (with the refusal
sentence when not), and for any set of stages on one card the batch sizes and VAE tile that fit, with that card's
per-track time and first-track latency per stage. Not responsible for: choosing among roles (placement.py).

Batches: an AR stage takes the largest batch <= min(max_batch, tracks) that fits next to the card's other stages;
the acoustic and decode stages run one track at a time (compute-bound: a batch adds memory, not throughput). The
VAE tile core is the largest of options.decode_cores that fits.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from .calibration import Calibration, default_calibration
from .costs import CardSpeed, StageTiming, card_speed, stage_load, stage_timing, track_work, wave_seconds
from .gpus import GpuDevice, cpu_device, decodes_on_tensor_cores
from .memory import MemoryNeed, Peaks, card_memory, peaks, refusal, usable_gib
from .workload import AR_STAGES, STAGES, ModelShape, TrackShape


@dataclass(frozen=True)
class PlanOptions:
    """How to plan: the model's shapes, calibration, the user's memory reserve, and search limits."""
    model: ModelShape = field(default_factory=ModelShape.yue2_3b)
    calibration: Calibration = field(default_factory=default_calibration)
    calibrations: tuple[Calibration, ...] = ()   # per GPU model; cards without one use `calibration`
    reserve_gib: float = 1.0          # GiB each card keeps free (a profile's reserve_gib)
    max_batch: int = 32               # most tracks one AR worker decodes at once (docs/model.md §12)
    shared_process: bool = True       # stages on one card share one process (weights loaded once, one CUDA context)
    decode_cores: tuple[int, ...] = (1024, 512, 256)
    exact_limit: int = 65536          # exact search up to this many assignments (16^4: any 4 cards are exact)
    cpu_threads: int = 2              # the CPU fallback's threads when the inventory has no GPU
    # The AR weight formats the plan may choose among (placement.plan: the first unless another is FORMAT_GAIN
    # faster), and those the cluster's profile forbids. `model.kv_format` is the album's KV cache, unless
    # `kv_formats` names several for the plan to choose among the same way (every weight format with each).
    ar_formats: tuple[str, ...] = ("bf16",)
    forbidden_formats: tuple[str, ...] = ()
    kv_formats: tuple[str, ...] = ()

    @classmethod
    def for_profile(cls, profile, **overrides) -> PlanOptions:
        """Options that take a cluster profile's reserve (and its first node's CPUs for the CPU fallback)."""
        cpus = profile.nodes[0].cpus if profile.nodes else 2
        return cls(**{"reserve_gib": profile.reserve_gib, "cpu_threads": cpus,
                      "forbidden_formats": profile.forbidden_formats, **overrides})

    def calibration_for(self, device: GpuDevice) -> Calibration:
        model = device.spec().model
        return next((c for c in self.calibrations if c.gpu == model), self.calibration)


@dataclass(frozen=True)
class RoleConfig:
    """One card hosting `stages`: what fits, and how fast each hosted stage goes on the full card."""
    stages: tuple[str, ...]
    batches: tuple[int, ...]
    memory: MemoryNeed
    timings: tuple[StageTiming, ...]
    # None: the hosted stages take turns on the card. Else the card hosts AR and acoustic/decode in one process,
    # which run side by side: (AR, others) times slower than alone while both are busy (Calibration.overlap).
    overlap: tuple[float, float] | None = None
    # per hosted stage, its first wave's seconds with k = 1 ... batch tracks (AR stages; others: their latency)
    waves: tuple[tuple[float, ...], ...] = ()

    def timing(self, stage: str) -> StageTiming:
        return self.timings[self.stages.index(stage)]

    def wave_latency(self, stage: str, tracks: int) -> float:
        """The stage's first wave when this card takes `tracks` of a burst (at most its batch)."""
        waves = self.waves[self.stages.index(stage)] if self.waves else (self.timing(stage).latency,)
        return waves[max(0, min(tracks, len(waves)) - 1)]

    def batch(self, stage: str) -> int:
        return self.batches[self.stages.index(stage)]


def relaxed_role(cls: CardClass, stages: tuple[str, ...]) -> RoleConfig:
    """Every runnable stage at its single-stage batch and speed, as if one card could host them all with no memory
    cost: the flow method's point of comparison for what it reaches."""
    singles = {role.stages[0]: role for role in cls.roles if len(role.stages) == 1}
    hosted = tuple(s for s in stages if s in singles)
    return RoleConfig(hosted, tuple(singles[s].batches[0] for s in hosted), singles[hosted[0]].memory,
                      tuple(singles[s].timings[0] for s in hosted))


@dataclass
class CardClass:
    """Identical cards: same model, memory, bandwidth and rates (nodes do not matter to the planner)."""
    devices: list[GpuDevice]
    budget_gib: float
    speeds: dict[str, CardSpeed]                 # runnable stages only
    refusals: dict[str, str]                     # stage -> why it cannot run on this class
    roles: list[RoleConfig] = field(default_factory=list)

    @property
    def device(self) -> GpuDevice:
        return self.devices[0]

    @property
    def count(self) -> int:
        return len(self.devices)


def inventory_or_cpu(inventory: list[GpuDevice], options: PlanOptions) -> list[GpuDevice]:
    """The GPUs; with none, the CPU pseudo-card (the farm then runs the tiny model on CPU)."""
    gpus = [d for d in inventory if not d.is_cpu]
    if gpus:
        return gpus
    cpus = [d for d in inventory if d.is_cpu]
    return cpus[:1] or [cpu_device("local", options.cpu_threads)]


@dataclass(frozen=True)
class WorkloadFacts:
    """What the planner needs of the tracks, computed once: memory peaks and per-stage summed work."""
    tracks: int
    peaks: Peaks
    loads: dict          # (stage, decode core or 0) -> StageLoad


def workload_facts(tracks: list[TrackShape], options: PlanOptions) -> WorkloadFacts:
    m = options.model
    loads = {(s, 0): stage_load([track_work(t, s, m) for t in tracks]) for s in STAGES if s != "decode"}
    loads.update({("decode", c): stage_load([track_work(t, "decode", m, c) for t in tracks]) for c in options.decode_cores})
    return WorkloadFacts(len(tracks), peaks(m, tracks), loads)


def build_classes(inventory: list[GpuDevice], tracks: list[TrackShape], options: PlanOptions) -> list[CardClass]:
    facts = workload_facts(tracks, options)
    groups: dict[tuple, list[GpuDevice]] = {}
    for dev in sorted(inventory, key=lambda d: (d.node, d.index)):
        spec = dev.spec()
        key = (spec.model, dev.vram_bytes, round(spec.bandwidth_gbs, 3), spec.bf16_tflops, spec.fp32_tflops, dev.is_cpu)
        groups.setdefault(key, []).append(dev)
    classes = [_card_class(devs, facts, options) for devs in groups.values()]
    return sorted(classes, key=lambda c: (-c.budget_gib, c.device.spec().model, c.device.key))


def _card_class(devices: list[GpuDevice], facts: WorkloadFacts, options: PlanOptions) -> CardClass:
    dev = devices[0]
    cal = options.calibration_for(dev)
    speeds, refusals = {}, {}
    for stage in STAGES:
        speed = card_speed(dev, stage, options.model, cal)
        if isinstance(speed, str):
            refusals[stage] = speed
            continue
        need = card_memory({stage: 1}, options.model, facts.peaks, min(options.decode_cores), options.shared_process,
                           decodes_on_tensor_cores(dev.spec()))
        if need.total > usable_gib(dev, options.reserve_gib):
            refusals[stage] = refusal(stage, need, dev, options.reserve_gib)
        else:
            speeds[stage] = speed
    cls = CardClass(devices, usable_gib(dev, options.reserve_gib), speeds, refusals)
    for size in range(1, len(speeds) + 1):
        for stages in itertools.combinations([s for s in STAGES if s in speeds], size):
            role = _configure(cls, stages, facts, options)
            if role is not None:
                cls.roles.append(role)
    return cls


def _configure(cls: CardClass, stages: tuple[str, ...], facts: WorkloadFacts, options: PlanOptions) -> RoleConfig | None:
    """Largest AR batch (then largest VAE tile) that fits the card next to the other hosted stages; None if none."""
    cap = max(1, min(options.max_batch, facts.tracks))
    cores = sorted(options.decode_cores, reverse=True) if "decode" in stages else [min(options.decode_cores)]
    best = None
    for core in cores:
        batch = _largest_batch(stages, core, cap, facts, options, cls)
        if batch and (best is None or batch > best[0]):
            best = (batch, core)
    if best is None:
        return None
    batch, core = best
    batches = {s: (batch if s in AR_STAGES else 1) for s in stages}
    memory = card_memory(batches, options.model, facts.peaks, core, options.shared_process,
                         decodes_on_tensor_cores(cls.device.spec()))
    loads = {s: facts.loads[(s, core if s == "decode" else 0)] for s in stages}
    timings = tuple(stage_timing(cls.speeds[s], loads[s], batches[s]) for s in stages)
    waves = tuple(tuple(wave_seconds(cls.speeds[s], loads[s], k) for k in range(1, batches[s] + 1))
                  if s in AR_STAGES and loads[s].tokens else (t.latency,) for s, t in zip(stages, timings))
    both = any(s in AR_STAGES for s in stages) and any(s not in AR_STAGES for s in stages)
    # GPU streams only: on the CPU pseudo-card the engines' threads compete for the same cores.
    side_by_side = both and options.shared_process and not cls.device.is_cpu
    overlap = options.calibration_for(cls.device).overlap if side_by_side else None
    return RoleConfig(stages, tuple(batches[s] for s in stages), memory, timings, overlap, waves)


def _largest_batch(stages, core, cap, facts, options, cls: CardClass) -> int:
    tensor_core_decode = decodes_on_tensor_cores(cls.device.spec())

    def fits(b: int) -> bool:
        batches = {s: (b if s in AR_STAGES else 1) for s in stages}
        return card_memory(batches, options.model, facts.peaks, core, options.shared_process,
                           tensor_core_decode).total <= cls.budget_gib
    if not fits(1):
        return 0
    if not any(s in AR_STAGES for s in stages):
        return 1
    lo, hi = 1, cap
    while lo < hi:   # memory grows with the batch: binary search the largest that fits
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo
