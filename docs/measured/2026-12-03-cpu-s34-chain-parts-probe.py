"""What each part of the layer chain costs, by leaving it out (2026-12-03, session s34; written on the CPU box, run
on an H200). Timing only: every variant but the first computes wrong numbers. The kernel's source is edited by
substitution and imported from a temporary file (as in the s33 probes):
- "no MMAs": the consumer waits for and frees every slot but multiplies nothing;
- "no activation copies": the activation warp frees each slot for the consumer without copying into it;
- "no weight copies": the weight warp likewise;
- "no waits": the grid-wide spins end at once (session s33: 35.7 against 37.6 µs);
- and their combinations, down to the protocol alone (no copies, no MMAs: the handshakes, the epilogues and the
  grid barriers).
If leaving out the MMAs (whose A operand is the 64-row activation tile, half of it padding) saves what the weights
alone do not explain, a chain with the weights as the MMA's A operand (swap-AB) is the next thing to build; if
leaving out the copies changes little, the handshakes are.
Kernel level as in the s33 probes: 28 layers of random yue2-3b weights, 32 rows, µs per layer in a CUDA graph.
`--protocol`: the protocol alone (no copies, no MMAs) without its grid waits, its output stores, or with half its
handshakes (k-tiles of 256), to see what its time is made of.
Run from the repository root: python docs/measured/2026-12-03-cpu-s34-chain-parts-probe.py [--protocol] — at commit
841cade: the substitutions name that kernel's lines, which the full-slots change (df4839e) rewrote."""
import importlib.util
import pathlib
import sys
import tempfile
from dataclasses import replace

import torch

sys.path.insert(0, ".")
import stages  # noqa: E402
from farm.bench.ar import _time_graph  # noqa: E402
from stages import layer_chain  # noqa: E402

L, H, I, Q = 28, 2048, 6144, 4096
EPS = 1e-6
SOURCE = pathlib.Path("stages/_layer_chain_gluon.py").read_text()
MMA = [("            acc = warpgroup_mma(xs.index(xsl), ring.index(s).slice(0, W).permute((1, 0)), acc, is_async=True)\n"
        "            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))\n", ""),
       ("        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))\n", "")]
XCOPY = [("            mbarrier.expect(xfull.index(s), ROWS * BK * 2)\n"
          "            tma.async_copy_global_to_shared(desc, [0, k * BK], xfull.index(s), xs.index(s).slice(0, ROWS))\n",
          "            mbarrier.arrive(xfull.index(s))\n")]
WCOPY = [("            mbarrier.expect(full.index(s), ROWS_W * BK * 2)\n"
          "            tma.async_copy_global_to_shared(desc, [tile * ROWS_W, k * BK], full.index(s),\n"
          "                                            ring.index(s).slice(0, ROWS_W))\n",
          "            mbarrier.arrive(full.index(s))\n")]
WAITS = [("while (seen < target) & (n < 100000000):", "while (seen < target) & (n < 0):")]
VARIANTS = {
    "as is": [],
    "no MMAs": MMA,
    "no activation copies": XCOPY,
    "no MMAs, no activation copies": MMA + XCOPY,
    "no waits": WAITS,
    "no waits, no MMAs, no activation copies (the weights' stream)": WAITS + MMA + XCOPY,
    "no weight copies": WCOPY,
    "no weight copies, no activation copies (MMAs from shared memory)": WCOPY + XCOPY,
    "no copies, no MMAs (the protocol)": WCOPY + XCOPY + MMA,
}
STORES = [("            gl.store(out_ptr + offs, y, mask=rows)\n", ""),
          ("                gl.store(sq_out + tile * ROWS + r, gl.sum(yf * yf, axis=1), mask=r < ROWS)\n",
           "                pass\n"),
          ("    gl.store(out_ptr + where, y, mask=where < M * N)    # row < M\n", "")]
PROTOCOL = WCOPY + XCOPY + MMA
# `--protocol`: what the protocol alone (no copies, no MMAs: 21.5 µs per layer) is made of
PROTOCOL_VARIANTS = {
    "the protocol": (PROTOCOL, {}),
    "the protocol, no waits": (PROTOCOL + WAITS, {}),
    "the protocol, k-tiles of 256 (half the handshakes)": (PROTOCOL, dict(bk=256, stages=6, xstages=3)),
    "the protocol, no output stores": (PROTOCOL + STORES, {}),
    "the protocol, no waits, no output stores": (PROTOCOL + WAITS + STORES, {}),
    "the protocol, no waits, no output stores, k-tiles of 256": (PROTOCOL + WAITS + STORES,
                                                                   dict(bk=256, stages=6, xstages=3)),
}
TMP = pathlib.Path(tempfile.mkdtemp())


def variant(subs):
    src = SOURCE
    for old, new in subs:
        assert old in src, old
        src = src.replace(old, new)
    path = TMP / f"chain_{len(list(TMP.iterdir()))}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    torch.manual_seed(0)
    dev = torch.device("cuda")
    layers = [dict(o=torch.randn(H, H, device=dev, dtype=torch.bfloat16) * H ** -0.5,
                   gup=layer_chain.pair_rows(torch.randn(2 * I, H, device=dev, dtype=torch.bfloat16) * H ** -0.5),
                   d=torch.randn(H, I, device=dev, dtype=torch.bfloat16) * I ** -0.5,
                   q=torch.randn(Q, H, device=dev, dtype=torch.bfloat16) * H ** -0.5) for _ in range(L + 1)]
    a = torch.randn(32, H, device=dev, dtype=torch.bfloat16)
    x0 = torch.randn(32, H, device=dev, dtype=torch.bfloat16)
    nbytes = sum(layers[0][k].numel() * 2 for k in ("o", "gup", "d", "q"))
    if "--protocol" in sys.argv:
        mods = {name: (variant(subs), replace(layer_chain.TILING, **t)) for name, (subs, t) in PROTOCOL_VARIANTS.items()}
    else:
        mods = {name: (variant(subs), layer_chain.TILING) for name, subs in VARIANTS.items()}
    for rnd in range(2):
        for name, (mod, tiling) in mods.items():
            stages._layer_chain_gluon = mod      # layer_chain._launch imports it from the package at each call
            state = layer_chain.words(dev)

            def run_chain():
                x = x0
                for layer in range(L):
                    x, _ = layer_chain._launch(a, x, layers[layer]["o"], layers[layer]["gup"], layers[layer]["d"],
                                               layers[layer + 1]["q"], EPS, state, tiling)
            us = _time_graph(run_chain) / L * 1e6
            print(f"round {rnd} {name}: {us:.2f} µs per layer ({nbytes / us / 1e6:.2f} TB/s of weights); spins that "
                  f"gave up {int(state[0])}", flush=True)


if __name__ == "__main__":
    main()
