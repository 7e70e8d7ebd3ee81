"""How the layer chain's 192 KB of ring divide between weight and activation slots (2026-12-03, session s34;
written on the CPU box, run on an H200). Session s33 found k-tiles of 256 (3 activation slots of 256 columns) level
with the default (6 of 128) and 2 activation slots of 256 much slower: as if what bounds a layer were the
activation columns in flight (slots × BK), each k-tile waiting one L2 round trip, not the handshakes or the bytes.
If so, more activation slots (fewer weight slots) should win. The splits here all take 192 KB (a weight slot 8 KB,
an activation slot 16 KB at BK 128). Kernel level as in the s33 probe (28 layers, 32 rows, µs per layer, the
default's bits), then the engine's one-row and 24-row steps with the default, 8/8 and 6/9 (the s33 probe's engine level, its
labels reused).
Run from the repository root: python docs/measured/2026-12-03-cpu-s34-ring-split-probe.py (at commit b0c4e38, where
the s33 probe it borrows from still runs). Result: `…-h200-s34-ring-split.log`, every split slower than 12/6."""
import runpy
from dataclasses import replace

from stages import layer_chain

BASE = layer_chain.TILING
SPLITS = {f"{w}/{x} slots": replace(BASE, stages=w, xstages=x) for w, x in ((10, 7), (8, 8), (6, 9), (4, 10))}

if __name__ == "__main__":
    probe = runpy.run_path("docs/measured/2026-12-03-cpu-s33-chain-bk-probe.py", run_name="s33")
    probe["WIDE"].clear()
    probe["WIDE"].update(SPLITS)
    probe["kernel_level"]()
    # the engine: default, 8/8 and 6/9 (the s33 probe's engine level over these tilings)
    probe["WIDE"].clear()
    probe["WIDE"].update({"bk 256, 6/3 slots": SPLITS["8/8 slots"], "gate/up by k": SPLITS["6/9 slots"]})
    print("engine level: 'bk 256, 6/3 slots' below is 8/8 slots, 'gate/up by k' is 6/9 slots", flush=True)
    probe["engine_level"]()
