"""The synchronisation of `…-cpu-s44-chain-block-counts.patch`'s layer chain, simulated on the CPU (2026-12-04,
session s44). Gluon has no interpreter, and a kernel that waits on an mbarrier nobody arrives on hangs the card, so
before the patch meets a GPU this runs its protocol with Python threads: every program's five roles (weight warp,
activation warp, signal warp, consumer warpgroup, count warp) with the patch's waits, arrivals and counts in the
same order, mbarriers with the hardware's parity rule (a wait on parity P passes while the completed phases' parity
is not P, so a barrier two phases ahead looks not done), global counters as locked integers, TMA copies and MMAs as
instant. Random sleeps shuffle the interleavings. Checked: nothing deadlocks (a wait that takes more than 10 s
fails the run), every activation k-tile is copied only after every tile that wrote its columns was stored, the
down residual and the norm factors are read only after all o (or down) tiles were, and after every launch each
counter is a whole multiple of SHARE. Several launches share one state, with grids of different sizes and k-tiles
of 128 and 256 columns, as the GPU test does. What it cannot check: the memory model (release/acquire, the async
proxy) and Gluon's lowering — those need the GPU.
Run anywhere: python docs/measured/2026-12-04-cpu-s44-chain-protocol-sim.py"""
import random
import threading
import time

SHARE, BLOCK, TIMEOUT = 1 << 16, 128, 10.0


class Barrier:
    """An mbarrier of arrival count 1: wait(P) passes while completed phases % 2 != P."""

    def __init__(self):
        self.done = 0
        self.cv = threading.Condition()

    def arrive(self):
        with self.cv:
            self.done += 1
            self.cv.notify_all()

    def wait(self, parity):
        with self.cv:
            if not self.cv.wait_for(lambda: self.done % 2 != parity, TIMEOUT):
                raise TimeoutError("mbarrier wait")


class Memory:
    """Global words (counters, block counters, the error word) and which output tiles are stored."""

    def __init__(self, words):
        self.words = [0] * words
        self.cv = threading.Condition()
        self.stored = set()

    def add(self, i, v):
        with self.cv:
            self.words[i] += v
            self.cv.notify_all()

    def read(self, i):
        with self.cv:
            return self.words[i]

    def spin(self, ok):
        with self.cv:
            if not self.cv.wait_for(ok, TIMEOUT):
                raise TimeoutError("spin")


def nap():
    if random.random() < 0.3:
        time.sleep(random.random() * 2e-4)


def launch(mem, G, H, I, Q, BK, bn, STAGES, XSTAGES, NEXT, errors):
    """One chain launch of G programs; bn: tile outputs per product (o, gate/up, down, q/k/v)."""
    c0, c2, blocks = 1, 3, 4                # words: [0] err, [1:4] the product counters, [4:] the block counters
    products = [("o", H, H, bn[0]), ("gu", I, H, bn[1]), ("down", H, I, bn[2])] + ([("qkv", Q, H, bn[3])] if NEXT
                                                                                  else [])
    base = {"gu": blocks, "down": blocks + H // BLOCK, "qkv": blocks + (H + I) // BLOCK}      # each input's blocks
    source = {"gu": "o", "down": "gu", "qkv": "down"}
    launch_stored = set()

    def per(name):
        return 32 // (2 * dict((p[0], p[3]) for p in products)[name] if name == "gu" else
                      dict((p[0], p[3]) for p in products)[name])
    assert all(k // BK % per(name) == 0 for name, _, k, _ in products)     # layer_chain.supported's whole slots

    def program(pid):
        full, empty = [Barrier() for _ in range(STAGES)], [Barrier() for _ in range(STAGES)]
        xfull, xempty = [Barrier() for _ in range(XSTAGES)], [Barrier() for _ in range(XSTAGES)]
        ready = [Barrier() for _ in range(4)]
        based, stored, taken = Barrier(), [Barrier(), Barrier()], [Barrier(), Barrier()]
        ends = {}

        def weight_warp():
            i = 0
            for name, n, k, b in products:
                for tile in range(pid, n // b, G):
                    for kk in range(k // BK // per(name)):
                        s = i % STAGES
                        empty[s].wait(((i // STAGES) & 1) ^ 1)
                        nap()
                        full[s].arrive()
                        i += 1

        def stored_prefix(name, have, need, k):
            nb, start = k // BLOCK, base[name]
            end = ends[0]
            b = list(range(have, have + 16))

            def done():
                for x in b:
                    if x < nb and mem.words[start + x] < end:
                        return x
                return have + 16
            mem.spin(lambda: done() >= need)
            return done()

        def activation_warp():
            j = 0
            based_waited = False
            for name, n, k, b in products:
                if name != "o" and not based_waited:
                    based.wait(0)
                    based_waited = True
                have, span = 0, BK // BLOCK
                for tile in range(pid, n // b, G):
                    for kt in range(k // BK):
                        if name != "o" and have < (kt + 1) * span:
                            have = stored_prefix(name, have, (kt + 1) * span, k)
                            src_bn = dict((p[0], p[3]) for p in products)[source[name]]
                            for col in range(kt * BK, (kt + 1) * BK, src_bn):    # the tiles that wrote this k-tile
                                if (source[name], col // src_bn) not in launch_stored:
                                    errors.append(f"{name} k-tile {kt} copied before {source[name]} tile "
                                                  f"{col // src_bn} was stored (program {pid})")
                        s = j % XSTAGES
                        xempty[s].wait(((j // XSTAGES) & 1) ^ 1)
                        nap()
                        xfull[s].arrive()
                        j += 1

        def signal_warp():
            seen = [mem.read(c0), mem.read(c0 + 1), mem.read(c2)]
            for p in range(3):
                ends[p] = (seen[p] // SHARE + 1) * SHARE
            based.arrive()
            mem.spin(lambda: mem.words[c0] >= ends[0])
            if any(("o", t) not in launch_stored for t in range(H // bn[0])):
                errors.append(f"o norm factor read before every o tile was stored (program {pid})")
            ready[1].arrive()
            if NEXT:
                mem.spin(lambda: mem.words[c2] >= ends[2])
                if any(("down", t) not in launch_stored for t in range(H // bn[2])):
                    errors.append(f"down norm factor read before every down tile was stored (program {pid})")
                ready[3].arrive()

        def consumer():
            i = j = n_ = 0
            for name, n, k, b in products:
                if name == "down":       # the signal warp's acquire of the o count, through `ready`
                    ready[1].wait(0)
                    if any(("o", t) not in launch_stored for t in range(H // bn[0])):
                        errors.append(f"down residual read before every o tile was stored (program {pid})")
                pr = per(name)
                slots = k // BK // pr
                for tile in range(pid, n // b, G):
                    for kk in range(slots):
                        si = i + kk
                        full[si % STAGES].wait((si // STAGES) & 1)
                        for u in range(pr):
                            xj = j + kk * pr + u
                            xfull[xj % XSTAGES].wait((xj // XSTAGES) & 1)
                            nap()
                            if kk > 0 or u > 0:
                                xempty[(xj + XSTAGES - 1) % XSTAGES].arrive()
                            if u == 0 and kk > 0:
                                empty[(si + STAGES - 1) % STAGES].arrive()
                    empty[(i + slots - 1) % STAGES].arrive()
                    xempty[(j + slots * pr - 1) % XSTAGES].arrive()
                    i += slots
                    j += slots * pr
                    if name in ("gu", "qkv"):
                        ready[1 if name == "gu" else 3].wait(0)
                    with mem.cv:
                        launch_stored.add((name, tile))
                    if name != "qkv":
                        taken[n_ % 2].wait(((n_ // 2) & 1) ^ 1)
                        stored[n_ % 2].arrive()
                        n_ += 1

        def count_warp():
            part = SHARE // G + (pid < SHARE % G)
            n_ = 0
            based.wait(0)
            for name, n, k, b in products:
                if name == "qkv":
                    break
                start = {"o": blocks, "gu": blocks + H // BLOCK, "down": blocks + (H + I) // BLOCK}[name]
                for tile in range(pid, n // b, G):
                    stored[n_ % 2].wait((n_ // 2) & 1)
                    nap()
                    mem.add(start + tile * b // BLOCK, SHARE // (BLOCK // b))
                    taken[n_ % 2].arrive()
                    n_ += 1
                if name == "o":
                    mem.add(c0, part)
                if name == "down" and NEXT:
                    mem.add(c2, part)

        roles = [weight_warp, activation_warp, signal_warp, consumer, count_warp]
        return [threading.Thread(target=_guard(r, errors)) for r in roles]

    threads = [t for pid in range(G) for t in program(pid)]
    random.shuffle(threads)
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _guard(fn, errors):
    def run():
        try:
            fn()
        except TimeoutError as e:
            errors.append(f"{fn.__name__}: {e} did not return in {TIMEOUT} s")
    return run


def main():
    random.seed(0)
    runs = 0
    # shapes: 4 + 12 + 4 blocks of 128 columns, every program with tiles of every product; then a grid wider than
    # the o, gate/up and down products' 32 tiles each, so that some programs count products they have no tile of.
    # (A first version also ran H 256 with k-tiles of 256: one k-tile, half a slot of a 16-row tile — a shape the
    # kernel's slot count rounds down to none. It hung here, and `layer_chain.supported` now refuses such shapes.)
    for (H, I, Q), grids in (((512, 1536, 1024), (7, 5, 3, 9, 7, 2)), ((512, 512, 512), (40, 33, 17))):
        mem = Memory(4 + (2 * H + I) // BLOCK)
        for n, G in enumerate(grids * 3):
            BK, NEXT = (256 if n % 3 == 2 else 128), n % 4 != 2
            errors = []
            t0 = time.time()
            launch(mem, G, H, I, Q, BK, (16, 16, 16, 32), STAGES=4, XSTAGES=3, NEXT=NEXT, errors=errors)
            whole = all(w % SHARE == 0 for w in mem.words[1:])
            print(f"H {H}, I {I}, launch {n:2}: {G:2} programs, k-tiles of {BK}, NEXT {NEXT!s:5}: "
                  f"{time.time() - t0:5.2f} s, {len(errors)} errors, every counter a multiple of SHARE: {whole}",
                  flush=True)
            for e in errors[:5]:
                print("   ", e)
            assert not errors and whole
            runs += 1
    print("ok", runs)


if __name__ == "__main__":
    main()
