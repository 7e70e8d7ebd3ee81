"""Probe (written on a CPU box, not yet run; run on the GPU machine from the root of a tree with
`2026-12-05-cpu-s47-decode-tf32x3.patch` applied: `python docs/measured/2026-12-05-cpu-s47-conv-tf32x3-probe.py
OUT.json`): can the decoder run at FP32's accuracy on tensor cores, fast enough for issue 9's `decode_s` ≤ 0.35 s?

The FP32 decode (0.534 s a reference track on an H200) is bound by cuDNN's FP32 convolutions on the CUDA cores
(~27–30 TFLOP/s). The s28 probe's Triton kernel (3×TF32 in `tl.dot`, x loaded 4 bytes at a time in [C, L] layout)
reached only ~16. The patch's kernel (`stages/_conv_tf32x3_triton.py`) takes channels-last activations through TMA,
so both MMA operands are K-major as Hopper's TF32 MMA wants, splits x in registers, reads the weights pre-split, and
sums each step's three products in a fresh accumulator (chained into the running sum, ptxas serialised the MMAs).

1. Every convolution of one decode tile (1,056 frames; the release widths, random weights) alone: cuDNN FP32 and
   TF32 in today's [B, C, L] layout, the kernel at each tiling that fits; ms, TFLOP/s, and each one's max abs
   distance from an FP64 convolution relative to the output's max abs.
2. A whole reference track (5,371 frames) through `vae.decode_audio`: fp32, tf32, tf32x3 with the default tilings
   and with step 1's best tiling per GEMM shape; seconds (best of three) and the audio's distance from the FP32
   decode and from an FP64 decode; tf32x3 run twice for the same bytes.
"""
from __future__ import annotations

import copy
import json
import statistics
import sys

import numpy as np
import torch
from torch import nn

from stages import vae, vae_tf32x3 as tc
from stages.config import from_toml

TILINGS = (tc.Tiling(128, 128, 32, 8, 3), tc.Tiling(128, 128, 32, 8, 4), tc.Tiling(128, 128, 16, 8, 4),
           tc.Tiling(64, 128, 32, 4, 4), tc.Tiling(64, 256, 32, 8, 3), tc.Tiling(128, 64, 32, 4, 3),
           tc.Tiling(256, 64, 32, 8, 3), tc.Tiling(64, 64, 32, 4, 4), tc.Tiling(128, 32, 32, 4, 3),
           tc.Tiling(128, 16, 32, 4, 3), tc.Tiling(128, 128, 64, 8, 2), tc.Tiling(128, 64, 64, 8, 3))
TILE_FRAMES = 1056          # a 1,024-frame core and a 16-frame halo on each side


def ms(fn, reps: int = 10) -> float:
    """ms per call: `reps` calls queued back to back between two events, median of three such batches (a call's
    host work, four descriptors and a launch, then overlaps the calls before it unless the kernel is shorter)."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(3):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / reps)
    return statistics.median(times)


def decoder_on_cuda(cfg) -> vae.OobleckDecoder:
    decoder = vae.OobleckDecoder(cfg)
    raw = {k: v for k, v in vae.random_vae_tensors(cfg, 0).items() if k.startswith("decoder.")}
    decoder.load_state_dict(vae._fold(raw), strict=True)
    return decoder.cuda().eval().requires_grad_(False)


def convs_in_order(decoder, frames: int):
    """(module, input length) for every conv of a tile of `frames`, in forward order."""
    out, length = [], frames
    for m in decoder.modules():
        if isinstance(m, nn.ConvTranspose1d):
            out.append((m, length))
            s, p = m.stride[0], m.padding[0]
            length = (length + 1) * s - 2 * p
        elif isinstance(m, nn.Conv1d):
            out.append((m, length))
    return out


def gemm_of(m, tiling):
    return tc.from_conv_transpose(m, tiling) if isinstance(m, nn.ConvTranspose1d) else tc.from_conv(m, tiling)


def key_of(m):
    if isinstance(m, nn.ConvTranspose1d):
        return (m.in_channels, m.stride[0] * m.out_channels, 2)
    return (m.in_channels, m.out_channels, m.kernel_size[0])


def ident_of(m, length: int) -> tuple:
    return type(m).__name__, m.in_channels, m.out_channels, m.kernel_size[0], m.dilation[0], length


def per_conv(decoder) -> tuple[list[dict], dict]:
    """One row per distinct conv of a tile (the three 1×1 convs of a block are one), and the best tiling per GEMM
    shape."""
    rows, best = [], {}
    seen = set()
    g = torch.Generator(device="cuda").manual_seed(0)
    for m, length in convs_in_order(decoder, TILE_FRAMES):
        ident = ident_of(m, length)
        if ident in seen:
            continue
        seen.add(ident)
        x = torch.randn(1, m.in_channels, length, device="cuda", generator=g)
        with torch.inference_mode():
            want = copy.deepcopy(m).double()(x.double())
            scale = want.abs().max().item()
            macs = want.numel() * m.in_channels * m.kernel_size[0]
            if isinstance(m, nn.ConvTranspose1d):
                macs //= m.stride[0]                    # each output sees 2 of the 2s taps
            row = {"conv": type(m).__name__, "c_in": m.in_channels, "c_out": m.out_channels, "k": m.kernel_size[0],
                   "dilation": m.dilation[0], "stride": m.stride[0], "length": length, "gflop": 2 * macs / 1e9}
            for name, allow in (("fp32", False), ("tf32", True)):
                with vae._tf32(allow):
                    row[f"{name}_ms"] = ms(lambda: m(x))
                    row[f"{name}_err"] = (m(x).double() - want).abs().max().item() / scale
            x_cl = x.transpose(1, 2).contiguous()
            tried = []
            for t in TILINGS:
                if m.in_channels % t.bk or (t.bn > 16 and t.bn > 2 * key_of(m)[1]):
                    continue
                try:
                    gm = gemm_of(m, t)
                    y = tc.apply(gm, x_cl).transpose(1, 2)
                    err = (y.double() - want).abs().max().item() / scale
                    tried.append((ms(lambda: tc.apply(gm, x_cl)), t, err))
                except Exception as exc:                 # a tiling that does not fit: say so and go on
                    print(f"  {ident} {t}: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}", flush=True)
            if not tried:
                print(f"  {ident}: no tiling fits", flush=True)
                continue
            t_ms, t_best, t_err = min(tried, key=lambda r: r[0])
            default = next((r for r in tried if r[1] == tc.default_tiling(m.in_channels, key_of(m)[1])), None)
            row |= {"x3_ms": t_ms, "x3_tiling": list(t_best.__dict__.values()), "x3_err": t_err,
                    "x3_default_ms": default[0] if default else None,
                    "x3_all": [[r[0], list(r[1].__dict__.values()), r[2]] for r in tried]}
            prev = best.get(key_of(m))
            if prev is None or t_ms < prev[0]:
                best[key_of(m)] = (t_ms, t_best)
        rows.append(row)
        tf = lambda k: row["gflop"] / row[k]               # GFLOP / ms = TFLOP/s
        print(f"{row['conv']:>15} {row['c_in']:>5} {row['c_out']:>5} k{row['k']} d{row['dilation']} s{row['stride']} "
              f"L {length:>8}: fp32 {row['fp32_ms']:7.3f} ms ({tf('fp32_ms'):5.1f} TFLOP/s, err {row['fp32_err']:.1e})"
              f"  tf32 {row['tf32_ms']:7.3f} ({tf('tf32_ms'):5.1f}, {row['tf32_err']:.1e})  x3 {t_ms:7.3f} "
              f"({tf('x3_ms'):5.1f}, {t_err:.1e}) at {tuple(t_best.__dict__.values())}, default "
              f"{row['x3_default_ms'] or float('nan'):7.3f}", flush=True)
    return rows, {k: t for k, (_, t) in best.items()}


def whole_track(decoder, cfg, best: dict) -> list[dict]:
    latents = np.random.default_rng(0).standard_normal((5371, cfg.latent_dim)).astype(np.float32)
    core, halo = cfg.decode_core_frames, cfg.decode_halo_frames
    dec64 = copy.deepcopy(decoder).double()
    with torch.inference_mode():
        z64 = torch.as_tensor(latents).double().cuda().T[None]
        audio64 = vae._decode_tiles(dec64, z64, core, halo, dec64.layers).clamp(-1, 1)[0].T.cpu().numpy()
    del dec64
    out, reference = [], None
    for label, precision, tilings in (("fp32", "fp32", None), ("tf32", "tf32", None),
                                      ("tf32x3 default tilings", "tf32x3", {}), ("tf32x3 best tilings", "tf32x3", best)):
        if tilings is not None:
            tc.plan_for(decoder, tilings)
        seconds = []
        for _ in range(3):
            torch.cuda.synchronize()
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            audio = vae.decode_audio(decoder, latents, core, halo, precision)
            b.record()
            b.synchronize()
            seconds.append(a.elapsed_time(b) / 1e3)
        again = vae.decode_audio(decoder, latents, core, halo, precision)
        reference = audio if reference is None else reference
        d32, d64 = np.abs(audio - reference), np.abs(audio - audio64)
        row = {"mode": label, "seconds": min(seconds), "vs_fp32_max": float(d32.max()),
               "vs_fp32_mean": float(d32.mean()), "vs_fp64_max": float(d64.max()), "vs_fp64_mean": float(d64.mean()),
               "same_bytes_twice": bool(np.array_equal(audio, again))}
        out.append(row)
        print(f"whole track, {label}: {row['seconds']:.3f} s; audio vs FP32 max {row['vs_fp32_max']:.2e} mean "
              f"{row['vs_fp32_mean']:.2e}; vs FP64 max {row['vs_fp64_max']:.2e} mean {row['vs_fp64_mean']:.2e}; "
              f"same bytes twice {row['same_bytes_twice']}", flush=True)
    return out


def main() -> None:
    cfg = from_toml("configs/models/yue2-3b.toml").vae
    decoder = decoder_on_cuda(cfg)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    rows, best = per_conv(decoder)
    by_ident = {(r["conv"], r["c_in"], r["c_out"], r["k"], r["dilation"], r["length"]): r for r in rows}
    every = [by_ident.get(ident_of(m, n), {}) for m, n in convs_in_order(decoder, TILE_FRAMES)]
    for name in ("fp32_ms", "tf32_ms", "x3_ms", "x3_default_ms"):
        total = sum(r.get(name) or float("nan") for r in every)
        print(f"one tile's {len(every)} convs, summed: {name} {total:.1f} ms", flush=True)
    track = whole_track(decoder, cfg, best)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump({"convs": rows, "best": {str(k): list(t.__dict__.values()) for k, t in best.items()},
                       "track": track}, f, indent=1)


if __name__ == "__main__":
    main()
