"""The Oobleck VAE decoder: latents [N, latent_dim] → 48 kHz stereo audio, full or tiled (docs/model.md §5, §8, §11).

Owns the VAE file layout (encoder and decoder tensor names and shapes), random-init weights for test checkpoints,
the decoder module with weight norm folded once at load, the receptive-field arithmetic behind the tiling halo, and
the tiled decode itself. Runs the decoder only, always in FP32 with TF32 off; never the encoder.
Knows nothing about Ray, files other than the one safetensors it is pointed at, or how latents were made.
"""
from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch import nn

from . import vae_tf32x3
from .checkpoint import check_layout, load_tensors
from .compiled import compiled
from .config import DECODE_PRECISIONS as PRECISIONS, DEFAULT_DECODE_PRECISION, VaeConfig

Shape = tuple[int, ...]
KERNEL = 7                  # stem, residual and output convs
DILATIONS = (1, 3, 9)       # the three ResidualUnits of every block
# Random init only (tuned on tiny): each residual branch adds ~4 % of the signal's power, so activations grow
# ~2.5× in std over the six blocks (~13× at gain 0.5); the last conv's filter norm then puts random audio at
# std ≈ 0.2, clipped in < 1 % of samples.
RESIDUAL_GAIN = 0.2
OUTPUT_GAIN = 0.1


# ----------------------------------------------------------------------------------------------------------------
# Layout: name → (shape, init gain). The gain is weight_g's value in a random checkpoint; other kinds ignore it.

def _widths(cfg: VaeConfig) -> list[int]:
    """Channel widths, shallow to deep: c_mults prefixed with 1 (release: 64, 64, 128, …, 2048)."""
    return [cfg.channels * m for m in (1, *cfg.c_mults)]


def _wn(out: dict, prefix: str, w: Shape, gain: float, bias: int | None) -> None:
    """A weight-normed conv: g has one entry per dim-0 slice of v (the input channel for ConvTranspose)."""
    out[f"{prefix}.weight_g"] = ((w[0], 1, 1), gain)
    out[f"{prefix}.weight_v"] = (w, 0.0)
    if bias is not None:
        out[f"{prefix}.bias"] = ((bias,), 0.0)


def _snake(out: dict, prefix: str, ch: int) -> None:
    out[f"{prefix}.alpha"] = ((ch,), 0.0)
    out[f"{prefix}.beta"] = ((ch,), 0.0)


def _residual(out: dict, prefix: str, ch: int) -> None:
    """Snake, conv k7 (dilated), Snake, conv k1; the skip connection has no weights."""
    _snake(out, f"{prefix}.layers.0", ch)
    _wn(out, f"{prefix}.layers.1", (ch, ch, KERNEL), 1.0, ch)
    _snake(out, f"{prefix}.layers.2", ch)
    _wn(out, f"{prefix}.layers.3", (ch, ch, 1), RESIDUAL_GAIN, ch)


def _decoder_layout(cfg: VaeConfig, out: dict) -> None:
    w, depth = _widths(cfg), len(cfg.strides)
    _wn(out, "decoder.layers.0", (w[-1], cfg.latent_dim, KERNEL), 1.0, w[-1])
    for k in range(1, depth + 1):           # block k runs deep → shallow: widths[i] → widths[i-1], stride s_{i-1}
        i = depth + 1 - k
        cin, cout, s = w[i], w[i - 1], cfg.strides[i - 1]
        p = f"decoder.layers.{k}.layers"
        _snake(out, f"{p}.0", cin)
        # ConvTranspose v is [in, out, 2s]; each output sample sees 2 taps of every input channel, so a filter norm of
        # sqrt(out·s/in) keeps the signal's power.
        _wn(out, f"{p}.1", (cin, cout, 2 * s), math.sqrt(cout * s / cin), cout)
        for r in range(len(DILATIONS)):
            _residual(out, f"{p}.{r + 2}", cout)
    _snake(out, f"decoder.layers.{depth + 1}", w[0])
    _wn(out, f"decoder.layers.{depth + 2}", (cfg.audio_channels, w[0], KERNEL), OUTPUT_GAIN, None)


def _encoder_layout(cfg: VaeConfig, out: dict) -> None:
    w, depth = _widths(cfg), len(cfg.strides)
    _wn(out, "encoder.layers.0", (w[0], cfg.audio_channels, KERNEL), 1.0, w[0])
    for k in range(1, depth + 1):           # block k runs shallow → deep: widths[k-1] → widths[k], stride s_{k-1}
        cin, cout, s = w[k - 1], w[k], cfg.strides[k - 1]
        p = f"encoder.layers.{k}.layers"
        for r in range(len(DILATIONS)):
            _residual(out, f"{p}.{r}", cin)
        _snake(out, f"{p}.{len(DILATIONS)}", cin)
        _wn(out, f"{p}.{len(DILATIONS) + 1}", (cout, cin, 2 * s), 1.0, cout)
    _snake(out, f"encoder.layers.{depth + 1}", w[-1])
    _wn(out, f"encoder.layers.{depth + 2}", (cfg.encoder_latent_dim, w[-1], 3), 1.0, cfg.encoder_latent_dim)


def _layout(cfg: VaeConfig) -> dict[str, tuple[Shape, float]]:
    out: dict[str, tuple[Shape, float]] = {}
    _encoder_layout(cfg, out)
    _decoder_layout(cfg, out)
    return out


def vae_shapes(cfg: VaeConfig) -> dict[str, Shape]:
    """Every tensor of the released VAE `model.safetensors` (encoder and decoder), name → shape."""
    return {name: shape for name, (shape, _) in _layout(cfg).items()}


def decoder_names(cfg: VaeConfig) -> list[str]:
    """The `decoder.*` tensors: all that decoding reads."""
    return [name for name in vae_shapes(cfg) if name.startswith("decoder.")]


def random_vae_tensors(cfg: VaeConfig, seed: int) -> dict[str, torch.Tensor]:
    """A full random VAE state (FP32, CPU) for test checkpoints; the same seed gives the same tensors.

    weight_v ~ N(0, 1) and weight_g set so each folded filter has the layout's gain as its norm, which keeps the
    random decoder's activations O(1) from layer to layer; biases N(0, 0.01²); SnakeBeta alpha = beta = 0 (log scale
    → 1). Says nothing about what trained weights look like.
    """
    gen = torch.Generator("cpu").manual_seed(seed)
    out: dict[str, torch.Tensor] = {}
    for name, (shape, gain) in _layout(cfg).items():
        if name.endswith(".weight_g"):
            out[name] = torch.full(shape, gain)
        elif name.endswith(".weight_v"):
            out[name] = torch.randn(shape, generator=gen)
        elif name.endswith(".bias"):
            out[name] = 0.01 * torch.randn(shape, generator=gen)
        else:
            out[name] = torch.zeros(shape)
    return out


# ----------------------------------------------------------------------------------------------------------------
# The decoder module. Its parameter names are the checkpoint's `decoder.*` names minus the prefix, with each
# weight_g / weight_v pair folded into one `weight`.

def _check_supported(cfg: VaeConfig) -> None:
    """Only the standard release decoder is specified (docs/model.md §11.3); anything else is refused by name."""
    wrong = {"use_filter": (cfg.use_filter, False), "snake_type": (cfg.snake_type, "vanilla"),
             "release_variant": (cfg.release_variant, "standard"), "final_tanh": (cfg.final_tanh, False),
             "use_snake": (cfg.use_snake, True)}
    for field, (got, want) in wrong.items():
        if got != want:
            raise ValueError(f"VaeConfig.{field}={got!r} is not supported (only {want!r}; docs/model.md §11.3)")


def snake(x: torch.Tensor, log_alpha: torch.Tensor, log_beta: torch.Tensor) -> torch.Tensor:
    """y = x + (1 / (e^β + 1e-9)) · sin²(e^α · x), per channel. x [B, C, L]; log_alpha, log_beta [C]."""
    alpha = log_alpha.exp()[None, :, None]
    inv_beta = 1.0 / (log_beta.exp()[None, :, None] + 1e-9)   # reciprocal first, then multiply (§11.8)
    return x + inv_beta * torch.sin(x * alpha).pow(2)


@functools.cache
def _fused_snake():
    """On CUDA the snake runs as one compiled kernel (eager: six kernels and five full-size temporaries, ~28 % of an
    H200 decode); dynamic shapes, so one compile serves every layer and tile."""
    return compiled(snake, fullgraph=True, dynamic=True)


class SnakeBeta(nn.Module):
    """`snake` with α, β stored in log scale."""

    def __init__(self, channels: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:    # [B, C, L] → [B, C, L]
        if not x.is_cuda:
            return snake(x, self.alpha, self.beta)
        # Detached: torch.compile holds a parameter's shape static, which would pin the channel count and compile
        # once per decoder width; plain tensors keep every dimension dynamic.
        return _fused_snake()(x, self.alpha.detach(), self.beta.detach())


class ResidualUnit(nn.Module):
    def __init__(self, ch: int, dilation: int):
        super().__init__()
        self.layers = nn.Sequential(
            SnakeBeta(ch), nn.Conv1d(ch, ch, KERNEL, dilation=dilation, padding=3 * dilation),
            SnakeBeta(ch), nn.Conv1d(ch, ch, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:    # length-preserving
        return x + self.layers(x)


class DecoderBlock(nn.Module):
    """Snake, ×s upsampling (k 2s, pad ⌈s/2⌉: L → (L−1)s − 2⌈s/2⌉ + 2s), three ResidualUnits."""

    def __init__(self, cin: int, cout: int, s: int):
        super().__init__()
        self.layers = nn.Sequential(
            SnakeBeta(cin), nn.ConvTranspose1d(cin, cout, 2 * s, stride=s, padding=math.ceil(s / 2)),
            *(ResidualUnit(cout, d) for d in DILATIONS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:    # [B, cin, L] → [B, cout, ≈ L·s]
        return self.layers(x)


class OobleckDecoder(nn.Module):
    """z [B, latent_dim, T] FP32 → raw audio [B, audio_channels, 1920·T − 64] (no clamp, no tanh).

    Construct on the `meta` device and fill with `load_decoder`; the module itself never sees weight norm.
    """

    def __init__(self, cfg: VaeConfig):
        super().__init__()
        _check_supported(cfg)
        self.cfg = cfg
        w, depth = _widths(cfg), len(cfg.strides)
        blocks = [DecoderBlock(w[i], w[i - 1], cfg.strides[i - 1]) for i in range(depth, 0, -1)]
        self.layers = nn.Sequential(
            nn.Conv1d(cfg.latent_dim, w[-1], KERNEL, padding=KERNEL // 2), *blocks,
            SnakeBeta(w[0]), nn.Conv1d(w[0], cfg.audio_channels, KERNEL, padding=KERNEL // 2, bias=False))

    def output_length(self, frames: int) -> int:
        return audio_samples(self.cfg, frames)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        if z.ndim != 3 or z.shape[1] != self.cfg.latent_dim or z.dtype != torch.float32:
            raise ValueError(f"decoder input must be float32 [B, {self.cfg.latent_dim}, T], "
                             f"got {z.dtype} {list(z.shape)}")
        return self.layers(z)


def audio_samples(cfg: VaeConfig, frames: int) -> int:
    """Samples the decoder makes of `frames` latent frames: 1920·T − 64 for the released strides (each block
    maps L → (L − 1)·s − 2⌈s/2⌉ + 2s)."""
    n = frames
    for s in reversed(cfg.strides):
        n = (n - 1) * s - 2 * math.ceil(s / 2) + 2 * s
    return n


def _fold(raw: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Checkpoint `decoder.*` tensors → module state: w = g·v/‖v‖ over all dims but 0, by torch's op (§11.8)."""
    state = {}
    for name, t in raw.items():
        key = name.removeprefix("decoder.")
        if key.endswith(".weight_v"):
            base = key.removesuffix("_v")
            state[base] = torch._weight_norm(t, raw[f"decoder.{base}_g"], 0)
        elif not key.endswith(".weight_g"):
            state[key] = t
    return state


def check_decoder_file(vae_dir: str | Path, cfg: VaeConfig) -> tuple[Path, list[str]]:
    """The VAE file's whole layout checked from its header (names, shapes, a damaged file) → (path, decoder names)."""
    path = Path(vae_dir) / "model.safetensors"
    names = decoder_names(cfg)
    check_layout(path, vae_shapes(cfg), needed=names)
    return path, names


def load_decoder(vae_dir: str | Path, cfg: VaeConfig, device: str | torch.device = "cpu") -> OobleckDecoder:
    """Check the whole VAE file's layout, then read only its `decoder.*` tensors (FP32) into a ready decoder."""
    with torch.device("meta"):
        decoder = OobleckDecoder(cfg)               # refuses unsupported configs before any I/O
    path, names = check_decoder_file(vae_dir, cfg)
    raw = load_tensors(path, names, dtype=torch.float32, device=device)
    decoder.load_state_dict(_fold(raw), strict=True, assign=True)
    decoder.eval().requires_grad_(False)
    if decoder.layers[0].weight.is_cuda:
        _warm(decoder)
    return decoder


def _warm(decoder: OobleckDecoder) -> None:
    """Compile now what the first song's decode would compile inside its stage: the fused snake, and on a card that
    takes the default tf32x3 path its conv kernels (one per conv shape, whatever the tile's length) and the snake
    on channels-last views. A 4-frame decode; the tf32x3 path also splits its weights now (0.5 GiB for the
    release VAE, which the planner books)."""
    z = torch.zeros(1, decoder.cfg.latent_dim, 4, device=decoder.layers[0].weight.device)
    with torch.inference_mode():
        decoder(z)
        if DEFAULT_DECODE_PRECISION == "tf32x3" and vae_tf32x3.usable(decoder):
            vae_tf32x3.forward(vae_tf32x3.plan_for(decoder), z)


# ----------------------------------------------------------------------------------------------------------------
# Receptive field and tiling.

def _halo_of(decoder: OobleckDecoder) -> int:
    """Minimum halo (latent frames) for which a tile's kept samples equal the full decode's.

    Tracks the positions a tile computes exactly as offsets from its edges: [left + lo, right + hi) in the current
    layer's indices, starting from [left, right) in latent frames. At a tile edge the tile sees zero padding where
    the full decode has real values, so every layer loses exact positions. Snakes are pointwise and a residual's
    skip cannot widen its branch's interval, so only the convs, in forward order, matter. With n the output index
    and i the input index (lo, hi carried through the same maps as the edges, which are multiples of the stride):
    conv (k, dilation d, pad p): n reads n − p + d·j, j ∈ [0, k)   → [lo + p, hi + p − d(k−1))
    conv-transpose (k, stride s, pad p): n = i·s − p + j, j ∈ [0, k) → [(lo−1)·s + k − p, hi·s − p)
    Both are affine in the tile edge, so the final offsets lo, −hi (samples; 22,767 and 22,831 for the released
    strides) are the same for every tile, and the halo is the larger one rounded up to whole frames.
    """
    lo = hi = 0
    for m in decoder.modules():
        k, p = (m.kernel_size[0], m.padding[0]) if isinstance(m, (nn.Conv1d, nn.ConvTranspose1d)) else (0, 0)
        if isinstance(m, nn.ConvTranspose1d):
            s = m.stride[0]
            lo, hi = (lo - 1) * s + k - p, hi * s - p
        elif isinstance(m, nn.Conv1d):
            lo, hi = lo + p, hi + p - m.dilation[0] * (k - 1)
    hop = decoder.cfg.hop
    return max(0, -(-lo // hop), -(hi // hop))     # ceil(lo / hop), ceil(−hi / hop)


def required_halo(cfg: VaeConfig) -> int:
    """The decoder's receptive field in latent frames per side (12 for the released strides)."""
    with torch.device("meta"):
        return _halo_of(OobleckDecoder(cfg))


def _decode_tiles(decoder: OobleckDecoder, z: torch.Tensor, core: int, halo: int, run=None) -> torch.Tensor:
    """docs/model.md §5's tiling without the halo check: [B, C, T] → [B, audio_channels, 1920·T − 64]. `run` decodes
    a tile (default: the decoder itself). One tile at a time: on an H100 two tiles in a batch were 3.6 % faster a
    tile for 1.9 GiB more, four no faster (docs/benchmarks.md, 2026-12-06, twenty-fifth session)."""
    run = run or decoder
    hop, frames = decoder.cfg.hop, z.shape[-1]
    total = decoder.output_length(frames)
    pieces = []
    for s in range(0, frames, core):
        e = min(s + core, frames)
        left, right = max(0, s - halo), min(frames, e + halo)
        y = run(z[:, :, left:right])
        o, n = (s - left) * hop, min(e * hop, total) - s * hop     # the last tile loses the 64-sample tail
        pieces.append(y[..., o:o + n])
    return torch.cat(pieces, dim=-1)


def decode_tiled(decoder: OobleckDecoder, z: torch.Tensor, core: int, halo: int, run=None) -> torch.Tensor:
    """Decode z [B, latent_dim, T] in tiles of `core` frames, each widened by `halo` frames per side; no crossfade.

    Equals the full decode (to float rounding) because the halo covers the receptive field, so each kept sample
    sees the same inputs it would in one pass. A halo below `required_halo` would leave seams: it is an error.
    """
    need = _halo_of(decoder)
    if halo < need:
        raise ValueError(f"halo {halo} frames is below the decoder's receptive field ({need} frames)")
    if core < 1 or z.shape[-1] < 1:
        raise ValueError(f"need core >= 1 and at least one latent frame, got core {core}, T {z.shape[-1]}")
    return _decode_tiles(decoder, z, core, halo, run)


# How the decoder's convolutions multiply on CUDA. "tf32x3", the default: every convolution our Triton kernel on
# tensor cores with three TF32 products per FP32 one (vae_tf32x3.py): FP32's accuracy (on an H200 closer to FP64
# than cuDNN's FP32, and 2.9x faster: docs/benchmarks.md), not cuDNN FP32's bytes; a card before Hopper, or a
# decoder whose widths the kernel cannot take, decodes in cuDNN FP32 instead. "fp32": cuDNN's FP32 on every card
# (TF32 switched off, which cuDNN would allow otherwise). "tf32": TensorFloat-32 tensor cores, with audio ~3e-4
# mean / ~2.5e-3 max abs from FP32: a documented mode, another song's bytes. CPUs ignore the setting.
# The names live in config.DECODE_PRECISIONS (imported here as PRECISIONS), where the CLI reads them without torch.


@contextlib.contextmanager
def _tf32(allowed: bool) -> Iterator[None]:
    """TF32 convs and matmuls on or off for the block; restores the caller's settings."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def thread_invariant_convs() -> None:
    """On the CPU, oneDNN picks conv blockings by thread count, so the same latents gave audio a few LSB apart at 1
    and 2 threads; PyTorch's own conv kernels give the same bytes at any count. Switched off for the whole process,
    once, and never back: a scoped switch would let a stage in another thread run half its convs each way. Cost,
    tiny decoder, 1,100 frames, 2-core box: 1 thread 0.82 → 1.66 s, 2 threads 0.97 → 0.86 s. The AR and acoustic
    stages use no oneDNN kernel in FP32 (their bytes are the same either way; tested)."""
    torch.backends.mkldnn.enabled = False


def decode_audio(decoder: OobleckDecoder, latents: np.ndarray | torch.Tensor, core: int, halo: int,
                 precision: str = DEFAULT_DECODE_PRECISION) -> np.ndarray:
    """Latents [N, latent_dim] → float32 audio [1920·N − 64, audio_channels] in [−1, 1], on the CPU."""
    if precision not in PRECISIONS:
        raise ValueError(f"decode precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    z = torch.as_tensor(latents, dtype=torch.float32)
    if z.ndim != 2 or z.shape[1] != decoder.cfg.latent_dim:
        raise ValueError(f"latents must be [N, {decoder.cfg.latent_dim}], got {list(z.shape)}")
    z = z.to(decoder.layers[0].weight.device).T[None]          # [1, latent_dim, N]
    if z.device.type == "cpu":
        thread_invariant_convs()
    run = None
    if precision == "tf32x3" and z.is_cuda and vae_tf32x3.usable(decoder):
        plan = vae_tf32x3.plan_for(decoder)
        run = functools.partial(vae_tf32x3.forward, plan)
    with _tf32(precision == "tf32"), torch.inference_mode():
        y = decode_tiled(decoder, z, core, halo, run)          # [1, C, samples]
        audio = y.clamp(-1, 1)[0].T.contiguous()
        if audio.is_cuda:      # into page-locked memory: a pageable copy ran at ~1.7 GB/s (48 ms for a song)
            audio = torch.empty(audio.shape, dtype=audio.dtype, pin_memory=True).copy_(audio)
        return audio.numpy()
