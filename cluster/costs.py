"""Time per stage per card: a roofline of each stage's work, scaled by calibrated efficiency factors.

Responsible for: the work one track gives each stage (bytes, FLOP, tokens), how fast a card does it (`CardSpeed`),
seconds for a job or an AR decode step, per-track card time and first-track latency at a batch size. Not
responsible for: memory (memory.py), choosing cards (placement.py), fitting the factors (fitting.py).

The model (docs/model.md §6 and §12):
- AR decode step for the jobs in a batch: overhead + max((weights + sum of KV read) / bandwidth, sum FLOP / bf16);
  the batch shares one read of the weights. Prefill: causal FLOP / bf16. Bytes are those of the step's formats
  (workload.ModelShape.ar_format, kv_format); quantised weights add the calibration's per-step overhead for
  their format (the norms they cannot fold, the widening of their values), and an FP8 KV byte costs
  `kvfp8_byte_cost` weight bytes (it is widened before its products).
- acoustic: (prefill + 64 velocity evals of 2 L_n 1.4094 G + 28 * 4 L_n (L_a + L_n) 2048 FLOP) / bf16 rate.
- decode: 57.7 GFLOP per second of audio, plus the halo frames decoded twice at inner tile edges (3 % at core
  1024), / the default decode's rate: a sixth of the BF16 tensor rate where it runs on tensor cores (three TF32
  products per FP32 one, TF32 at half BF16's rate; gpus.decodes_on_tensor_cores), the FP32 rate elsewhere. An
  album that asks for cuDNN's FP32 on such a card is predicted faster than it decodes.
Every rate is the datasheet peak x a factor from the calibration; every job pays a fixed overhead.
"""
from __future__ import annotations

from dataclasses import dataclass

from .calibration import Calibration
from .gpus import GpuDevice, GpuSpec, decodes_on_tensor_cores
from .memory import VAE_HALO_FRAMES
from .workload import AR_STAGES, ModelShape, TrackShape


@dataclass(frozen=True)
class Work:
    """What one track asks of one stage. AR stages use tokens / per-step terms; the others a FLOP total."""
    stage: str
    flop: float                 # acoustic / decode job FLOP; AR: prefill FLOP
    tokens: int = 0             # AR: generated tokens = decode steps
    kv_bytes_per_step: float = 0.0   # AR: KV read per step (mean context x 112 KiB x CFG branches)
    flop_per_step: float = 0.0       # AR: FLOP per step for this track


def track_work(track: TrackShape, stage: str, model: ModelShape, core: int = 1024) -> Work:
    b = track.cfg_branches
    if stage in AR_STAGES:
        ctx = track.mean_context(stage)
        return Work(stage, b * model.prefill_flop(track.prefix_tokens(stage)), track.generated_tokens(stage),
                    b * ctx * model.ar_kv_bytes_per_token, b * model.ar_token_flop(ctx))
    if stage == "acoustic":
        flop = sum(model.prefill_flop(la) + model.ode_evals * model.velocity_eval_flop(la, ln)
                   for la, ln in track.acoustic_chunks(model))
        return Work(stage, flop)
    frames = track.semantic_tokens
    tiles = -(-frames // core)                      # tiled decode: inner tile edges decode a halo on each side
    return Work(stage, model.vae_flop_per_frame * (frames + VAE_HALO_FRAMES * max(0, 2 * tiles - 2)))


@dataclass(frozen=True)
class CardSpeed:
    """How fast one card does one stage, in seconds per unit, under a calibration."""
    step_fixed_s: float          # AR: overhead per step
    weight_bytes: float          # AR: weights read per step
    s_per_byte: float            # AR: 1 / effective bandwidth
    s_per_step_flop: float       # AR: 1 / effective compute when a step is compute-bound
    s_per_flop: float            # AR prefill / acoustic (bf16) / decode (decode_peak)
    job_overhead_s: float
    step_per_track_s: float = 0.0   # AR: overhead per track in the batch per step (its sampler, its bookkeeping)
    kv_byte_cost: float = 1.0       # AR: time of a KV byte in the cache's format / time of a weight byte


def decode_peak(spec: GpuSpec, precision: str = "tf32x3") -> tuple[float | None, str]:
    """The peak (TFLOP/s) a decode in `precision` runs against on this card, and the calibration factor that scales
    it: tf32x3 on tensor cores where it runs there, cuDNN's FP32 cores otherwise."""
    if precision == "tf32x3" and decodes_on_tensor_cores(spec):
        return spec.bf16_tflops / 6, "decode_tf32x3_efficiency"
    return spec.fp32_tflops, "decode_efficiency"


def card_speed(device: GpuDevice, stage: str, model: ModelShape, cal: Calibration) -> CardSpeed | str:
    """The card's speed for a stage, or a sentence saying why it has none."""
    spec = device.spec()
    if stage != "decode" and not device.is_cpu and not spec.bf16:
        return f"{stage} needs bf16 (compute capability >= 8.0); {spec.model} ({device.key}) has {spec.compute_capability}"
    rate, factor = decode_peak(spec) if stage == "decode" else (spec.bf16_tflops, None)
    if rate is None or (stage in AR_STAGES and spec.bandwidth_gbs <= 0):
        return f"no compute figures for {spec.model} ({device.key}): {spec.source}"
    eff = getattr(cal, factor) if factor else {"plan": cal.prefill_efficiency, "semantic": cal.prefill_efficiency,
                                               "acoustic": cal.acoustic_efficiency}[stage]
    if stage not in AR_STAGES:
        return CardSpeed(0.0, 0.0, 0.0, 0.0, 1.0 / (rate * 1e12 * eff), cal.job_overhead_s)
    fixed, per_track = cal.ar_overheads(stage)
    fixed += cal.format_step_overhead(model.ar_format) + cal.chain_step_overhead(model.ar_format,
                                                                                  spec.compute_capability)
    kv_cost = cal.kvfp8_byte_cost if model.kv_format != "bf16" else 1.0
    return CardSpeed(fixed, model.ar_step_weight_bytes, 1.0 / (spec.bandwidth_gbs * 1e9 * cal.ar_bandwidth_efficiency),
                     1.0 / (rate * 1e12 * cal.ar_compute_efficiency), 1.0 / (rate * 1e12 * eff), cal.job_overhead_s,
                     per_track, kv_cost)


def step_seconds(speed: CardSpeed, kv_bytes: float, flop: float, tracks: float = 1) -> float:
    """One AR decode step for a batch of `tracks` whose members read `kv_bytes` of KV and need `flop` in total."""
    return (speed.step_fixed_s + tracks * speed.step_per_track_s
            + max((speed.weight_bytes + kv_bytes * speed.kv_byte_cost) * speed.s_per_byte,
                  flop * speed.s_per_step_flop))


def stall_seconds(speed: CardSpeed, work: Work) -> float:
    """Card time a job takes outside decode steps: its prefill (AR) or all of it (others), plus the job overhead.
    In a continuously batched AR worker a joining track's prefill stalls the whole batch."""
    return work.flop * speed.s_per_flop + speed.job_overhead_s


def job_seconds(speed: CardSpeed, work: Work) -> float:
    """A non-AR job, or an AR job alone (batch 1), on the full card."""
    steps = work.tokens * step_seconds(speed, work.kv_bytes_per_step, work.flop_per_step) if work.tokens else 0.0
    return stall_seconds(speed, work) + steps


@dataclass(frozen=True)
class StageTiming:
    """A card's performance for one stage at a batch size, over a workload."""
    card_seconds: float     # mean card time per track in steady state (1 / tracks per second on the full card)
    latency: float          # the first track's time through the stage (first wave of min(batch, N) tracks)


@dataclass(frozen=True)
class StageLoad:
    """A workload's work for one stage, summed once so a card's timing costs O(1) (prefix sums give first waves)."""
    stage: str
    n: int
    flop: float                     # sum of Work.flop
    tokens: float                   # sum of tokens
    kv_tokens: float                # sum of kv_bytes_per_step x tokens
    flop_tokens: float              # sum of flop_per_step x tokens
    max_tokens: int                 # longest track: a single wave streams the weights for that many steps
    first: Work
    waves: tuple[tuple[float, float, float, float], ...]   # after k tracks: (flop, tokens, kv/step, flop/step)


WAVE_LIMIT = 1024   # longest first wave kept (batches are far smaller)


def stage_load(works: list[Work]) -> StageLoad:
    waves, acc = [(0.0, 0.0, 0.0, 0.0)], (0.0, 0.0, 0.0, 0.0)
    for w in works[:WAVE_LIMIT]:
        acc = (acc[0] + w.flop, acc[1] + w.tokens, acc[2] + w.kv_bytes_per_step, acc[3] + w.flop_per_step)
        waves.append(acc)
    return StageLoad(works[0].stage, len(works), sum(w.flop for w in works), sum(w.tokens for w in works),
                     sum(w.kv_bytes_per_step * w.tokens for w in works), sum(w.flop_per_step * w.tokens for w in works),
                     max(w.tokens for w in works), works[0], tuple(waves))


def stage_timing(speed: CardSpeed, load: StageLoad, batch: int) -> StageTiming:
    n = load.n
    stall = load.flop / n * speed.s_per_flop + speed.job_overhead_s        # per track, mean
    if load.stage not in AR_STAGES:
        return StageTiming(stall, job_seconds(speed, load.first))
    if not load.tokens:    # no track makes tokens here (every score given, or cot off): (nearly) free, and never
        return StageTiming(max(stall, 1e-6), 0.0)      # zero: the planner divides by a stage's card time
    # A step = a fixed part (overhead + one read of the weights, shared by the batch) + a part per track (its KV).
    fixed = step_seconds(speed, 0.0, 0.0, 0)
    per_track = (step_seconds(speed, batch * load.kv_tokens / load.tokens, batch * load.flop_tokens / load.tokens,
                              batch) - fixed) / batch
    # Steady continuous batching refills slots, so a track carries 1/batch of each fixed part; when every track fits
    # in one wave the batch thins out as tracks finish and the weights are streamed for the longest track.
    shared = load.max_tokens * fixed / n if n <= batch else load.tokens / n * fixed / batch
    card = stall + load.tokens / n * per_track + shared
    return StageTiming(card, wave_seconds(speed, load, batch))


def wave_seconds(speed: CardSpeed, load: StageLoad, batch: int) -> float:
    """An AR stage's first wave on the full card: the first min(batch, N) tracks decoded together."""
    k = min(batch, load.n, len(load.waves) - 1)
    flop, tokens, kv, step_flop = load.waves[k]
    return flop * speed.s_per_flop + k * speed.job_overhead_s + tokens / k * step_seconds(speed, kv, step_flop, k)


def lower_bound_card_seconds(speed: CardSpeed, work: Work, batch: int) -> float:
    """Card time a track needs at least at its stage on this card: AR at a full batch, memory-bound part only."""
    if work.stage not in AR_STAGES:
        return job_seconds(speed, work)
    per_token = ((speed.step_fixed_s + speed.weight_bytes * speed.s_per_byte) / batch + speed.step_per_track_s
                 + work.kv_bytes_per_step * speed.kv_byte_cost * speed.s_per_byte)
    return stall_seconds(speed, work) + work.tokens * per_token
