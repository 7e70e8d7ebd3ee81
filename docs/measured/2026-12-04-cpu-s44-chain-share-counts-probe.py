"""The layer chain with counters that are never reset, against the kernel before it (2026-12-04, session s44;
written on the CPU box, compiled there for sm_90 with Triton 3.6).
The variant is `…-cpu-s44-chain-share-counts.patch`, not in the tree: the device went away before it could run once.
Apply it first (`git apply docs/measured/2026-12-04-cpu-s44-chain-share-counts.patch`); "tree" below is then it.
The same probe serves `…-cpu-s44-chain-block-counts.patch` (the share counts plus a counter per 128-column block of
each product's output, so a k-tile waits only for the 8 tiles that wrote it; apply it instead of the first).
Every launch adds exactly `layer_chain.SHARE` to each of its three counters (int64) and waits for the next
multiple; the signal warp reads where they stand after the kernel before has ended; no count at the end of the
launch, no reset, and the q/k/v product (which no later product of the launch reads) is not counted. The kernel
before (commit 4151e10, read from git): the last program to leave adds to a fifth counter (acq_rel) and zeroes the
five. The probe of a variant with a counter set per layer (`…-s44-chain-counter-sets.log`) put that end-of-launch
count at ~0.6 µs a layer. 28 layers of yue2-3b shapes at 32 rows, µs per layer in a CUDA graph, three rounds;
outputs compared bitwise (the same MMAs and epilogues) and the spins that gave up counted. Then the GPU suite (its
chain test checks the counters' shares over launches of 132 and 64 programs) and `farm bench ar`.
Run on an H200 from the repository root, the patch applied (on the CPU box: the tree travels, .git does not) and
stages/_chain_before.py written as `kernel_before` says:
python docs/measured/2026-12-04-cpu-s44-chain-share-counts-probe.py"""
import importlib
import pathlib
import subprocess
import sys

import torch

sys.path.insert(0, ".")

H, I, Q, L, EPS, BEFORE = 2048, 6144, 4096, 28, 1e-6, "4151e10"


def kernel_before():
    """Commit 4151e10's kernel as stages/_chain_before.py. No .git travels to a device machine: there the file must
    already be in the tree that travels (`git show 4151e10:stages/_layer_chain_gluon.py > stages/_chain_before.py`
    on the CPU box, untracked, before the call)."""
    path = pathlib.Path("stages/_chain_before.py")
    if not path.exists():
        path.write_text(subprocess.run(["git", "show", f"{BEFORE}:stages/_layer_chain_gluon.py"], check=True,
                                       capture_output=True, text=True).stdout)
    return importlib.import_module("stages._chain_before")


def main() -> None:
    from farm.bench.ar import _time_graph
    from stages import layer_chain

    torch.manual_seed(0)
    dev = torch.device("cuda")
    t = layer_chain.TILING
    g = torch.cuda.get_device_properties(dev).multi_processor_count

    def w(n, k):
        return torch.randn(n, k, device=dev, dtype=torch.bfloat16) * k ** -0.5
    layers = [(w(H, H), layer_chain.pair_rows(w(2 * I, H)), w(H, I), w(Q, H)) for _ in range(L + 1)]
    attn = torch.randn(32, H, device=dev).bfloat16()
    x0 = torch.randn(32, H, device=dev).bfloat16()
    state = layer_chain.words(dev)
    old_state = torch.zeros(6, dtype=torch.int32, device=dev)
    try:
        old = kernel_before()
        d = layer_chain._descriptor

        def old_chain(a, x, o, gu, dn, qkv):
            """The call of commit 4151e10's `layer_chain._launch` (its int32 words: err, four counters, the leavers)."""
            m = x.shape[0]
            h_out, g_out, x_out = (torch.empty(m, n, dtype=x.dtype, device=dev) for n in (H, I, H))
            q_out = torch.empty(m, Q, dtype=x.dtype, device=dev)
            sq_h = torch.empty(H // t.bn_o, 32, dtype=torch.float32, device=dev)
            sq_x = torch.empty(H // t.bn_d, 32, dtype=torch.float32, device=dev)
            old.layer_chain[(g,)](
                d(o, t.bn_o, t.bk, True), d(gu, 2 * t.bn_gu, t.bk, True), d(dn, t.bn_d, t.bk, True),
                d(qkv, t.bn_q, t.bk, True), *(d(v, 32, t.bk) for v in (a, h_out, g_out, x_out)), x, h_out, g_out,
                x_out, q_out, sq_h, sq_x, old_state[1:6], old_state[0:1], m, EPS, H=H, I=I, Q=Q, BN_O=t.bn_o,
                BN_GU=t.bn_gu, BN_D=t.bn_d, BN_Q=t.bn_q, BK=t.bk, STAGES=t.stages, XSTAGES=t.xstages, G=g, NEXT=True,
                EARLY=t.early_weights, num_warps=4, launch_pdl=t.pdl, maxnreg=t.maxnreg)
            return x_out, q_out

        def run(step):
            def chain_all():
                x = x0
                for i_ in range(L):
                    o, gu, dn, _ = layers[i_]
                    x, _q = step(attn, x, o, gu, dn, layers[i_ + 1][3])
                return x
            return chain_all
        kernels = {"kernel before (reset at the end)": run(old_chain),
                   "tree (shares, never reset)": run(lambda *a: layer_chain.chain(*a, EPS, state))}
        outs = {name: fn().clone() for name, fn in kernels.items()}
        a, b = outs.values()
        print(f"same bits after 28 layers: {torch.equal(a, b)}; spins that gave up {int(old_state[0])} / "
              f"{int(state[0])}", flush=True)
        for rnd in range(3):
            for name, fn in kernels.items():
                print(f"round {rnd} {name:34} {_time_graph(fn) / L * 1e6:6.2f} µs per layer", flush=True)
        again = kernels["tree (shares, never reset)"]()
        print(f"after the timed replays: same bits {torch.equal(again, a)}; spins that gave up {int(old_state[0])} / "
              f"{int(state[0])}; the tree's counters {state[1:].tolist()} (multiples of {layer_chain.SHARE}: "
              f"{not (state[1:] % layer_chain.SHARE).any().item()})", flush=True)
    finally:
        pathlib.Path("stages/_chain_before.py").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
