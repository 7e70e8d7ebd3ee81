"""The layer chain reading its weights in tile order (2026-12-03, session s35; written on the CPU box, run on an
H200 the same session). Why: the chain's weight warp alone streams at ~3.4 TB/s (s34 parts probe: 29.4 µs per
layer) where a plain copy reaches ~4.2, and the Gluon stream probes (s29) streamed faster the more slots were in
flight — a latency- or request-bound stream, not a byte-bound one. Each weight k-tile is a TMA box of 16 or 32
rows × 128 columns: 16-32 runs of 256 bytes, each K·2 bytes (4-12 KB) from the next. Here each matrix is stored
tile by tile ("blocked": [rows/RB, K/BK, RB, BK], RB the tile's rows as the weight warp copies them), so a ring
slot's 32 rows are one 8 KB run and one TMA box, also for the 16-row tiles whose slot holds two k-tiles (before:
two boxes). The shared memory gets the same bytes in the same places, so the results must be the same bits.
Kernel level as in the s33/s34 probes: 28 layers of random yue2-3b weights, 32 rows, µs per layer in a CUDA graph,
both layouts in one process, alternating, three rounds; the outputs compared bit for bit.
Run from the repository root (at commit a2959c7's kernel): python docs/measured/2026-12-03-cpu-s35-blocked-weights-probe.py
`--compile-only` (Triton 3.6, any box): compiles the variant for sm_90."""
import importlib.util
import pathlib
import sys
import tempfile

import torch

sys.path.insert(0, ".")

L, H, I, Q = 28, 2048, 6144, 4096
EPS = 1e-6
SOURCE = pathlib.Path("stages/_layer_chain_gluon.py").read_text()
OLD = """    for tile in range(pid, N // BN, G):
        for kk in range(K // BK // PER):
            s = i % STAGES
            mbarrier.wait(empty.index(s), ((i // STAGES) & 1) ^ 1)
            mbarrier.expect(full.index(s), PER * ROWS_W * BK * 2)
            for u in gl.static_range(PER):
                tma.async_copy_global_to_shared(desc, [tile * ROWS_W, (kk * PER + u) * BK], full.index(s),
                                                ring.index(s).slice(u * ROWS_W, ROWS_W))
            i += 1
"""
NEW = """    for tile in range(pid, N // BN, G):
        for kk in range(K // BK // PER):
            s = i % STAGES
            mbarrier.wait(empty.index(s), ((i // STAGES) & 1) ^ 1)
            mbarrier.expect(full.index(s), PER * ROWS_W * BK * 2)
            tma.async_copy_global_to_shared(desc, [(tile * (K // BK) + kk * PER) * ROWS_W, 0], full.index(s),
                                            ring.index(s))
            i += 1
"""


def variant():
    assert OLD in SOURCE
    path = pathlib.Path(tempfile.mkdtemp()) / "chain_blocked.py"
    path.write_text(SOURCE.replace(OLD, NEW))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def blocked(w: torch.Tensor, rb: int, bk: int = 128) -> torch.Tensor:
    """[R, K] → tile by tile: [R/rb · K/bk · rb, bk], tile (t, k) at rows (t · K/bk + k) · rb."""
    r, k = w.shape
    return w.view(r // rb, rb, k // bk, bk).permute(0, 2, 1, 3).reshape(-1, bk).contiguous()


def compile_only() -> None:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource
    kern = variant()

    def d(rows):
        return f"tensordesc<bf16[{rows}, 128],{gl.NVMMASharedLayout.get_default_for([rows, 128], gl.bfloat16)!r}>"
    sig = {"wo": d(32), "wgu": d(32), "wd": d(32), "wq": d(32), "xa": d(32), "xh": d(32), "xg": d(32),
           "xn": d(32), "a_res": "*bf16", "h_out": "*bf16", "g_out": "*bf16", "x_out": "*bf16", "q_out": "*bf16",
           "sq_h": "*fp32", "sq_x": "*fp32", "counter": "*i32", "err": "*i32", "M": "i32", "eps": "fp32"}
    const = dict(H=H, I=I, Q=Q, BN_O=16, BN_GU=16, BN_D=16, BN_Q=32, BK=128, STAGES=12, XSTAGES=6, G=132,
                 NEXT=True, EARLY=True)
    sig.update({k: "constexpr" for k in const})
    k = triton.compile(GluonASTSource(kern.layer_chain, sig, const, {}), target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": 4, "launch_pdl": True})
    ptx = k.asm["ptx"]
    print(f"triton {triton.__version__}: shared {k.metadata.shared // 1024} KB, wgmma "
          f"{ptx.count('wgmma.mma_async')}, tma {ptx.count('cp.async.bulk.tensor')}")


def main() -> None:
    from farm.bench.ar import _time_graph
    from stages import layer_chain
    kern = variant()
    t = layer_chain.TILING
    torch.manual_seed(0)
    dev = torch.device("cuda")

    def w(n, k):
        return torch.randn(n, k, device=dev, dtype=torch.bfloat16) * k ** -0.5
    layers = [dict(o=w(H, H), gu=layer_chain.pair_rows(w(2 * I, H)), d=w(H, I), q=w(Q, H)) for _ in range(L + 1)]
    for lay in layers:      # the same weights tile by tile, each with the rows its tiles copy
        lay["bo"], lay["bgu"] = blocked(lay["o"], t.bn_o), blocked(lay["gu"], 2 * t.bn_gu)
        lay["bd"], lay["bq"] = blocked(lay["d"], t.bn_d), blocked(lay["q"], t.bn_q)
    a = torch.randn(32, H, device=dev, dtype=torch.bfloat16)
    x0 = torch.randn(32, H, device=dev, dtype=torch.bfloat16)
    state = layer_chain.words(dev)
    programs = torch.cuda.get_device_properties(dev).multi_processor_count

    def as_is(a, x, lay, nxt):
        return layer_chain._launch(a, x, lay["o"], lay["gu"], lay["d"], nxt["q"], EPS, state)

    def tiled(a, x, lay, nxt):
        m = x.shape[0]
        h_out, x_out = torch.empty_like(x), torch.empty_like(x)
        g_out, q_out = x.new_empty(m, I), x.new_empty(m, Q)
        sq_h = torch.empty(H // t.bn_o, 32, dtype=torch.float32, device=dev)
        sq_x = torch.empty(H // t.bn_d, 32, dtype=torch.float32, device=dev)
        wo, wgu, wd, wq = (layer_chain._descriptor(lay[k] if k != "bq" else nxt[k], 32, 128, True)
                           for k in ("bo", "bgu", "bd", "bq"))
        xa, xh, xg, xn = (layer_chain._descriptor(v, 32, 128) for v in (a, h_out, g_out, x_out))
        kern.layer_chain[(programs,)](
            wo, wgu, wd, wq, xa, xh, xg, xn, x, h_out, g_out, x_out, q_out, sq_h, sq_x, state[1:6], state[0:1], m,
            EPS, H=H, I=I, Q=Q, BN_O=t.bn_o, BN_GU=t.bn_gu, BN_D=t.bn_d, BN_Q=t.bn_q, BK=t.bk, STAGES=t.stages,
            XSTAGES=t.xstages, G=programs, NEXT=True, EARLY=t.early_weights, num_warps=4, launch_pdl=t.pdl)
        return x_out, q_out

    for rows in (32, 1):
        ref = as_is(a[:rows], x0[:rows], layers[0], layers[1])
        got = tiled(a[:rows], x0[:rows], layers[0], layers[1])
        torch.cuda.synchronize()
        print(f"{rows} rows: tile-ordered weights give the same bits {all(torch.equal(p, q) for p, q in zip(ref, got))}"
              f"; spins that gave up {int(state[0])}", flush=True)
    nbytes = sum(layers[0][k].numel() * 2 for k in ("o", "gu", "d", "q"))
    for rnd in range(3):
        for rows in (32, 1):
            for name, fn in (("as is", as_is), ("tile-ordered weights", tiled)):
                def run():
                    x = x0[:rows]
                    for layer in range(L):
                        x, _ = fn(a[:rows], x, layers[layer], layers[layer + 1])
                us = _time_graph(run) / L * 1e6
                print(f"round {rnd} rows {rows} {name}: {us:.2f} µs per layer ({nbytes / us / 1e6:.2f} TB/s); "
                      f"spins that gave up {int(state[0])}", flush=True)


if __name__ == "__main__":
    compile_only() if "--compile-only" in sys.argv else main()
