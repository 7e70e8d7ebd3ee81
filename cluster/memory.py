"""Memory per stage per card, in GiB, and the sentence that refuses what does not fit.

Responsible for: what a stage worker holds on its card (weights it loads + KV cache for batch x context +
activations + CUDA context + workspace), what a card holds when it hosts several stages (one process sharing the
weights, or one process per stage), the usable budget of a card after the user's reserve, and a model of the vendor
runtime's single-card peak to check these numbers against published figures. Not responsible for: time
(costs.py) or choosing batches (placement.py).

Check against the vendor runtime (`vendor_single_card`, tests/test_cluster_costs.py). Published peaks: RTX 4090
'full mode' 11.18 GiB, 'max-context' 14.08 GiB; RTX 5060 Ti ordinary song 10.05 GiB.
- Modelled as the code of src/yue2 reads (default offload: AR and NAR halves never resident together, except for the
  moment the AR half is restored after a chunk; one CFG branch as cot=full defaults to guidance 1.0) the peaks are
  7.51 / 8.36 / 7.51 GiB: -32.8 %, -40.6 %, -25.2 %. The offload model explains only two thirds of the figures.
- With all weights resident and two CFG branches the same phase model gives 10.76 / 13.71 / 10.76 GiB:
  -3.7 %, -2.6 %, +7.1 %. The published peaks therefore look like resident weights + guidance rather than the
  offload default; which it was is an open question (a caching allocator holding freed blocks is another
  candidate: see WORKSPACE_GIB). Our own workers need neither: they load per stage.
"""
from __future__ import annotations

from dataclasses import dataclass

from .gpus import GIB, GpuDevice
from .workload import AR_STAGES, STAGES, ModelShape, TrackShape

# A process's CUDA context: driver state plus the kernel images of torch, cuBLAS and cuDNN that get loaded (lazy
# module loading keeps it under a GiB). Measured on the project's H200 (torch 2.11, NVML used memory): context +
# cuBLAS handle after one bf16 matmul = 0.72 GiB, of which torch itself held 0.05. We book 0.5 + 0.25 below.
CUDA_CONTEXT_GIB = 0.5
# cuBLAS workspaces and the caching allocator's rounding per process. (The allocator can hold far more than the live
# peak when tensor sizes vary: after decoding tiles of three sizes it reserved 4.3 GiB for a 2.2 GiB peak.)
WORKSPACE_GIB = 0.25
# Our engines prefill in chunks of this many tokens, which bounds the prefill activations (the vendor does not).
PREFILL_CHUNK = 4096
# Copies of the widest VAE activation (64 channels x 1920 samples per latent frame, fp32) alive at once: the input
# kept for the residual, SnakeBeta temporaries, the conv output. Measured on the H200 with stages/vae.py under
# inference_mode: peak allocated = 4.5 copies for tiles of 288, 544 and 1056 frames (2.18 GiB at core 1024).
VAE_LIVE_COPIES = 4.5
VAE_HALO_FRAMES = 16

# Weight groups each stage loads (docs/model.md §8). The acoustic stage runs the AR branch for its per-chunk prefill and
# the NAR branch for the ODE; its prefill keeps K/V only, so it never needs lm_head (0.70 GiB).
# The AR decode step also keeps its own copies of its matrices (stages/step_weights.py `for_format`), the "ar_step"
# group: in BF16 the q/k/v and gate/up matrices with the RMSNorm weights folded in (1.9 GB for yue2-3b); with FP8
# weights every matrix quantised from the model's (1.4 GB), which prefill reads too. (An FP8 AR checkpoint would
# spare the model's own AR matrices on an AR-only card; the planner books the quantise-when-loading case.)
WEIGHT_GROUPS = {
    "plan": ("ar_layers", "embed", "lm_head", "ar_step"),
    "semantic": ("ar_layers", "embed", "lm_head", "ar_step"),
    "acoustic": ("ar_layers", "embed", "nar_layers", "nar_aux"),
    "decode": ("vae_decoder",),
}
# Where the decode runs on tensor cores (gpus.decodes_on_tensor_cores) it also keeps its convolutions' weights split
# into TF32 heads and tails (stages/vae_tf32x3.py): two more FP32 copies of the decoder's matrices.
TENSOR_CORE_DECODE_GROUP = "vae_tf32x3"


def stage_groups(stage: str, tensor_core_decode: bool = False) -> tuple[str, ...]:
    extra = (TENSOR_CORE_DECODE_GROUP,) if stage == "decode" and tensor_core_decode else ()
    return WEIGHT_GROUPS[stage] + extra


def group_bytes(model: ModelShape, group: str) -> float:
    wb = model.weight_bytes
    return {"ar_layers": (model.branch_params + model.hidden) * wb,    # + the shared final norm
            "embed": model.embed_params * wb,
            "lm_head": model.embed_params * wb,
            "nar_layers": model.branch_params * wb,
            "nar_aux": (model.aux_params + model.pe_params) * wb,
            "vae_decoder": model.vae_decoder_params * model.vae_bytes,
            TENSOR_CORE_DECODE_GROUP: 2 * model.vae_decoder_params * model.vae_bytes,
            "ar_step": _step_copy_bytes(model)}[group]


def _step_copy_bytes(model: ModelShape) -> float:
    if model.ar_format != "bf16":
        return model.ar_step_matrix_bytes
    return model.layers * model.hidden * ((model.heads + 2 * model.kv_heads) * model.head_dim
                                          + 2 * model.intermediate) * model.weight_bytes


@dataclass(frozen=True)
class MemoryNeed:
    """GiB one process needs on its card, by kind."""
    stages: tuple[str, ...]
    batches: tuple[int, ...]          # per stage, same order
    weights: float
    kv: float
    activations: float
    context: float
    workspace: float
    decode_core: int | None = None    # VAE tile core frames when decode is hosted

    @property
    def total(self) -> float:
        return self.weights + self.kv + self.activations + self.context + self.workspace

    def breakdown(self) -> str:
        return (f"weights {self.weights:.2f} + KV {self.kv:.2f} + activations {self.activations:.2f}"
                f" + CUDA context {self.context:.2f} + workspace {self.workspace:.2f}")


@dataclass(frozen=True)
class Peaks:
    """The largest dimensions of a workload that memory depends on (computed once per plan)."""
    kv_capacity: tuple[int, int]     # KV slots per track: plan, semantic (|prefix| + max_tokens; docs/model.md §4)
    prefix: tuple[int, int]          # longest prefix: plan, semantic
    cfg_branches: int
    acoustic_kv_tokens: int          # longest AR prefix of an acoustic chunk (L_a)
    acoustic_activation_bytes: float
    frames: int                      # longest song in latent frames


def peaks(model: ModelShape, tracks: list[TrackShape]) -> Peaks:
    def capacity(stage: str) -> int:
        limit = model.plan_max_tokens if stage == "plan" else model.semantic_max_tokens
        return min(model.context, max(t.prefix_tokens(stage) + max(limit, t.generated_tokens(stage)) for t in tracks))
    per_token = _prefill_bytes_per_token(model)
    kv_row = 2 * model.kv_heads * model.head_dim * model.weight_bytes   # [K_prefix; k] concat per layer
    chunks = [c for t in tracks for c in t.acoustic_chunks(model)]
    act = max(max(per_token * min(PREFILL_CHUNK, la), per_token * ln + kv_row * (la + ln) + 16 * ln * model.latent_dim)
              for la, ln in chunks)
    return Peaks((capacity("plan"), capacity("semantic")),
                 tuple(max(t.prefix_tokens(s) for t in tracks) for s in AR_STAGES),
                 max(t.cfg_branches for t in tracks), max(la for la, _ in chunks), act,
                 max(t.semantic_tokens for t in tracks))


def _prefill_bytes_per_token(model: ModelShape) -> float:
    # hidden, norm output, q/k/v, attention output (~4 x hidden) + gate, up, act, product (4 x intermediate).
    return (4 * model.hidden + 4 * model.intermediate) * model.weight_bytes


def stage_kv_bytes(stage: str, model: ModelShape, pk: Peaks, batch: int) -> float:
    if stage in AR_STAGES:
        return batch * pk.cfg_branches * pk.kv_capacity[AR_STAGES.index(stage)] * model.ar_kv_bytes_per_token
    if stage == "acoustic":  # the AR prefix K/V of one chunk stays for the whole ODE
        return batch * pk.acoustic_kv_tokens * model.kv_bytes_per_token
    return 0.0


def stage_activation_bytes(stage: str, model: ModelShape, pk: Peaks, batch: int, core: int) -> float:
    if stage in AR_STAGES:
        prefill = _prefill_bytes_per_token(model) * min(PREFILL_CHUNK, pk.prefix[AR_STAGES.index(stage)])
        return prefill + batch * pk.cfg_branches * model.vocab * 16    # + fp32 logits and sampling sort buffers
    if stage == "acoustic":
        return batch * pk.acoustic_activation_bytes
    frames = min(core, pk.frames) + 2 * VAE_HALO_FRAMES
    return batch * model.vae_peak_elements_per_frame * model.vae_bytes * VAE_LIVE_COPIES * frames


def card_memory(batches: dict[str, int], model: ModelShape, pk: Peaks, core: int = 1024,
                shared_process: bool = True, tensor_core_decode: bool = False) -> MemoryNeed:
    """Memory of a card hosting `batches` (stage -> batch). Shared process: weights loaded once, one CUDA context.
    `tensor_core_decode`: the card decodes on tensor cores (gpus.decodes_on_tensor_cores) and keeps split weights."""
    stages = tuple(s for s in STAGES if s in batches)
    kv = sum(stage_kv_bytes(s, model, pk, batches[s]) for s in stages) / GIB
    act = sum(stage_activation_bytes(s, model, pk, batches[s], core) for s in stages) / GIB
    if shared_process:
        groups = {g for s in stages for g in stage_groups(s, tensor_core_decode)}
        weights, processes = sum(group_bytes(model, g) for g in groups) / GIB, 1
    else:
        weights = sum(group_bytes(model, g) for s in stages for g in stage_groups(s, tensor_core_decode)) / GIB
        processes = len(stages)
    return MemoryNeed(stages, tuple(batches[s] for s in stages), weights, kv, act, CUDA_CONTEXT_GIB * processes,
                      WORKSPACE_GIB * processes, core if "decode" in batches else None)


def stage_memory(stage: str, model: ModelShape, tracks: list[TrackShape], batch: int = 1, core: int = 1024) -> MemoryNeed:
    """One stage alone in its own process, for these tracks."""
    return card_memory({stage: batch}, model, peaks(model, tracks), core)


def usable_gib(device: GpuDevice, reserve_gib: float) -> float:
    """What a card offers after the user's reserve (the CPU fallback is not checked: host RAM is the user's)."""
    return float("inf") if device.is_cpu else max(0.0, device.vram_gib - reserve_gib)


def refusal(stage: str, need: MemoryNeed, device: GpuDevice, reserve_gib: float) -> str:
    """e.g. 'acoustic needs 8.30 GiB with batch 1 (weights 6.06 + ...); RTX 3050 Laptop (laptop/0) offers 4.00 GiB
    after the 2 GiB reserve'."""
    label = f"{device.spec().model} ({device.key})"
    batch = need.batches[need.stages.index(stage)] if stage in need.stages else 1
    return (f"{stage} needs {need.total:.2f} GiB with batch {batch} ({need.breakdown()}); {label} offers "
            f"{usable_gib(device, reserve_gib):.2f} GiB after the {reserve_gib:g} GiB reserve")


@dataclass(frozen=True)
class VendorPeak:
    phases: tuple[tuple[str, float], ...]   # (phase, GiB including CUDA context and workspace)

    @property
    def peak(self) -> float:
        return max(gib for _, gib in self.phases)

    @property
    def peak_phase(self) -> str:
        return max(self.phases, key=lambda p: p[1])[0]


def vendor_single_card(model: ModelShape, track: TrackShape, *, resident: bool = False, core: int = 1024,
                       semantic_prefix: int | None = None) -> VendorPeak:
    """Peak of the vendor runtime (one process, all stages) by phase, as read from src/yue2/{pipeline,nar,cuda_graph}.py.

    resident=False is its default offload: NAR weights on the CPU during AR generation; for each acoustic chunk the
    AR half prefills, moves to the CPU, the NAR half runs the ODE, then the AR half is restored while the NAR half is
    still on the card. Its AR prefill runs the whole prefix at once; decode moves the MoT off the card first.
    """
    gb = {g: group_bytes(model, g) / GIB for g in ("ar_layers", "embed", "lm_head", "nar_layers", "nar_aux", "vae_decoder")}
    ar_half = gb["ar_layers"] + gb["embed"] + gb["lm_head"]
    nar_half = gb["nar_layers"] + gb["nar_aux"]
    fixed = CUDA_CONTEXT_GIB + WORKSPACE_GIB
    kv_tok, act_tok, b = model.kv_bytes_per_token / GIB, _prefill_bytes_per_token(model) / GIB, track.cfg_branches
    prefix = {"plan": track.prompt_tokens, "semantic": semantic_prefix or track.semantic_prefix_tokens}
    phases = []
    for stage, limit in (("plan", model.plan_max_tokens), ("semantic", model.semantic_max_tokens)):
        capacity = min(model.context, prefix[stage] + limit)
        weights = ar_half + (0 if not resident else nar_half)
        phases.append((stage, weights + b * capacity * kv_tok + act_tok * prefix[stage] + fixed))
    la, ln = (prefix["semantic"] + track.semantic_tokens + 1), track.semantic_tokens + 2
    ode_act = act_tok * ln + 2 * model.kv_heads * model.head_dim * model.weight_bytes * (la + ln) / GIB
    phases.append(("acoustic prefill", (ar_half if not resident else ar_half + nar_half)
                   + la * kv_tok + act_tok * la + fixed))
    phases.append(("acoustic ODE", (nar_half if not resident else ar_half + nar_half) + la * kv_tok + ode_act + fixed))
    if not resident:
        phases.append(("AR restore", ar_half + nar_half + fixed))
    frames = min(core, track.semantic_tokens) + 2 * VAE_HALO_FRAMES
    tile = model.vae_peak_elements_per_frame * model.vae_bytes * VAE_LIVE_COPIES * frames / GIB
    phases.append(("decode", gb["vae_decoder"] + tile + fixed))
    return VendorPeak(tuple(phases))
