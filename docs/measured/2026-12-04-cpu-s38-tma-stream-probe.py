"""How fast can TMA copies alone stream weights into shared memory, by box size and ring depth? (2026-12-04, session
s38; written on the CPU box, compiled there for sm_90 with Triton 3.6.)
Why: the AR layer chain's weight warp streams at ~3.4 TB/s with nothing else in the kernel (`…-s34-chain-parts`: 29.4
µs per layer of 100.7 MB), not the ~4.1 TB/s a plain copy reaches, and it copies [32, 128] BF16 tiles, which Triton
issues as two 4 KB boxes (the 128-byte swizzle limits a box's rows to 64 values). Whatever a whole-step persistent
kernel does, its weights stream this way, so this says what bound such a kernel would meet.
The kernel: one program per SM; a loader warp walks its tiles of a 2.8 GB BF16 matrix (the 28 layers' products'
bytes), round robin over the programs, and copies each [BR, BC] tile with TMA into a ring of STAGES slots; the other
warps only wait for each slot and free it (no compute). Printed: TB/s of weights read, per (box, ring) setting, two
rounds, against a read-only reduction (`torch.sum`) and a copy (`copy_`, counting the bytes read) of the same matrix.
Then the layer chain's own weight warp (`_layer_chain_gluon.weight_warp`: its products, tiles and slots) with a
drain in place of the consumer, 28 launches of yue2-3b-shaped layers (`--chain-order` runs only that).
Run on an H200 from the repository root: python docs/measured/2026-12-04-cpu-s38-tma-stream-probe.py
`--compile-only` (Triton 3.6, any box): compiles every setting for sm_90 and prints its shared memory."""
import sys

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma

sys.path.insert(0, ".")
from stages._layer_chain_gluon import _asm_zero, weight_warp  # noqa: E402

COLS = 2048
ROWS = 688_128                       # × 2048 × 2 B = 2.82 GB: 28 × 100.7 MB, the chain's weights per step
# (rows per tile, columns per tile, ring slots): 4 KB boxes as the chain's ring holds them, then larger tiles
# and ORDER: 0 = the tiles round robin in row-block order (the programs read neighbouring tiles at once); 1 = as the
# layer chain walks a product: each program takes whole tile rows round robin and walks their K (the programs read
# tiles 16 or 32 rows apart at once, the same column block)
SETTINGS = [(32, 64, 24, 0), (32, 128, 12, 0), (32, 128, 24, 0), (64, 128, 6, 0), (64, 128, 12, 0), (128, 128, 3, 0),
            (128, 128, 6, 0), (256, 128, 3, 0), (128, 64, 12, 0), (256, 64, 6, 0),
            (16, 128, 24, 1), (16, 128, 48, 1), (32, 128, 12, 1), (32, 128, 24, 1), (64, 128, 12, 1)]


@gluon.jit
def _copy(desc, ring, full, empty, i, r, c, BR: gl.constexpr, BC: gl.constexpr, STAGES: gl.constexpr):
    s = i % STAGES
    mbarrier.wait(empty.index(s), ((i // STAGES) & 1) ^ 1)
    mbarrier.expect(full.index(s), desc.block_type.nbytes)
    tma.async_copy_global_to_shared(desc, [r * BR, c * BC], full.index(s), ring.index(s))
    return i + 1


@gluon.jit
def _loader(desc, ring, full, empty, pid, TILES: gl.constexpr, NCOL: gl.constexpr, BR: gl.constexpr,
            BC: gl.constexpr, STAGES: gl.constexpr, G: gl.constexpr, ORDER: gl.constexpr):
    i = pid * 0
    if ORDER == 0:
        for t in range(pid, TILES, G):
            i = _copy(desc, ring, full, empty, i, t // NCOL, t % NCOL, BR, BC, STAGES)
    else:
        for r in range(pid, TILES // NCOL, G):
            for c in range(NCOL):
                i = _copy(desc, ring, full, empty, i, r, c, BR, BC, STAGES)


@gluon.jit
def _drain(ring, full, empty, pid, TILES: gl.constexpr, NCOL: gl.constexpr, STAGES: gl.constexpr, G: gl.constexpr,
           ORDER: gl.constexpr):
    n = (TILES - pid + G - 1) // G if ORDER == 0 else ((TILES // NCOL - pid + G - 1) // G) * NCOL
    for i in range(n):
        s = i % STAGES
        mbarrier.wait(full.index(s), (i // STAGES) & 1)
        mbarrier.arrive(empty.index(s))


@gluon.jit
def stream(desc, TILES: gl.constexpr, NCOL: gl.constexpr, BR: gl.constexpr, BC: gl.constexpr,
           STAGES: gl.constexpr, G: gl.constexpr, ORDER: gl.constexpr, EARLY: gl.constexpr = False):
    pid = gl.program_id(0)
    if EARLY:       # the next launch may start at once (programmatic dependent launch), as the chain's does
        _asm_zero(pid, "griddepcontrol.launch_dependents;")
    ring = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BR, BC],
                                     gl.NVMMASharedLayout.get_default_for([BR, BC], gl.bfloat16))
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(full.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    gl.warp_specialize([
        (_drain, (ring, full, empty, pid, TILES, NCOL, STAGES, G, ORDER)),
        (_loader, (desc, ring, full, empty, pid, TILES, NCOL, BR, BC, STAGES, G, ORDER)),
    ], [1], [40])


@gluon.jit
def _slots(pid, N: gl.constexpr, K: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, G: gl.constexpr,
           PAIR: gl.constexpr):
    PER: gl.constexpr = 32 // (2 * BN if PAIR else BN)
    return ((N // BN - pid + G - 1) // G) * (K // BK // PER)


@gluon.jit
def _chain_drain(ring, full, empty, pid, H: gl.constexpr, I: gl.constexpr, Q: gl.constexpr, BN_O: gl.constexpr,
                 BN_GU: gl.constexpr, BN_D: gl.constexpr, BN_Q: gl.constexpr, BK: gl.constexpr,
                 STAGES: gl.constexpr, G: gl.constexpr):
    n = (_slots(pid, H, H, BN_O, BK, G, False) + _slots(pid, I, H, BN_GU, BK, G, True)
         + _slots(pid, H, I, BN_D, BK, G, False) + _slots(pid, Q, H, BN_Q, BK, G, False))
    for i in range(n):
        s = i % STAGES
        mbarrier.wait(full.index(s), (i // STAGES) & 1)
        mbarrier.arrive(empty.index(s))


@gluon.jit
def chain_walk(wo, wgu, wd, wq, H: gl.constexpr, I: gl.constexpr, Q: gl.constexpr, BN_O: gl.constexpr,
               BN_GU: gl.constexpr, BN_D: gl.constexpr, BN_Q: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
               G: gl.constexpr):
    """The layer chain's own weight warp (o, gate/up paired, down, next q/k/v, its tiles and slots) with a drain in
    place of the consumer: the chain's weight walk with nothing else in the kernel."""
    pid = gl.program_id(0)
    _asm_zero(pid, "griddepcontrol.launch_dependents;")
    ring = gl.allocate_shared_memory(gl.bfloat16, [STAGES, 32, BK],
                                     gl.NVMMASharedLayout.get_default_for([32, BK], gl.bfloat16))
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(full.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    gl.warp_specialize([
        (_chain_drain, (ring, full, empty, pid, H, I, Q, BN_O, BN_GU, BN_D, BN_Q, BK, STAGES, G)),
        (weight_warp, (wo, wgu, wd, wq, ring, full, empty, pid, H, I, Q, BN_O, BN_GU, BN_D, BN_Q, BK, STAGES, G,
                       True, True)),
    ], [1], [40])


def chain_order() -> None:
    """28 layers of yue2-3b-shaped BF16 weights (o, gate/up paired, down, q/k/v: 100.7 MB a layer) walked by the
    chain's weight warp, one launch per layer (early start), against the plain stream's 22.0 µs per layer."""
    from stages import layer_chain

    t = layer_chain.TILING
    h, i, q = 2048, 6144, 4096
    g = torch.cuda.get_device_properties(0).multi_processor_count
    shapes = ((h, h), (2 * i, h), (h, i), (q, h))
    layers = [[torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for n, k in shapes] for _ in range(28)]
    d = layer_chain._descriptor
    descs = [(d(o, t.bn_o, t.bk), d(gu, 2 * t.bn_gu, t.bk), d(dn, t.bn_d, t.bk), d(qq, t.bn_q, t.bk))
             for o, gu, dn, qq in layers]
    size = sum(w.numel() * w.element_size() for lay in layers for w in lay)
    for rnd in range(2):
        for stages in (12, 24):
            def run():
                for wo, wgu, wd, wq in descs:
                    chain_walk[(g,)](wo, wgu, wd, wq, H=h, I=i, Q=q, BN_O=t.bn_o, BN_GU=t.bn_gu, BN_D=t.bn_d,
                                     BN_Q=t.bn_q, BK=t.bk, STAGES=stages, G=g, num_warps=4, launch_pdl=True)
            run()
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                run()
            sec = _seconds(graph.replay)
            print(f"round {rnd} the chain's weight walk, {stages} slots of 32 × {t.bk}, 28 launches (early start)  "
                  f"{size / sec / 1e12:5.2f} TB/s ({sec / 28 * 1e6:5.1f} µs per layer)", flush=True)


def _const(br, bc, stages, order, g):
    return dict(TILES=(ROWS // br) * (COLS // bc), NCOL=COLS // bc, BR=br, BC=bc, STAGES=stages, G=g, ORDER=order)


def compile_only() -> None:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    for br, bc, stages, order in SETTINGS:
        layout = gl.NVMMASharedLayout.get_default_for([br, bc], gl.bfloat16)
        const = _const(br, bc, stages, order, 132)
        sig = {"desc": f"tensordesc<bf16[{br}, {bc}],{layout!r}>", **{c: "constexpr" for c in const}}
        k = triton.compile(GluonASTSource(stream, sig, const, {}), target=GPUTarget("cuda", 90, 32),
                           options={"num_warps": 4})
        print(f"[{br}, {bc}] × {stages}, order {order}: shared {k.metadata.shared // 1024} KB, "
              f"{k.asm['ptx'].count('cp.async.bulk.tensor')} TMA instructions", flush=True)


def _seconds(fn, repeats: int = 10) -> float:
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / repeats


def main() -> None:
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    w = torch.randn(ROWS, COLS, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(w)
    g = torch.cuda.get_device_properties(0).multi_processor_count
    size = w.numel() * w.element_size()
    print(f"{torch.cuda.get_device_name()}: {size / 1e9:.2f} GB, {g} programs", flush=True)
    for rnd in range(2):
        t = _seconds(lambda: torch.sum(w, dtype=torch.float32))
        print(f"round {rnd} torch.sum (read only)          {size / t / 1e12:5.2f} TB/s", flush=True)
        t = _seconds(lambda: out.copy_(w))
        print(f"round {rnd} copy_ (bytes read)             {size / t / 1e12:5.2f} TB/s", flush=True)
        for br, bc, stages, order in SETTINGS:
            desc = TensorDescriptor.from_tensor(w, [br, bc],
                                                gl.NVMMASharedLayout.get_default_for([br, bc], gl.bfloat16))
            try:
                t = _seconds(lambda: stream[(g,)](desc, **_const(br, bc, stages, order, g), num_warps=4))
                print(f"round {rnd} TMA [{br:3}, {bc:3}] ({br * bc * 2 // 1024:2} KB) × {stages:2} slots "
                      f"({br * bc * 2 * stages // 1024:3} KB), {('row blocks', 'chain order')[order]:11}  "
                      f"{size / t / 1e12:5.2f} TB/s", flush=True)
            except Exception as e:  # noqa: BLE001 - a setting that does not fit says so and the rest run
                print(f"round {rnd} TMA [{br}, {bc}] × {stages}, order {order}: {type(e).__name__}: "
                      f"{str(e)[:200]}", flush=True)


def per_layer() -> None:
    """The same 2.82 GB as 28 launches of one layer's 100.7 MB each (a CUDA graph), as the chain streams it: what
    the launch boundaries cost the stream, with and without the next launch starting early."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    w = torch.randn(ROWS, COLS, device="cuda", dtype=torch.bfloat16)
    g = torch.cuda.get_device_properties(0).multi_processor_count
    size, per = w.numel() * w.element_size(), ROWS // 28
    for rnd in range(2):
        for br, bc, stages in ((32, 128, 12), (32, 128, 24)):
            lay = gl.NVMMASharedLayout.get_default_for([br, bc], gl.bfloat16)
            descs = [TensorDescriptor.from_tensor(w[i * per:(i + 1) * per], [br, bc], lay) for i in range(28)]
            const = _const(br, bc, stages, 1, g)
            const["TILES"] = (per // br) * (COLS // bc)
            for early in (False, True):
                def run():
                    for d in descs:
                        stream[(g,)](d, **const, EARLY=early, num_warps=4, launch_pdl=early)
                run()
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    run()
                t = _seconds(graph.replay)
                print(f"round {rnd} 28 launches [{br}, {bc}] × {stages:2} slots, chain order, "
                      f"{'early start (PDL)' if early else 'one after another':17}  {size / t / 1e12:5.2f} TB/s "
                      f"({t / 28 * 1e6:5.1f} µs per layer)", flush=True)


if __name__ == "__main__":
    if "--compile-only" in sys.argv:
        compile_only()
    elif "--chain-order" in sys.argv:
        chain_order()
    else:
        main()
        per_layer()
        chain_order()
