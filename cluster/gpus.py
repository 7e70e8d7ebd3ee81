"""GPU catalogue, per-card facts, and the NVML probe.

Responsible for: what a GPU model is (datasheet figures, with their sources), matching the names NVML reports to
those models without ever guessing, describing one physical or virtual card (`GpuDevice`), and reading the cards of
this machine through NVML.

Not responsible for: memory or time of the YuE2 stages (costs.py, memory.py), cluster profiles (profiles.py), or
deciding anything (placement.py). Standard library only; `pynvml` (from nvidia-ml-py) is imported inside
`probe_nvml` so that importing this module never touches a driver.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass

GIB = 2**30

# Tokens that say nothing about the model ("NVIDIA GeForce RTX 4090" ~ "RTX 4090").
_NOISE = frozenset({"nvidia", "geforce", "gpu", "graphics", "tesla"})


@dataclass(frozen=True)
class GpuSpec:
    """Datasheet figures of one GPU model. Tensor rates are dense (no 2:4 sparsity).

    For GeForce cards `bf16_tflops` is the rate with FP32 accumulation (what PyTorch's bf16 matmul uses), which is
    half the FP16-accumulate rate NVIDIA headlines for those cards.
    """
    model: str                       # canonical name, as profiles write it
    architecture: str
    compute_capability: tuple[int, int]
    sm_count: int
    boost_mhz: int                   # SM clock the rates below assume
    vram_gib: float                  # usable total as NVML reports it where known (ECC carve-outs), else nominal
    bandwidth_gbs: float             # GB/s (1e9 bytes/s), datasheet
    bf16_tflops: float | None        # dense bf16 tensor FLOP/s / 1e12; None = unknown
    fp32_tflops: float | None        # non-tensor FP32 FLOP/s / 1e12 (the VAE runs FP32 with TF32 off)
    bf16: bool
    fp8: bool
    source: str                      # where the figures come from
    aliases: tuple[str, ...] = ()    # other names a profile may use


# The VAE's default decode ("tf32x3": three TF32 products per FP32 one, stages/vae_tf32x3.py) runs on tensor cores
# where our kernel runs (TMA: compute capability 9.0 and up, stages/vae_tf32x3.usable) and is cuDNN's FP32 elsewhere.
TF32X3_CAPABILITY = (9, 0)


def decodes_on_tensor_cores(spec: GpuSpec) -> bool:
    return tuple(spec.compute_capability) >= TF32X3_CAPABILITY and bool(spec.bf16_tflops)


def _spec(model, arch, cc, sms, mhz, vram, bw, bf16_tf, fp32_tf, source, aliases=()):
    return GpuSpec(model, arch, cc, sms, mhz, vram, bw, bf16_tf, fp32_tf, cc >= (8, 0), cc >= (8, 9), source, aliases)


CATALOGUE: tuple[GpuSpec, ...] = (
    # GA107 laptop refresh (GN20-P0-R). Uncertain: public spec pages disagree on CUDA cores (2048 / 2304 / 2560) and
    # memory speed (144-192 GB/s on 96 bits); we take 20 SMs at the 80 W boost (1492 MHz) and 14 Gbps (168 GB/s).
    # TGP 35-80 W moves clocks a lot; memory (6 GiB), not speed, decides what it can run.
    _spec("RTX 3050 Laptop", "Ampere", (8, 6), 20, 1492, 6.0, 168.0, 15.3, 7.64,
          "NVIDIA GeForce RTX 3050 6GB Laptop GPU spec page + notebook spec databases (uncertain, see comment)",
          ("RTX 3050 Laptop 6GB",)),
    # GA106, 28 SMs, 1777 MHz, 192-bit 15 Gbps. Rates from the GA102 whitepaper per-SM figures.
    _spec("RTX 3060", "Ampere", (8, 6), 28, 1777, 12.0, 360.0, 25.5, 12.7,
          "NVIDIA RTX 3060 spec page; per-SM rates from the NVIDIA Ampere GA102 whitepaper", ("RTX 3060 12GB",)),
    # GA102: 'Peak FP16 Tensor TFLOPS with FP32 Accumulate 71 (dense)', FP32 35.6, 936 GB/s.
    _spec("RTX 3090", "Ampere", (8, 6), 82, 1695, 24.0, 936.0, 71.0, 35.6, "NVIDIA Ampere GA102 GPU architecture whitepaper"),
    # AD102: FP16/BF16 tensor with FP32 accumulate 165.2 dense, FP32 82.6, 1008 GB/s.
    _spec("RTX 4090", "Ada Lovelace", (8, 9), 128, 2520, 24.0, 1008.0, 165.2, 82.6,
          "NVIDIA Ada Lovelace architecture whitepaper (RTX 4090 column)"),
    # GB206, 36 SMs, 2572 MHz, 128-bit GDDR7 28 Gbps. 759 AI TOPS (FP4 sparse) -> 1024 FP16 FLOP/clk/SM dense, halved
    # for FP32 accumulate on GeForce: 47.4. FP32 23.7.
    _spec("RTX 5060 Ti", "Blackwell", (12, 0), 36, 2572, 16.0, 448.0, 47.4, 23.7,
          "NVIDIA RTX 5060 Ti spec page (AI TOPS, clocks); GeForce FP32-accumulate ratio from the RTX Blackwell whitepaper",
          ("RTX 5060 Ti 16GB",)),
    # GB202: 'Peak FP16 Tensor TFLOPS with FP32 Accumulate 209.5 (dense)', FP32 104.8, 1792 GB/s.
    _spec("RTX 5090", "Blackwell", (12, 0), 170, 2407, 32.0, 1792.0, 209.5, 104.8,
          "NVIDIA RTX Blackwell GPU architecture whitepaper (RTX 5090 column)"),
    # GB202, 188 SMs, 96 GB GDDR7 ECC 512-bit 1792 GB/s, FP32 125 TFLOPS, 4000 AI TOPS (FP4 sparse). Dense BF16 =
    # 4000/8 = 500; assumes full-rate FP32 accumulate as on earlier pro parts (uncertain). NVML total ~95.6 GiB.
    _spec("RTX PRO 6000 Blackwell", "Blackwell", (12, 0), 188, 2617, 95.6, 1792.0, 500.0, 125.0,
          "NVIDIA RTX PRO 6000 Blackwell Workstation Edition datasheet (FP32, AI TOPS, memory)",
          ("RTX PRO 6000", "RTX PRO 6000 Blackwell Workstation Edition")),
    # AD104: BF16 121 dense (242 sparse), FP32 30.3, 300 GB/s; nvidia-smi shows 23,034 MiB with ECC.
    _spec("L4", "Ada Lovelace", (8, 9), 58, 2040, 22.5, 300.0, 121.0, 30.3, "NVIDIA L4 Tensor Core GPU datasheet"),
    # AD102: BF16 362 dense (733 sparse), FP32 91.6, 864 GB/s; nvidia-smi shows 46,068 MiB with ECC.
    _spec("L40S", "Ada Lovelace", (8, 9), 142, 2520, 45.0, 864.0, 362.0, 91.6, "NVIDIA L40S datasheet"),
    # GA100: BF16 312 dense, FP32 19.5; 40 GB HBM2 1555 GB/s (SXM4 and PCIe).
    _spec("A100 40GB", "Ampere", (8, 0), 108, 1410, 40.0, 1555.0, 312.0, 19.5,
          "NVIDIA A100 Tensor Core GPU datasheet", ("A100-40GB",)),
    # GA100 80 GB HBM2e: 2039 GB/s for SXM4 (PCIe 80GB: 1935 GB/s, same compute; NVML gives a probed card's own).
    _spec("A100 80GB", "Ampere", (8, 0), 108, 1410, 80.0, 2039.0, 312.0, 19.5,
          "NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB column)", ("A100-80GB",)),
    # GH100 SXM5: BF16 989.4 dense (1979 sparse), FP32 66.9, FP8 1979 dense, 3.35 TB/s, 80 GB (NVML ~79.6 GiB).
    _spec("H100 SXM", "Hopper", (9, 0), 132, 1980, 79.6, 3350.0, 989.4, 66.9,
          "NVIDIA H100 Tensor Core GPU datasheet (SXM column)", ("H100 80GB HBM3",)),
    # GH100 with 141 GB HBM3e: same compute as H100 SXM, 4.8 TB/s. NVML total 150,754,820,096 B = 140.4 GiB
    # (docs/model.md §12, measured on the project's H200).
    _spec("H200", "Hopper", (9, 0), 132, 1980, 140.4, 4800.0, 989.4, 66.9,
          "NVIDIA H200 Tensor Core GPU datasheet; memory total from NVML on the project's H200"),
    # GB10 superchip GPU: 48 SMs (6,144 CUDA cores), FP32 ~31 TFLOPS, 128 GB LPDDR5x *shared with the CPU*, 273 GB/s.
    # 1 PFLOP FP4 is sparse; dense BF16 here assumes the GeForce-Blackwell FP32-accumulate ratio (62; could be 124).
    _spec("DGX Spark", "Blackwell", (12, 1), 48, 2520, 128.0, 273.0, 62.0, 31.0,
          "NVIDIA DGX Spark datasheet (memory, FP4 PFLOP) + GB10 Hot Chips 2025 figures (FP32); BF16 uncertain",
          ("GB10", "DGX Spark (GB10)")),
)

# NVML name rules: a name matches a model when its tokens contain one `required` set and every other token is in
# `optional`. Unexpected tokens ("Ti", "D", "Max-Q", "NVL", "PCIe" for H100 ...) make the name unknown, never a guess.
_RULES: dict[str, tuple[tuple[frozenset[str], ...], frozenset[str]]] = {
    "RTX 3050 Laptop": ((frozenset({"rtx", "3050", "laptop"}),), frozenset({"6gb"})),
    "RTX 3060": ((frozenset({"rtx", "3060"}),), frozenset({"12gb"})),
    "RTX 3090": ((frozenset({"rtx", "3090"}),), frozenset()),
    "RTX 4090": ((frozenset({"rtx", "4090"}),), frozenset()),
    "RTX 5060 Ti": ((frozenset({"rtx", "5060", "ti"}),), frozenset({"16gb"})),
    "RTX 5090": ((frozenset({"rtx", "5090"}),), frozenset()),
    "RTX PRO 6000 Blackwell": ((frozenset({"rtx", "pro", "6000"}),), frozenset({"blackwell", "workstation", "edition"})),
    "L4": ((frozenset({"l4"}),), frozenset()),
    "L40S": ((frozenset({"l40s"}),), frozenset()),
    "A100 40GB": ((frozenset({"a100", "40gb"}),), frozenset({"sxm4", "sxm", "pcie"})),
    "A100 80GB": ((frozenset({"a100", "80gb"}),), frozenset({"sxm4", "sxm", "pcie"})),
    "H100 SXM": ((frozenset({"h100", "hbm3"}), frozenset({"h100", "sxm"}), frozenset({"h100", "sxm5"})),
                 frozenset({"80gb", "hbm3", "sxm", "sxm5"})),
    "H200": ((frozenset({"h200"}),), frozenset({"141gb"})),
    "DGX Spark": ((frozenset({"gb10"}), frozenset({"dgx", "spark"})), frozenset({"dgx", "spark", "gb10"})),
}
_BY_MODEL = {spec.model: spec for spec in CATALOGUE}


def _tokens(name: str) -> frozenset[str]:
    return frozenset(t for t in re.split(r"[^a-z0-9]+", name.lower()) if t and t not in _NOISE)


def _matches(tokens: frozenset[str], model: str) -> bool:
    required, optional = _RULES[model]
    return any(req <= tokens and tokens <= req | optional for req in required)


@functools.cache   # the catalogue is fixed, and the planner's simulations ask for every card's spec at each event
def lookup(name: str) -> GpuSpec | None:
    """The catalogue entry for a model or NVML device name, or None when unknown or ambiguous (never a guess)."""
    tokens = _tokens(name)
    for spec in CATALOGUE:  # exact canonical names and aliases first
        if tokens in {_tokens(spec.model), *map(_tokens, spec.aliases)}:
            return spec
    hits = [spec for spec in CATALOGUE if _matches(tokens, spec.model)]
    return hits[0] if len(hits) == 1 else None


def known_models() -> tuple[str, ...]:
    return tuple(spec.model for spec in CATALOGUE)


@dataclass(frozen=True)
class SmRates:
    """Per-SM, per-clock figures of an architecture (dense), from NVIDIA's architecture whitepapers."""
    architecture: str
    cores_per_sm: int       # FP32 CUDA cores per SM: NVML gives cores, not SMs, for whole GPUs
    bf16_per_clock: int     # dense bf16 tensor FLOP per SM per clock with FP32 accumulate (0 = no bf16)
    fp32_per_clock: int     # FP32 FLOP per SM per clock (2 per core: FMA)
    tensor_clock: float = 1.0   # the clock the tensor figures hold at, as a share of NVML's max SM clock


# Keyed by compute capability. GeForce and pro parts share a capability but pro parts run FP32 accumulate at full
# rate; NVML cannot tell them apart, so 8.6 / 8.9 / 12.x use the (conservative) GeForce figure.
# Sources: V100 / Turing / A100 / GA102 / Ada / H100 / Blackwell whitepapers (tensor FLOP per SM per clock).
SM_RATES: dict[tuple[int, int], SmRates] = {
    (7, 0): SmRates("Volta", 64, 0, 128),
    (7, 5): SmRates("Turing", 64, 0, 128),
    (8, 0): SmRates("Ampere", 64, 2048, 128),
    (8, 6): SmRates("Ampere", 128, 512, 256),
    (8, 7): SmRates("Ampere", 128, 512, 256),
    (8, 9): SmRates("Ada Lovelace", 128, 512, 256),
    # Hopper's datasheets give dense tensor throughput at 1,830 MHz while NVML reports 1,980 MHz (max, customer boost
    # and application clocks alike on an H200: docs/measured/2026-12-01-h200-nvml-clocks.log); FP32 holds at 1,980.
    (9, 0): SmRates("Hopper", 128, 4096, 256, tensor_clock=1830 / 1980),
    (10, 0): SmRates("Blackwell", 128, 8192, 256),
    (12, 0): SmRates("Blackwell", 128, 512, 256),
    (12, 1): SmRates("Blackwell", 128, 512, 256),
}


@dataclass(frozen=True)
class GpuDevice:
    """One card as the planner sees it: where it is, and its own facts (NVML, or the catalogue for virtual cards)."""
    node: str
    index: int                       # physical / NVML index on its node (-1: the node's CPU, see cpu_device)
    uuid: str
    name: str                        # NVML name or catalogue model
    vram_bytes: int
    bandwidth_bytes_s: float         # bus bits / 8 * max memory clock * 2 (DDR); 0 when NVML could not say
    sm_count: int                    # 0 when unknown
    sm_clock_mhz: int                # max SM clock
    compute_capability: tuple[int, int]
    bf16: bool
    fp8: bool
    virtual: bool = False

    @property
    def key(self) -> str:
        return f"{self.node}/{'cpu' if self.is_cpu else self.index}"

    @property
    def is_cpu(self) -> bool:
        return self.index < 0

    @property
    def vram_gib(self) -> float:
        return self.vram_bytes / GIB

    def spec(self) -> GpuSpec:
        """Catalogue figures when the name is known, with this card's own memory and bandwidth; else NVML-derived."""
        if self.is_cpu:
            return _cpu_spec(self)
        known = lookup(self.name)
        if known is not None:
            bandwidth = self.bandwidth_bytes_s / 1e9 or known.bandwidth_gbs
            return dataclasses.replace(known, vram_gib=self.vram_gib, bandwidth_gbs=bandwidth)
        return _derived_spec(self)

    def bf16_flops(self) -> float | None:
        tf = self.spec().bf16_tflops
        return None if tf is None else tf * 1e12

    def fp32_flops(self) -> float | None:
        tf = self.spec().fp32_tflops
        return None if tf is None else tf * 1e12


def _derived_spec(dev: GpuDevice) -> GpuSpec:
    rates = SM_RATES.get(dev.compute_capability)
    clock = dev.sm_clock_mhz * 1e6
    if rates is None or dev.sm_count <= 0 or clock <= 0:
        bf16_tf = fp32_tf = None
        arch, how = (rates.architecture if rates else "unknown"), "no per-SM figures for this card"
    else:
        bf16_tf = (dev.sm_count * rates.bf16_per_clock * clock * rates.tensor_clock / 1e12
                   if rates.bf16_per_clock else None)
        fp32_tf = dev.sm_count * rates.fp32_per_clock * clock / 1e12
        arch, how = rates.architecture, f"{dev.sm_count} SMs x {dev.sm_clock_mhz} MHz x per-SM rates of cc {dev.compute_capability}"
    return GpuSpec(dev.name, arch, dev.compute_capability, dev.sm_count, dev.sm_clock_mhz, dev.vram_gib,
                   dev.bandwidth_bytes_s / 1e9, bf16_tf, fp32_tf, dev.bf16, dev.fp8,
                   f"derived from NVML facts ({how}); not in the catalogue")


# The CPU fallback runs the tiny model. Assumed, not measured: ~25 GFLOP/s per core for PyTorch FP32 GEMM with
# AVX2/AVX-512 and ~20 GB/s of memory bandwidth per node. bf16 on CPU is emulated, so the CPU path runs FP32.
CPU_GFLOPS_PER_CORE = 25.0
CPU_BANDWIDTH_GBS = 20.0


def cpu_device(node: str, threads: int, memory_gib: float = 16.0) -> GpuDevice:
    """The CPU of a node as a pseudo-card, so the CPU fallback goes through the same planner and simulator."""
    return GpuDevice(node, -1, f"CPU-{node}", "cpu", int(memory_gib * GIB), CPU_BANDWIDTH_GBS * 1e9,
                     max(1, threads), 0, (0, 0), False, False, virtual=True)


def _cpu_spec(dev: GpuDevice) -> GpuSpec:
    tf = dev.sm_count * CPU_GFLOPS_PER_CORE / 1e3
    return GpuSpec("cpu", "cpu", (0, 0), dev.sm_count, 0, dev.vram_gib, dev.bandwidth_bytes_s / 1e9, tf, tf,
                   False, False, f"assumed {CPU_GFLOPS_PER_CORE:g} GFLOP/s per thread, {CPU_BANDWIDTH_GBS:g} GB/s")


def device_from_spec(spec: GpuSpec, node: str, index: int) -> GpuDevice:
    """A virtual card of a catalogue model, with a deterministic fake uuid."""
    return GpuDevice(node, index, f"VIRT-{node}-{index}", spec.model, int(spec.vram_gib * GIB),
                     spec.bandwidth_gbs * 1e9, spec.sm_count, spec.boost_mhz, spec.compute_capability,
                     spec.bf16, spec.fp8, virtual=True)


def probe_nvml(node_name: str) -> list[GpuDevice]:
    """The GPUs of this machine through NVML (docs/model.md §12); [] when there is no library, driver or GPU.

    NVML ignores CUDA_VISIBLE_DEVICES: indices here are physical (PCI bus order, as CUDA_DEVICE_ORDER=PCI_BUS_ID).
    """
    try:
        import pynvml  # from nvidia-ml-py; imported here so `import cluster` never needs a driver
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    try:
        return [_probe_one(pynvml, node_name, i) for i in range(pynvml.nvmlDeviceGetCount())]
    except pynvml.NVMLError:
        return []
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _optional(call, *args, default=0):
    """One NVML fact that a device may not support (NotSupported on some boards, MIG, or old drivers)."""
    import pynvml
    try:
        return call(*args)
    except pynvml.NVMLError:
        return default


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _probe_one(nvml, node: str, index: int) -> GpuDevice:
    h = nvml.nvmlDeviceGetHandleByIndex(index)
    name = _text(nvml.nvmlDeviceGetName(h))
    cc = tuple(nvml.nvmlDeviceGetCudaComputeCapability(h))
    bus_bits = _optional(nvml.nvmlDeviceGetMemoryBusWidth, h)
    mem_mhz = _optional(nvml.nvmlDeviceGetMaxClockInfo, h, nvml.NVML_CLOCK_MEM)
    sm_mhz = _optional(nvml.nvmlDeviceGetMaxClockInfo, h, nvml.NVML_CLOCK_SM)
    cores = _optional(nvml.nvmlDeviceGetNumGpuCores, h)
    rates = SM_RATES.get(cc)
    sm_count = cores // rates.cores_per_sm if rates and cores else 0  # NVML has no SM count for whole GPUs
    return GpuDevice(node, index, _text(nvml.nvmlDeviceGetUUID(h)), name, int(nvml.nvmlDeviceGetMemoryInfo(h).total),
                     bus_bits / 8 * mem_mhz * 1e6 * 2, sm_count, sm_mhz, cc, cc >= (8, 0), cc >= (8, 9))
