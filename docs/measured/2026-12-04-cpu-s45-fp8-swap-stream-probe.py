"""Would FP8 weights pay in a layer chain whose weights are the MMA's M? (2026-12-04, session s45; written on the CPU
box, where no device was lent, and compiled there for sm_90 with Triton 3.6.)
Why: issue 10 asks FP8 W8A16 for 1.6x BF16 at one row, and today FP8 is 0.87x (separate launches). The chain's
warpgroup MMA multiplies BF16 by BF16 or e4m3 by e4m3; FP8 weights times BF16 activations need one side converted.
The activations cannot be (the W8A8 chain of the ninth session: converting in shared memory cost a whole BF16 layer).
The weights can, in registers, once they are the MMA's A: with the operands swapped (s44,
`…-s44-swap-ab-stream-probe.py`: acc[64, 32] += w[64, 128] . x[32, 128]^T streams at 4.15 TB/s against 3.2 for
today's 16-row tiles) a warpgroup MMA takes A from registers, so the consumer loads each e4m3 k-tile from shared
memory, widens it to BF16 and multiplies; the activations stay BF16 in shared memory as today.
Widening: an e4m3 value s.eeee.mmm is, as BF16 bits, s.0000eeee.mmm0000 times 2^120 (subnormals too), so each 32-bit
word of four weights becomes two BF16 pairs with two byte permutes, a shift, two masks and one BF16 multiply by 2^120
per pair (exact). The weights are stored with the columns of every 128-wide k-tile permuted (Marlin-style) so that a
thread's 64 values of a k-tile are four 16-byte words of shared memory (conflict-free under TMA's 128-byte swizzle)
in the order of the MMA's A fragment: reshape and permute the registers and the layout is the MMA's (no data moves).
Same sums as the natural order: the registers hold the same values at the same places.
Settings, all at 144 KB of rings and one launch walking 28 layers' worth (688,128 x 2,048 values) with the chain's
roles and handshakes (the s44 probe's weight and activation warps), no barrier:
- BF16 swapped, the s44 setting: 7 weight slots of 16 KB, 4 activation slots of 8 KB (m64n32);
- FP8 W8A16, the permuted storage and the widening above: two e4m3 k-tiles per 16 KB slot;
- FP8 W8A16, natural storage and Triton's own widening (2-byte shared loads, cvt through FP16);
- FP8 x FP8: activations e4m3 too, both operands from shared memory (timing only: a W8A8 chain would have to
  quantise its activations, docs/ar-engine.md);
- the FP8 walk alone (the consumer only frees slots).
The weight slot is freed as soon as its k-tiles are in registers (not when the MMA is done). Printed: TB/s of weight
bytes, µs per layer (a 28th of the walk), the FP8 settings' first outputs checked against FP32 of the same values.
Run on an H200 from the repository root: python docs/measured/2026-12-04-cpu-s45-fp8-swap-stream-probe.py
`--compile-only` (Triton 3.6, any box): compiles every setting for sm_90, prints shared memory and the consumer's
instructions; `--check-widening` (CPU): the widening's bit arithmetic against torch's e4m3 for all 256 bytes."""
import importlib.util
import pathlib
import sys

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, warpgroup_mma,
                                                               warpgroup_mma_wait)


def _s44():
    path = pathlib.Path(__file__).with_name("2026-12-04-cpu-s44-swap-ab-stream-probe.py")
    spec = importlib.util.spec_from_file_location("s44_swap_ab_stream", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


S44 = _s44()
COLS, ROWS, LAYERS = S44.COLS, S44.ROWS, 28
# name: (mode, weight slots, activation slots); every FP8 setting puts two k-tiles of 64 rows in a 16 KB slot
SETTINGS = {
    "bf16 swapped (s44), m64n32": ("bf16", 7, 4),
    "fp8 W8A16, permuted + bit widening": ("w8a16", 7, 4),
    "fp8 W8A16, natural + Triton's widening": ("w8a16-triton", 7, 4),
    "fp8 x fp8 (timing only), m64n32k32": ("w8a8", 7, 4),
    "fp8 walk alone": ("drain", 7, 4),
}
# storage position p (7 bits) of a k-tile's column c: c0 = p0, c3 = p1, c4 = p2, c5 = p3, c6 = p4, c1 = p5, c2 = p6
COL_OF = [(p & 1) | ((p >> 1) & 1) << 3 | ((p >> 2) & 1) << 4 | ((p >> 3) & 1) << 5 | ((p >> 4) & 1) << 6
          | ((p >> 5) & 1) << 1 | ((p >> 6) & 1) << 2 for p in range(128)]

# a permuted e4m3 k-tile [64, 128] in registers: each thread 4 words of 4 bytes (storage bits p0-p4 and row bit 3),
# lanes and warps as the MMA's A fragment
STORAGE = gl.constexpr(gl.DistributedLinearLayout(reg_bases=[[0, 1], [0, 2], [0, 4], [0, 8], [0, 16], [8, 0]],
                                                  lane_bases=[[0, 32], [0, 64], [1, 0], [2, 0], [4, 0]],
                                                  warp_bases=[[16, 0], [32, 0]], block_bases=[], shape=[64, 128]))
_WIDEN = gl.constexpr("""{
.reg .b32 a, b, sa, sb, k;
mov.b32 k, 0x7B807B80;
prmt.b32 a, $2, 0, 0x1404;
prmt.b32 b, $2, 0, 0x3424;
shr.b32 sa, a, 4;
shr.b32 sb, b, 4;
and.b32 sa, sa, 0x07F007F0;
and.b32 sb, sb, 0x07F007F0;
lop3.b32 sa, a, 0x80008000, sa, 0xEA;
lop3.b32 sb, b, 0x80008000, sb, 0xEA;
mul.rn.bf16x2 $0, sa, k;
mul.rn.bf16x2 $1, sb, k;
}""")


@gluon.jit
def _widen(w):
    """e4m3 -> BF16, four values a word: bytes b0..b3 -> pairs (b0, b1), (b2, b3), each byte moved to the top of its
    16-bit half, sign kept, exponent and mantissa shifted down 4, then x 2^120 (0x7B80) in BF16."""
    return gl.inline_asm_elementwise(_WIDEN, "=r,=r,r", [w.to(gl.int8, bitcast=True)], dtype=gl.bfloat16, is_pure=True,
                                     pack=4)


@gluon.jit
def _a_fragment(tile, A: gl.constexpr):
    """One permuted e4m3 k-tile [64, 128] in shared memory -> BF16 registers in the MMA's A layout."""
    w = _widen(tile.load(STORAGE))
    # storage bits p6..p0 -> logical column bits c6..c0 = p4 p3 p2 p1 p6 p5 p0
    w = w.reshape([64, 2, 2, 2, 2, 2, 2, 2]).permute([0, 3, 4, 5, 6, 1, 2, 7]).reshape([64, 128])
    return gl.convert_layout(w, A, assert_trivial=True)


@gluon.jit
def _consumer(xs, xfull, xempty, ring, full, empty, out, scale, pid, TILES: gl.constexpr, KT: gl.constexpr,
              STAGES: gl.constexpr, XSTAGES: gl.constexpr, G: gl.constexpr, MODE: gl.constexpr):
    KI: gl.constexpr = 32 if MODE == "w8a8" else 16
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 32, KI])
    A: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    r = gl.arange(0, 64, layout=gl.SliceLayout(1, mma))
    c = gl.arange(0, 32, layout=gl.SliceLayout(0, mma))
    PER: gl.constexpr = 1 if MODE == "bf16" else 2
    SLOTS: gl.constexpr = KT // PER
    i = pid * 0
    j = pid * 0
    prev = gl.zeros([64, 128], gl.bfloat16, A)      # the A operand of the MMA in flight (kept live until it is done)
    for t in range(pid, TILES, G):
        if MODE == "drain":
            for kk in range(SLOTS):
                s = (i + kk) % STAGES
                mbarrier.wait(full.index(s), ((i + kk) // STAGES) & 1)
                mbarrier.arrive(empty.index(s))
            i += SLOTS
        else:
            acc = gl.zeros([64, 32], gl.float32, mma)
            for kk in range(SLOTS):
                si = i + kk
                s = si % STAGES
                mbarrier.wait(full.index(s), (si // STAGES) & 1)
                for u in gl.static_range(PER):
                    xj = j + kk * PER + u
                    xsl = xj % XSTAGES
                    tile = ring.index(s).slice(u * 64, 64)
                    if MODE == "bf16" or MODE == "w8a8":     # both operands from shared memory, as in s44
                        mbarrier.wait(xfull.index(xsl), (xj // XSTAGES) & 1)
                        acc = warpgroup_mma(tile, xs.index(xsl).permute((1, 0)), acc, is_async=True)
                        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
                        if u == PER - 1:
                            mbarrier.arrive(empty.index((si + STAGES - 1) % STAGES), pred=kk > 0)
                    else:
                        if MODE == "w8a16":
                            a = _a_fragment(tile, A)
                        else:
                            a = tile.load(A).to(gl.bfloat16)
                        if u == PER - 1:        # the slot's k-tiles are in registers: free it now
                            mbarrier.arrive(empty.index(s))
                        mbarrier.wait(xfull.index(xsl), (xj // XSTAGES) & 1)
                        acc = warpgroup_mma(a, xs.index(xsl).permute((1, 0)), acc, is_async=True)
                        acc, prev = warpgroup_mma_wait(num_outstanding=1, deps=(acc, prev))
                        prev = a
                    mbarrier.arrive(xempty.index((xj + XSTAGES - 1) % XSTAGES), pred=(kk > 0) | (u > 0))
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
            if MODE == "bf16" or MODE == "w8a8":
                mbarrier.arrive(empty.index((i + SLOTS - 1) % STAGES))
            mbarrier.arrive(xempty.index((j + KT - 1) % XSTAGES))
            i += SLOTS
            j += KT
            if MODE != "bf16":
                acc = acc * gl.load(scale + t * 64 + r)[:, None]
            gl.store(out + (t * 64 + r)[:, None] * 32 + c[None, :], acc.to(gl.bfloat16))


@gluon.jit
def fp8_stream(wdesc, xdesc, out, scale, TILES: gl.constexpr, KT: gl.constexpr, STAGES: gl.constexpr,
               XSTAGES: gl.constexpr, G: gl.constexpr, MODE: gl.constexpr):
    pid = gl.program_id(0)
    PER: gl.constexpr = 1 if MODE == "bf16" else 2
    WT: gl.constexpr = gl.bfloat16 if MODE == "bf16" else gl.float8e4nv
    XT: gl.constexpr = gl.float8e4nv if MODE == "w8a8" else gl.bfloat16
    ring = gl.allocate_shared_memory(WT, [STAGES, 64 * PER, 128], gl.NVMMASharedLayout.get_default_for([64 * PER, 128],
                                                                                                         WT))
    xs = gl.allocate_shared_memory(XT, [XSTAGES, 32, 128], gl.NVMMASharedLayout.get_default_for([32, 128], XT))
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    xfull = gl.allocate_shared_memory(gl.int64, [XSTAGES, 1], mbarrier.MBarrierLayout())
    xempty = gl.allocate_shared_memory(gl.int64, [XSTAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(full.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    for s in gl.static_range(XSTAGES):
        mbarrier.init(xfull.index(s), count=1)
        mbarrier.init(xempty.index(s), count=1)
    fence_async_shared()
    gl.warp_specialize([
        (_consumer, (xs, xfull, xempty, ring, full, empty, out, scale, pid, TILES, KT, STAGES, XSTAGES, G, MODE)),
        (S44._weights, (wdesc, ring, full, empty, pid, TILES, KT, 64, PER, STAGES, G)),
        (S44._activations, (xdesc, xs, xfull, xempty, pid, TILES, KT, 32, XSTAGES, G, MODE == "drain")),
    ], [1, 1], [40, 40])


def _const(setting, g):
    mode, stages, xstages = setting
    return dict(TILES=ROWS // 64, KT=COLS // 128, STAGES=stages, XSTAGES=xstages, G=g, MODE=mode)


def _dtypes(mode):
    wt = gl.bfloat16 if mode == "bf16" else gl.float8e4nv
    xt = gl.float8e4nv if mode == "w8a8" else gl.bfloat16
    return wt, xt


def compile_only() -> None:
    import re
    import subprocess
    import tempfile
    from collections import Counter

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    ptxas = pathlib.Path(triton.__file__).parent / "backends/nvidia/bin/ptxas"
    for name, setting in SETTINGS.items():
        const = _const(setting, 132)
        wt, xt = _dtypes(setting[0])
        wl = gl.NVMMASharedLayout.get_default_for([64, 128], wt)
        xl = gl.NVMMASharedLayout.get_default_for([32, 128], xt)
        names = {gl.bfloat16: "bf16", gl.float8e4nv: "fp8e4nv"}
        sig = {"wdesc": f"tensordesc<{names[wt]}[64, 128],{wl!r}>",
               "xdesc": f"tensordesc<{names[xt]}[32, 128],{xl!r}>", "out": "*bf16", "scale": "*fp32",
               **{c: "constexpr" for c in const}}
        k = triton.compile(GluonASTSource(fp8_stream, sig, const, {}), target=GPUTarget("cuda", 90, 32),
                           options={"num_warps": 4})
        ptx = k.asm["ptx"]
        ops = Counter(re.findall(r"\b(ld\.shared\.[a-z0-9.]+|cvt\.[a-z0-9.]+|prmt|mul\.rn\.bf16x2)", ptx))
        with tempfile.TemporaryDirectory() as tmp:
            src = pathlib.Path(tmp) / "k.ptx"
            src.write_text(ptx)
            info = subprocess.run([str(ptxas), "-arch=sm_90a", "-v", str(src), "-o", str(src.with_suffix(".cubin"))],
                                  capture_output=True, text=True).stderr
        regs = re.findall(r"Used (\d+) registers", info)
        advice = [line.strip() for line in info.splitlines() if "wgmma" in line.lower()]
        print(f"{name:42} shared {k.metadata.shared // 1024} KB, wgmma {ptx.count('wgmma.mma_async')}, "
              f"registers {regs}, {dict(ops)}{' ' + str(advice) if advice else ''}", flush=True)


def finish_or_exit(label: str, seconds: float = 20.0) -> None:
    """Wait for the work queued so far; if it has not finished after `seconds`, a kernel hangs (a wait nobody
    arrives on): say so and leave, so that the device call loses seconds, not its timeout."""
    import os
    import time

    done = torch.cuda.Event()
    done.record()
    start = time.time()
    while not done.query():
        if time.time() - start > seconds:
            print(f"{label}: not finished after {seconds:.0f} s, a hang; leaving", flush=True)
            os._exit(3)
        time.sleep(0.01)


def check_widening() -> None:
    """The word arithmetic of _WIDEN in Python, for every byte, against torch's e4m3 -> float (NaN bytes excepted:
    quantised weights are clamped to ±448 and never hold one)."""
    for b in range(256):
        lane = b << 8                                   # the byte at the top of a 16-bit half (prmt)
        bits = (lane & 0x8000) | ((lane >> 4) & 0x07F0)
        got = torch.tensor([bits - (bits >> 15 << 16)], dtype=torch.int16).view(torch.bfloat16).float() * 2.0 ** 120
        want = torch.tensor([b], dtype=torch.uint8).view(torch.float8_e4m3fn).float()
        if torch.isnan(want).item():
            continue
        assert got.item() == want.item(), (b, got.item(), want.item())
    print("widening: all 254 non-NaN e4m3 bytes exact")


def main() -> None:
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    torch.manual_seed(0)
    g = torch.cuda.get_device_properties(0).multi_processor_count
    w = torch.randn(ROWS, COLS, device="cuda", dtype=torch.bfloat16)
    w8 = w.to(torch.float8_e4m3fn)
    w8p = w8.view(torch.uint8).view(ROWS, COLS // 128, 128)[:, :, COL_OF].reshape(ROWS, COLS).contiguous().view(
        torch.float8_e4m3fn)            # moved as bytes: not every torch build indexes float8 tensors
    scale = torch.rand(ROWS, device="cuda") + 0.5
    x = torch.randn(32, COLS, device="cuda", dtype=torch.bfloat16)
    x8 = x.to(torch.float8_e4m3fn)
    out = torch.empty(ROWS, 32, device="cuda", dtype=torch.bfloat16)
    weights = {"bf16": w, "w8a16": w8p, "w8a16-triton": w8, "w8a8": w8, "drain": w8}
    print(f"{torch.cuda.get_device_name()}: {ROWS:,} x {COLS:,} weights, {g} programs", flush=True)
    for rnd in range(2):
        for name, setting in SETTINGS.items():
            mode = setting[0]
            wt, xt = _dtypes(mode)
            wm, xm = weights[mode], x8 if mode == "w8a8" else x
            wdesc = TensorDescriptor.from_tensor(wm, [64, 128], gl.NVMMASharedLayout.get_default_for([64, 128], wt))
            xdesc = TensorDescriptor.from_tensor(xm, [32, 128], gl.NVMMASharedLayout.get_default_for([32, 128], xt))
            try:
                if rnd == 0:
                    fp8_stream[(g,)](wdesc, xdesc, out, scale, **_const(setting, g), num_warps=4)
                    finish_or_exit(name)
                t = S44._seconds(lambda: fp8_stream[(g,)](wdesc, xdesc, out, scale, **_const(setting, g), num_warps=4))
            except Exception as e:  # noqa: BLE001 - a setting that fails says so and the rest run
                print(f"round {rnd} {name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
                continue
            size = wm.numel() * wm.element_size()
            check = ""
            if rnd == 0 and mode != "drain":
                wf = w[:4096].float() if mode == "bf16" else w8[:4096].float() * scale[:4096, None]
                want = wf @ (x8 if mode == "w8a8" else x)[:32].float().T
                check = f"  first 4,096 outputs vs FP32: max abs {(out[:4096].float() - want).abs().max().item():.3e}"
            print(f"round {rnd} {name:42} {size / t / 1e12:5.2f} TB/s ({t / LAYERS * 1e6:5.1f} µs per layer){check}",
                  flush=True)


if __name__ == "__main__":
    if "--compile-only" in sys.argv:
        compile_only()
    elif "--check-widening" in sys.argv:
        check_widening()
    else:
        main()
