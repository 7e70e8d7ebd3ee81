"""The synchronisation of `…-cpu-s45-chain-v2-probe.py`'s layer chain (64-row weight tiles as the MMA's M, K split
over programs), simulated on the CPU (2026-12-04, session s45; no device was lent). Gluon has no interpreter, and a
kernel whose rings fall out of step hangs the card, so before the kernel meets a GPU its protocol runs here with
Python threads, with the s44 simulation's mbarriers (the hardware's parity rule), global words and random delays
(`…-cpu-s44-chain-protocol-sim.py`): every program's four roles with the kernel's waits, arrivals and counts in
the same order — the weight warp's slots of PER k-tiles per item (tile, K part), the activation warp's k-tiles, the
consumer freeing a weight slot once its k-tiles are in registers (FP8) or once the MMA after it is issued (BF16),
each split tile's parts counted (acq_rel) and summed by the program that stores the last one, which resets the
tile's counter; the product counters as today's kernel keeps them (the last program to leave zeroes them).
Checked: nothing deadlocks; no ring slot is overwritten while the consumer still uses it (each slot tagged with
what was copied into it); an activation k-tile is copied only after every tile of the product before was stored;
a split tile is summed only once all its parts are stored, and stored exactly once; the down residual and the norm
factors are read only after every o (or down) tile was stored; after every launch every counter is zero. Launches
share one state, with grids of 2-40 programs, BF16 (PER 1) and FP8 (PER 2) rings, K in 4/1/4/2 and 2/1/2/1 parts,
with and without q/k/v.
What it cannot check: the memory model and Gluon's lowering.
Run anywhere: python docs/measured/2026-12-04-cpu-s45-chain-v2-protocol-sim.py"""
import importlib.util
import pathlib
import random
import sys
import threading
import time


def _s44():
    path = pathlib.Path(__file__).with_name("2026-12-04-cpu-s44-chain-protocol-sim.py")
    spec = importlib.util.spec_from_file_location("s44_protocol_sim", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


S44 = _s44()
Barrier, Memory, nap, guard = S44.Barrier, S44.Memory, S44.nap, S44._guard


def launch(mem, G, H, I, Q, splits, PER, STAGES, XSTAGES, NEXT, errors):
    """One launch of G programs. Words: [0:4] the product counters, [4] the programs that have left, [5:] one
    counter per tile of a split product."""
    products = [("o", H, H, splits[0]), ("gu", 2 * I, H, splits[1]), ("down", H, I, splits[2])]
    products += [("qkv", Q, H, splits[3])] if NEXT else []
    source = {"gu": "o", "down": "gu", "qkv": "down"}
    stored, parts = set(), set()        # (product, tile) stored; (product, tile, part) stored
    # an item's k-tiles must fill whole slots (else the slot count rounds down and the two rings fall out of step)
    assert all(k // 128 // split % PER == 0 for _, _, k, split in products)

    def all_stored(name, nw):
        return all((name, t) in stored for t in range(nw // 64))

    def program(pid):
        full, empty = [Barrier() for _ in range(STAGES)], [Barrier() for _ in range(STAGES)]
        xfull, xempty = [Barrier() for _ in range(XSTAGES)], [Barrier() for _ in range(XSTAGES)]
        ready = [Barrier() for _ in range(4)]
        left = []
        wslot, xslot = [None] * STAGES, [None] * XSTAGES     # what each slot holds: (product, item, k-tile)

        def read(ring, slots, n, tag):
            """The consumer reads a slot (a load into registers, or an MMA up to the wait that says it is done):
            it must hold what was copied for this k-tile, not yet something newer."""
            if slots[n] != tag:
                errors.append(f"{ring} slot {n} holds {slots[n]} where {tag} was read ({pid})")

        def items(nw, split):
            return range(pid, nw // 64 * split, G)

        def weight_warp():
            i = 0
            for name, nw, k, split in products:
                kt = k // 128 // split
                for it in items(nw, split):
                    for kk in range(kt // PER):
                        s = i % STAGES
                        empty[s].wait(((i // STAGES) & 1) ^ 1)
                        nap()
                        wslot[s] = (name, it, kk)
                        full[s].arrive()
                        i += 1

        def activation_warp():
            j = 0
            for p, (name, nw, k, split) in enumerate(products):
                if p > 0:
                    mem.spin(lambda: mem.words[p - 1] >= G)
                    src = [q for q in products if q[0] == source[name]][0]
                    if not all_stored(src[0], src[1]):
                        errors.append(f"{name} input copied before every {src[0]} tile was stored ({pid})")
                kt = k // 128 // split
                for it in items(nw, split):
                    for kx in range(kt):
                        s = j % XSTAGES
                        xempty[s].wait(((j // XSTAGES) & 1) ^ 1)
                        nap()
                        xslot[s] = (name, it, kx)
                        xfull[s].arrive()
                        j += 1
            left.append("activation")

        def signal_warp():
            mem.spin(lambda: mem.words[0] >= G)
            if not all_stored("o", H):
                errors.append(f"o norm factors read before every o tile was stored ({pid})")
            ready[1].arrive()
            mem.spin(lambda: mem.words[1] >= G)
            ready[2].arrive()
            if NEXT:
                mem.spin(lambda: mem.words[2] >= G)
                if not all_stored("down", H):
                    errors.append(f"down norm factors read before every down tile was stored ({pid})")
                ready[3].arrive()
            left.append("signal")

        def consumer():
            i = j = 0
            for p, (name, nw, k, split) in enumerate(products):
                if name == "down":       # the consumer's own acquire of the gate/up count: o is stored
                    mem.spin(lambda: mem.words[1] >= G)
                    if not all_stored("o", H):
                        errors.append(f"down residual read before every o tile was stored ({pid})")
                kt = k // 128 // split
                slots = kt // PER
                for it in items(nw, split):
                    tile = it // split
                    inflight = []       # the slots the MMA in flight reads until the next wait says it is done
                    for kk in range(slots):
                        si = i + kk
                        s = si % STAGES
                        wtag = (name, it, kk)
                        full[s].wait((si // STAGES) & 1)
                        for u in range(PER):
                            xj = j + kk * PER + u
                            xtag = (name, it, kk * PER + u)
                            if PER == 2:                        # FP8: the k-tile goes into registers
                                read("weight", wslot, s, wtag)
                                nap()
                                if u == PER - 1:                # both are in registers: the slot is free
                                    empty[s].arrive()
                            xfull[xj % XSTAGES].wait((xj // XSTAGES) & 1)
                            issued = [("x", xslot, xj % XSTAGES, xtag)] + ([("weight", wslot, s, wtag)] if PER == 1
                                                                           else [])
                            for slot in issued:
                                read(*slot)
                            nap()
                            for slot in inflight:               # wait(1): the MMA before this one is done
                                read(*slot)
                            inflight = issued
                            if PER == 1 and kk > 0:
                                empty[(si + STAGES - 1) % STAGES].arrive()
                            if kk > 0 or u > 0:
                                xempty[(xj + XSTAGES - 1) % XSTAGES].arrive()
                    nap()
                    for slot in inflight:                       # wait(0)
                        read(*slot)
                    if PER == 1:
                        empty[(i + slots - 1) % STAGES].arrive()
                    xempty[(j + kt - 1) % XSTAGES].arrive()
                    i += slots
                    j += kt
                    last = split == 1
                    if split > 1:
                        with mem.cv:
                            parts.add((name, tile, it % split))
                            mem.words[5 + tile] += 1
                            last = mem.words[5 + tile] == split
                        if last:
                            if any((name, tile, q) not in parts for q in range(split)):
                                errors.append(f"{name} tile {tile} summed before all its parts were stored ({pid})")
                            with mem.cv:
                                mem.words[5 + tile] = 0
                    if last:
                        if name in ("gu", "down", "qkv"):
                            ready[{"gu": 1, "down": 2, "qkv": 3}[name]].wait(0)
                        with mem.cv:
                            if (name, tile) in stored:
                                errors.append(f"{name} tile {tile} stored twice ({pid})")
                            stored.add((name, tile))
                nap()
                mem.add(p, 1)                           # _done: this program's part of the product is stored
            left.append("consumer")

        roles = [weight_warp, activation_warp, signal_warp, consumer]
        return [threading.Thread(target=guard(r, errors)) for r in roles], left

    programs = [program(pid) for pid in range(G)]
    threads = [t for ts, _ in programs for t in ts]
    random.shuffle(threads)
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for _, left in programs:     # every warp past its last wait: count it; the last program zeroes the counters
        with mem.cv:
            mem.words[4] += 1
            if mem.words[4] == G:
                mem.words[:5] = [0] * 5
    for name, nw, _, _ in products:
        if not all_stored(name, nw):
            errors.append(f"{name}: some tiles never stored")


def main():
    random.seed(0)
    runs = 0
    # yue2-3b's splits (o 4, gate/up 1, down 4, q/k/v 2) on scaled-down shapes: H 1024 gives o and down 16 tiles of
    # 64 rows (64 items of 2 k-tiles), gate/up 2I / 64 = 32 tiles, q/k/v 16 tiles (32 items); then grids wider than
    # some products. (A first version ran H 512: o's items of one k-tile, half an FP8 slot. It hung here: the kernel
    # needs every item's k-tiles to fill whole slots, which yue2-3b's shapes do.)
    for (H, I, Q), grids in (((1024, 1024, 1024), (7, 5, 3, 9, 2)), ((1024, 1024, 512), (40, 33, 17))):
        mem = Memory(5 + max(H, Q) // 64)
        for n, G in enumerate(grids * 4):
            PER, NEXT, splits = (2 if n % 2 else 1), n % 3 != 2, ((4, 1, 4, 2), (2, 1, 2, 1))[n // len(grids) % 2]
            errors = []
            t0 = time.time()
            launch(mem, G, H, I, Q, splits, PER, STAGES=4, XSTAGES=3, NEXT=NEXT, errors=errors)
            zero = not any(mem.words)
            print(f"H {H}, Q {Q}, launch {n:2}: {G:2} programs, K parts {splits}, PER {PER}, NEXT {NEXT!s:5}: "
                  f"{time.time() - t0:5.2f} s, {len(errors)} errors, every counter zero: {zero}", flush=True)
            for e in errors[:5]:
                print("   ", e)
            assert not errors and zero
            runs += 1
    print("ok", runs)


if __name__ == "__main__":
    main()
