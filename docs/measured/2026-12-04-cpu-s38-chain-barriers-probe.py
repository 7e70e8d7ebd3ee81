"""What the warpgroup barriers around the chain consumer's mbarrier waits and arrives cost (2026-12-04, session s38;
written on the CPU box). Why: in the consumer's k-loop Triton 3.6 puts a `bar.sync 0, 128` (its four warps) before
every `mbarrier.arrive` — one thread arrives for the warpgroup — and before the slot waits: about three per k-tile,
~600 a layer (`…-s38-chain-consumer-clock-probe.py`: ~13 µs of the consumer's ~36 a layer are its own instructions).
An arrive after `warpgroup_mma_wait` needs no such barrier (the MMA whose slot it frees is complete for the whole
warpgroup once any warp's wait returns), and a wait needs none at all. Gluon cannot leave them out, so this probe
edits the compiled PTX: Triton's kernel dump and override (TRITON_KERNEL_DUMP / TRITON_KERNEL_OVERRIDE) recompile
the chain from a copy of its PTX without those barriers (`patch`); the other `bar.sync`s (the epilogues', the
counters' release) stay.
Three steps, each its own process (from the repository root on an H200):
  python …-chain-barriers-probe.py dump      # 28 layers with the committed kernel: µs per layer, outputs saved,
                                             # its PTX dumped
  python …-chain-barriers-probe.py patch     # the PTX without the consumer's barriers before waits and arrives
  python …-chain-barriers-probe.py override  # 28 layers with the patched kernel: same bits?, µs per layer"""
import os
import pathlib
import re
import sys

sys.path.insert(0, ".")

H, I, Q, L, EPS = 2048, 6144, 4096, 28, 1e-6
WORK = pathlib.Path(os.environ.get("PROBE_DIR", "/tmp/chain-barriers"))


def run(tag: str) -> None:
    import torch

    from farm.bench.ar import _time_graph
    from stages import layer_chain

    torch.manual_seed(0)
    dev = torch.device("cuda")

    def w(n, k):
        return torch.randn(n, k, device=dev, dtype=torch.bfloat16) * k ** -0.5
    layers = [(w(H, H), layer_chain.pair_rows(w(2 * I, H)), w(H, I), w(Q, H)) for _ in range(L + 1)]
    state = layer_chain.words(dev)
    attn = torch.randn(32, H, device=dev).bfloat16()
    x0 = torch.randn(32, H, device=dev).bfloat16()

    def chain_all():
        x = x0
        for i_ in range(L):
            o, gu, d, _ = layers[i_]
            x, _q = layer_chain.chain(attn, x, o, gu, d, layers[i_ + 1][3], EPS, state)
        return x

    out = chain_all().clone()
    one = layer_chain.chain(attn[:1].contiguous(), x0[:1].contiguous(), *layers[0][:3], layers[1][3], EPS, state)[0]
    torch.cuda.synchronize()
    if tag == "dump":
        torch.save({"out": out.cpu(), "one": one.cpu()}, WORK / "committed.pt")
    else:
        ref = torch.load(WORK / "committed.pt")
        print(f"same bits as the committed kernel after 28 layers: {torch.equal(out.cpu(), ref['out'])}; one row, "
              f"one layer: {torch.equal(one.cpu(), ref['one'])}; spins that gave up {int(state[0])}", flush=True)
    for rnd in range(3):
        print(f"round {rnd} {tag:9} {_time_graph(chain_all) / L * 1e6:6.2f} µs per layer", flush=True)


def patch() -> None:
    """Drop each `bar.sync 0, 128` whose next instructions, before any shared-memory access, barrier, atomic or
    fence, reach an mbarrier arrive or try_wait."""
    found = [p for p in (WORK / "dump").glob("*/layer_chain.ptx")]
    print(f"dumped: {[str(p) for p in found]}", flush=True)
    for ptx in found:
        lines = ptx.read_text().splitlines()
        keep, dropped = [], 0
        for n, line in enumerate(lines):
            if re.match(r"\s*bar\.sync\s+0, 128;", line):
                ahead = [x for x in lines[n + 1:n + 12] if x.strip() and not x.strip().startswith(("//", ".loc"))]
                hit = False
                for x in ahead[:6]:
                    if "mbarrier.arrive" in x or "mbarrier.try_wait" in x:
                        hit = True
                        break
                    if re.search(r"ld\.shared|st\.shared|bar\.|barrier\.|atom\.|red\.|fence\.|wgmma", x):
                        break
                if hit:
                    dropped += 1
                    continue
            keep.append(line)
        total = sum(1 for x in lines if re.match(r"\s*bar\.sync\s+0, 128;", x))
        out = WORK / "override" / ptx.parent.name / "layer_chain.ptx"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("\n".join(keep) + "\n")
        print(f"{ptx.parent.name}: dropped {dropped} of {total} `bar.sync 0, 128` → {out}", flush=True)


if __name__ == "__main__":
    WORK.mkdir(parents=True, exist_ok=True)
    step = sys.argv[1]
    if step == "patch":
        patch()
    else:
        run(step)
