"""Efficiency factors that turn roofline times into predicted times, read from and written to TOML.

Responsible for: the `Calibration` record, finding the shipped files, and reading and writing their TOML. Not
responsible for: the formulas the factors scale (costs.py) or fitting them to measurements (fitting.py). Factors are fractions of the catalogue's datasheet peaks, so a factor measured on one GPU
can stand in for another of the same kind until that one is measured too.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path


DEFAULT_GPU = "H200"


def calibration_dir() -> Path | None:
    """The shipped calibration files: configs/calibration/ in a checkout, cluster/_calibration/ in a wheel."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "configs" / "calibration", here / "_calibration"):
        if candidate.is_dir():
            return candidate
    return None


CHAIN_CAPABILITY = (9, 0)     # where the layer chain's kernel runs (stages/layer_chain.supported: Hopper's wgmma, TMA)


@dataclass(frozen=True)
class Calibration:
    """Achieved / datasheet-peak ratios (dimensionless) and fixed costs (seconds).

    Defaults = the starting factors of configs/calibration/h200.toml, derived there from docs/model.md §12.
    """
    gpu: str = "H200"
    source: str = "built-in starting factors (docs/model.md §12, H200)"
    ar_bandwidth_efficiency: float = 0.854   # bytes/s of the AR weight + KV stream / datasheet bandwidth
    ar_step_overhead_s: float = 2.31e-3      # per decode step: kernel launches, sampling, host sync
    ar_track_step_overhead_s: float = 0.0    # per track in the batch per step: its sampler and bookkeeping
    ar_compute_efficiency: float = 0.755     # when a large batch makes a step compute-bound
    prefill_efficiency: float = 0.448        # causal AR prefill FLOP/s / bf16 peak
    acoustic_efficiency: float = 0.452       # velocity-eval FLOP/s / bf16 peak (docs/model.md §6 FLOP count)
    decode_efficiency: float = 0.173         # VAE FLOP/s / FP32 peak: cuDNN FP32 (decode precision "fp32")
    # the default decode ("tf32x3") where it runs on tensor cores: VAE FLOP/s / (BF16 peak / 6), costs.decode_peak;
    # from the H200's 0.189 s per reference track (docs/benchmarks.md, 2026-12-05) until a calibration measures it
    decode_tf32x3_efficiency: float = 0.557
    job_overhead_s: float = 0.05             # per stage job: actor call, artifact write (assumption)
    # A card hosting AR and acoustic/decode in one process runs them side by side, each engine on its own CUDA
    # stream (farm/workers.py). While both kinds are busy, AR runs this many times slower than alone, and acoustic /
    # decode that many. Measured on an H200 (docs/benchmarks.md, co-run): the acoustic stage's large GEMM and
    # attention blocks hold the SMs and the AR step's small kernels wait for them, stream priority or not.
    overlap_ar_slowdown: float = 5.0
    overlap_other_slowdown: float = 1.08
    # Per-stage AR overheads when measured (None: the [ar] values). The two AR stages sample differently (top-k 30
    # vs 100, other windows), so their per-step and per-track costs differ on the same engine.
    # The AR step's other formats (docs/benchmarks.md, 2026-12-01, one H200, the same engine in both formats):
    # FP8 weights cannot take the RMSNorms folded in, so a step runs 56 launches more — fitted so that the model
    # gives the measured FP8/BF16 step time of the reference track's AR stages (1.04); an FP8 KV byte costs this many
    # BF16 bytes' time (the split kernel widens every page before its products): 1.65 from 5.70 vs 6.60 ms at 24 rows
    # × 7,680 and 3.74 vs 4.16 at 12 (one H200, 2026-12-02, the page-span kernel; 2.41 on the kernel before it).
    fp8_step_overhead_s: float = 4.4e-4
    # NVFP4 weights: the same unfolded norms; the step's other costs are assumed to be FP8's until measured on the
    # card (the [nvfp4] table of a calibration file)
    nvfp4_step_overhead_s: float = 4.4e-4
    kvfp8_byte_cost: float = 1.65
    # The layer chain (stages/layer_chain.py) runs a BF16 step's products as one persistent kernel on Hopper
    # (compute capability 9.0) only. The [ar] / [plan] / [semantic] overheads are fitted on a card that runs it
    # (the H200); a step without it (another card, or quantised weights) costs this much more. Measured on an H200
    # (docs/benchmarks.md, 2026-12-03, second session): 1.815 against 1.650 ms at one row, 6.66 against 6.50 at 24.
    chain_step_saving_s: float = 0.0
    plan_step_overhead_s: float | None = None
    plan_track_step_overhead_s: float | None = None
    semantic_step_overhead_s: float | None = None
    semantic_track_step_overhead_s: float | None = None
    measured: dict = field(default_factory=dict, compare=False)   # provenance of fitted values

    @property
    def overlap(self) -> tuple[float, float]:
        """(AR, acoustic/decode) slowdowns while both kinds run on one card; each at least 1."""
        return max(1.0, self.overlap_ar_slowdown), max(1.0, self.overlap_other_slowdown)

    def format_step_overhead(self, ar_format: str) -> float:
        """What a step in a quantised AR weight format costs beyond its bytes (0 for the model's own dtype)."""
        return 0.0 if ar_format == "bf16" else getattr(self, f"{ar_format}_step_overhead_s")

    def chain_step_overhead(self, ar_format: str, compute_capability: tuple[int, int]) -> float:
        """What a step costs beyond the fitted overheads for want of the layer chain (0 where it runs)."""
        runs = ar_format == "bf16" and tuple(compute_capability) == CHAIN_CAPABILITY
        return 0.0 if runs else self.chain_step_saving_s

    def ar_overheads(self, stage: str) -> tuple[float, float]:
        """(per step, per track per step) overhead of an AR stage."""
        fixed, per = getattr(self, f"{stage}_step_overhead_s"), getattr(self, f"{stage}_track_step_overhead_s")
        return (self.ar_step_overhead_s if fixed is None else fixed,
                self.ar_track_step_overhead_s if per is None else per)


_FIELDS = {  # TOML table.key -> Calibration field
    ("ar", "bandwidth_efficiency"): "ar_bandwidth_efficiency",
    ("ar", "step_overhead_s"): "ar_step_overhead_s",
    ("ar", "track_step_overhead_s"): "ar_track_step_overhead_s",
    ("ar", "compute_efficiency"): "ar_compute_efficiency",
    ("prefill", "efficiency"): "prefill_efficiency",
    ("acoustic", "efficiency"): "acoustic_efficiency",
    ("decode", "efficiency"): "decode_efficiency",
    ("decode", "tf32x3_efficiency"): "decode_tf32x3_efficiency",
    ("job", "overhead_s"): "job_overhead_s",
    ("overlap", "ar_slowdown"): "overlap_ar_slowdown",
    ("overlap", "other_slowdown"): "overlap_other_slowdown",
    ("fp8", "step_overhead_s"): "fp8_step_overhead_s",
    ("nvfp4", "step_overhead_s"): "nvfp4_step_overhead_s",
    ("kv_fp8", "byte_cost"): "kvfp8_byte_cost",
    ("chain", "step_saving_s"): "chain_step_saving_s",
    ("plan", "step_overhead_s"): "plan_step_overhead_s",
    ("plan", "track_step_overhead_s"): "plan_track_step_overhead_s",
    ("semantic", "step_overhead_s"): "semantic_step_overhead_s",
    ("semantic", "track_step_overhead_s"): "semantic_track_step_overhead_s",
}


def load_calibration(path: str | Path) -> Calibration:
    """Read a calibration file; missing keys keep the built-in defaults, unknown keys are an error."""
    path = Path(path)
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    values: dict = {"gpu": data.get("gpu", "H200"), "source": data.get("source", str(path))}
    for table, content in data.items():
        if table in ("gpu", "source"):
            continue
        if table == "measured":
            values["measured"] = dict(content)
            continue
        if not isinstance(content, dict):
            raise ValueError(f"{path}: {table}: unknown key")
        for key, value in content.items():
            name = _FIELDS.get((table, key))
            if name is None:
                raise ValueError(f"{path}: {table}.{key}: unknown key (known: {sorted(f'{t}.{k}' for t, k in _FIELDS)})")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{path}: {table}.{key}: expected a number >= 0, got {value!r}")
            values[name] = float(value)
    return Calibration(**values)


def shipped_calibrations() -> tuple[Calibration, ...]:
    """Every measured calibration shipped (one file per GPU model), in file-name order."""
    folder = calibration_dir()
    return tuple(load_calibration(p) for p in sorted(folder.glob("*.toml"))) if folder else ()


def default_calibration() -> Calibration:
    """The shipped H200 calibration (the engines team keeps it measured), else the built-in factors. The one rule
    for which calibration a plan uses when none is given; other GPU models use theirs (PlanOptions.calibrations)."""
    return next((c for c in shipped_calibrations() if c.gpu == DEFAULT_GPU), Calibration())


def calibration_toml(cal: Calibration) -> str:
    lines = ["# Efficiency factors for the yue2-farm cost model (cluster/costs.py), as fractions of datasheet peaks.",
             "# Written by `farm calibrate`; what its reports do not measure keeps the file's earlier value (the",
             "# fields of cluster/calibration.py say where each comes from; docs/benchmarks.md has the runs).",
             f'gpu = "{cal.gpu}"', f'source = "{_escape(cal.source)}"', ""]
    table = None
    for (name, key), attr in _FIELDS.items():
        if getattr(cal, attr) is None:
            continue
        if name != table:
            lines.append(f"[{name}]")
            table = name
        lines.append(f"{key} = {getattr(cal, attr)!r}")
    if cal.measured:
        lines += ["", "[measured]"] + [f"{k} = {_value(v)}" for k, v in cal.measured.items()]
    return "\n".join(lines) + "\n"


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _value(v) -> str:
    return f'"{_escape(v)}"' if isinstance(v, str) else repr(v)
