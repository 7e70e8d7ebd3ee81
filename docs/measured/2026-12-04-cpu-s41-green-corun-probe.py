"""Prepared on a CPU box (2026-12-04, session s41) for the GPU: can the album's AR stages and its acoustic stage
share one H200 if each gets SMs of its own (CUDA green contexts), at the album's row counts?

Why: on one card the farm keeps AR and acoustic apart, because beside the acoustic stage the AR step runs 5-6x
slower (the co-runs of 2026-11-30 and 2026-12-03 at 6 plan rows; docs/benchmarks.md), so a 12-track album is the
AR part and then twelve acoustic calls (~35 + ~54 s). The green-context run of 2026-12-01 split the SMs with
torch's `make_current` API and found at most 1.17 cards' worth together, but it could not say whether the AR
step's CUDA graphs ran inside their partition (AR "alone in 16 SMs" kept 98 % of its rate). This probe:
1. makes two green contexts itself through the driver API (ctypes on libcuda: the SM resource split by count, one
   green context per part, a non-blocking stream in each), independent of the torch build's wrapper;
2. checks where work lands: a kernel that records each program's SM id, launched directly on each stream, from a
   CUDA graph captured on an ordinary side stream and replayed on the green stream, and from a graph captured on
   the green stream itself;
3. with every CUDA graph captured on the green stream it will run on (the only way a graph stays in its part, as
   the first run showed): the acoustic velocity evaluation and a device copy in their parts, alone and side by
   side (how much of the memory system the acoustic stage leaves);
4. the AR engine (layer chain on as many programs as its part has SMs: the same ids, see ChainTiling.programs) at
   24 semantic rows of the reference context and 12 plan rows of 2,720, alone in its part and beside the acoustic
   evaluation looping in the other. Printed for each split: both sides' rates against each alone on the whole card,
   and their sum (the cards' worth of work the two do together).
The first run (the version of commit 7e5db2d) captured the engines' graphs on side streams, so only its copy lines
and where-work-lands lines were confined; its co-run lines measured the chain on fewer programs, unconfined.
Run from the repository root on the GPU machine after `farm init-checkpoint out/ck --config yue2-3b --device cuda`:
python docs/measured/2026-12-04-cpu-s41-green-corun-probe.py [AR_SMS ...]
or, no green contexts (plain streams as a farm worker uses them, graphs captured as the engines capture them), the
chain on each of PROGRAMS programs, alone and beside the acoustic stage:
python docs/measured/2026-12-04-cpu-s41-green-corun-probe.py --sweep PROGRAMS ...
or each stage replaying on a green context's stream of its own, graphs captured as the engines capture them:
python docs/measured/2026-12-04-cpu-s41-green-corun-probe.py --contexts [--sides | --ar-contexts]
(in --sides the cards' worth is counted against the first way's AR alone, the chain on 40: recount it against the
whole card's figures of the other runs).
The runs (logs `docs/measured/2026-12-04-h200-s41-*`) were made by the versions of this file in the commits that
added each mode; the shared setup was then gathered into `Setup` and `unconfined`, the measurements unchanged
(the --sweep lines now also print the acoustic stage alone on its stream)."""
import contextlib
import ctypes
import sys
import threading
import time
from dataclasses import replace

import numpy as np
import torch
import triton
import triton.language as tl

sys.path.insert(0, ".")
from farm.bench.ar import bench_request  # noqa: E402
from stages import layer_chain  # noqa: E402
from stages.acoustic import AcousticEngine, chunk_tokens, song_noise  # noqa: E402
from stages.ar import AREngine  # noqa: E402
from stages.requests import open_checkpoint  # noqa: E402
from stages.transformer import AR, HEAD, NAR, ar_prefill, nar_kv_buffers  # noqa: E402
from stages.weights import load_model  # noqa: E402

BLOCKS = 8
SCENARIOS = (("semantic", 24, 7680), ("plan", 12, 2720))
RESOURCE_BYTES = 4096          # more than sizeof(CUdevResource) in any CUDA 12/13 header; one struct per buffer
SM_COUNT_AT = 96               # CUdevResource: type (4 bytes), 92 bytes of padding, then the SM resource's count


def log(*a) -> None:
    print(*a, flush=True)


class Green:
    """Two green contexts of the device: `first` SMs and the rest, a non-blocking stream in each."""

    def __init__(self, first: int | None):
        """`first` None: two green contexts that each hold every SM (contexts of their own, nothing confined)."""
        cu = ctypes.CDLL("libcuda.so.1")

        def ok(r, what):
            if r != 0:
                raise RuntimeError(f"{what}: CUresult {r}")

        dev = ctypes.c_int()
        ok(cu.cuDeviceGet(ctypes.byref(dev), torch.cuda.current_device()), "cuDeviceGet")
        whole, part, rest = (ctypes.create_string_buffer(RESOURCE_BYTES) for _ in range(3))
        ok(cu.cuDeviceGetDevResource(dev, whole, 1), "cuDeviceGetDevResource")        # 1: CU_DEV_RESOURCE_TYPE_SM
        if first is None:
            part, rest = whole, whole
        else:
            groups = ctypes.c_uint(1)
            ok(cu.cuDevSmResourceSplitByCount(part, ctypes.byref(groups), whole, rest, 0, first),
               "cuDevSmResourceSplitByCount")
        self.sms = [int.from_bytes(b.raw[SM_COUNT_AT:SM_COUNT_AT + 4], "little") for b in (part, rest)]
        self.streams = []
        for res, priority in ((part, -5), (rest, 0)):
            desc, ctx, stream = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
            ok(cu.cuDevResourceGenerateDesc(ctypes.byref(desc), res, 1), "cuDevResourceGenerateDesc")
            ok(cu.cuGreenCtxCreate(ctypes.byref(ctx), desc, dev, 1), "cuGreenCtxCreate")  # 1: DEFAULT_STREAM flag
            ok(cu.cuGreenCtxStreamCreate(ctypes.byref(stream), ctx, 1, priority), "cuGreenCtxStreamCreate")
            self.streams.append(torch.cuda.ExternalStream(stream.value))


@triton.jit
def _smid(OUT, SPIN: tl.constexpr):
    at = tl.program_id(0) + tl.arange(0, 1)
    sm = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [at], dtype=tl.int32, is_pure=False, pack=1)
    acc = at
    for _ in range(SPIN):      # long enough that programs spread over every SM they may use
        acc = acc * 1103515245 + 12345
    tl.store(OUT + at, tl.where(acc == 7, -2, sm))


def sms_used(stream, how: str) -> int:
    out = torch.full((20000,), -1, dtype=torch.int32, device="cuda")

    def launch():
        _smid[(out.numel(),)](out, SPIN=2000)

    if how == "direct":
        with torch.cuda.stream(stream):
            launch()
    else:
        launch()                                            # compiled outside any capture
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        capture = torch.cuda.Stream() if how == "graph from a side stream" else stream
        with torch.cuda.graph(g, stream=capture):
            launch()
        out.fill_(-1)
        torch.cuda.synchronize()
        with torch.cuda.stream(stream):
            g.replay()
    torch.cuda.synchronize()
    return len(set(out.tolist()) - {-1})


def copy_gbs(stream, seconds: float = 0.6) -> float:
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    with torch.cuda.stream(stream):
        dst.copy_(src)
        stream.synchronize()
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            for _ in range(4):
                dst.copy_(src)
            stream.synchronize()
            n += 4
        took = time.perf_counter() - start
    return 2 * src.numel() * n / took / 1e9


@contextlib.contextmanager
def captured_on(stream):
    """CUDA graphs made inside run on the SMs of `stream`'s green context: only a graph captured on a green stream
    stays in its part when replayed (the first run of this probe: one captured on an ordinary side stream and
    replayed on a green stream used all 132 SMs). The engines capture on streams of their own, so both ways they
    get one are pointed at `stream` meanwhile."""
    default, make = torch.cuda.graph.default_capture_stream, torch.cuda.Stream
    torch.cuda.graph.default_capture_stream = stream
    torch.cuda.Stream = lambda *a, **k: stream
    try:
        yield
    finally:
        torch.cuda.graph.default_capture_stream, torch.cuda.Stream = default, make


class AcousticLoop:
    def __init__(self, v, x):
        self.v, self.x = v, x

    def ms_alone(self, stream, n: int = 8) -> float:
        times = []
        with torch.cuda.stream(stream), torch.inference_mode():
            for _ in range(n):
                start = time.perf_counter()
                self.v(self.x, 0.5)
                stream.synchronize()
                times.append(time.perf_counter() - start)
        return float(np.median(times)) * 1e3

    def beside(self, stream, fn):
        stop, times = threading.Event(), []

        def loop():
            with torch.cuda.stream(stream), torch.inference_mode():
                while not stop.is_set():
                    start = time.perf_counter()
                    self.v(self.x, 0.5)
                    stream.synchronize()
                    times.append(time.perf_counter() - start)

        worker = threading.Thread(target=loop)
        worker.start()
        time.sleep(0.4)
        try:
            result = fn()
        finally:
            stop.set()
            worker.join()
        return result, float(np.median(times)) * 1e3


def ar_ms(engine, cfg, stream, kind: str, rows: int, ctx: int, tag: str) -> float:
    with torch.cuda.stream(stream), torch.inference_mode():
        for i in range(rows):
            engine.admit(bench_request(cfg, f"{tag}-{kind}-{i}", ctx, kind, (BLOCKS + 1) * engine.block, seed=i))
        engine.step()
        stream.synchronize()
        start = time.perf_counter()
        for _ in range(BLOCKS):
            engine.step()
        stream.synchronize()
        assert not engine.live
        return (time.perf_counter() - start) / (BLOCKS * engine.block) * 1e3


class Setup:
    """The model, and the acoustic stage's reference chunk as `farm bench acoustic` and the s31 co-run probe build it
    (10,372 AR tokens of prefix + codes, 5,371 frames)."""

    def __init__(self, scenarios):
        ckpt = open_checkpoint("out/ck/model", "out/ck/vae")
        self.cfg = cfg = ckpt.cfg
        self.net = load_model(ckpt.model_dir, cfg, {AR, HEAD, NAR}, device="cuda")
        self.engine = AcousticEngine(self.net, cfg.tokens)
        rng = np.random.default_rng(0)
        prefix = [int(t) for t in rng.integers(0, cfg.tokens.codec_offset, 5000)]
        self.ids = chunk_tokens(prefix, rng.integers(0, cfg.tokens.codebook, 5371).astype(np.int32), 0, 5371,
                                cfg.tokens)
        with torch.inference_mode():
            _, kv = ar_prefill(self.net, torch.tensor(self.ids, device="cuda"))
            self.buffers = nar_kv_buffers(kv, len(self.ids), 5371 + 2)
            del kv
            self.x = song_noise(5371, cfg.model.latent_dim, 0).to(device="cuda", dtype=self.engine.dtype)
        self.landed = layer_chain.TILING
        self.kv_tokens = sum(rows * (ctx + (BLOCKS + 2) * 16 + 64) for _, rows, ctx in scenarios)

    def acoustic(self, stream, confine: bool) -> AcousticLoop:
        """An evaluator replaying on `stream`, its graph captured there (`confine`) or on a side stream of its own."""
        with torch.cuda.stream(stream), torch.inference_mode(), \
                captured_on(stream) if confine else contextlib.nullcontext():
            v = self.engine.evaluator(len(self.ids), len(self.ids), self.buffers)
            v(self.x, 0.5)
            v(self.x, 0.5)                      # captured here
        torch.cuda.synchronize()
        return AcousticLoop(v, self.x)

    def ar_engine(self, stream, programs: int | None, confine: bool) -> AREngine:
        """The engine with the chain on `programs` (None: one per SM); the tiling stays set until `restore`, as an
        eager launch reads it too."""
        layer_chain.TILING = replace(self.landed, programs=programs)
        with torch.cuda.stream(stream), captured_on(stream) if confine else contextlib.nullcontext():
            engine = AREngine(self.net, self.cfg.tokens, kv_tokens=self.kv_tokens, cuda_graphs=True, compile=True)
        torch.cuda.synchronize()
        return engine

    def restore(self) -> None:
        layer_chain.TILING = self.landed


def unconfined(ways) -> None:
    """Each way (name, the chain's programs, (AR stream, acoustic stream)): the engines' graphs captured as they
    capture them, on side streams, and replayed on the given streams. The cards' worth is counted against the first
    way's AR alone and the acoustic stage alone on a plain stream."""
    scenarios = SCENARIOS + (("semantic", 2, 7680),)
    setup = Setup(scenarios)
    plain = torch.cuda.Stream(priority=0)
    ac = setup.acoustic(plain, confine=False)
    ac_full = ac.ms_alone(plain)
    log(f"acoustic alone: {ac_full:.2f} ms per evaluation")
    full = {}
    for name, programs, (ar_stream, ac_stream) in ways:
        try:
            engine = setup.ar_engine(ar_stream, programs, confine=False)
            ac_alone = ac.ms_alone(ac_stream)
            for kind, rows, ctx in scenarios:
                alone = ar_ms(engine, setup.cfg, ar_stream, kind, rows, ctx, f"{name}-alone")
                full.setdefault((kind, rows), alone)
                together, ac_t = ac.beside(ac_stream, lambda: ar_ms(engine, setup.cfg, ar_stream, kind, rows, ctx,
                                                                     f"{name}-beside"))
                log(f"{name}: {kind} {rows} rows x {ctx}: AR {alone:.3f} ms/step alone, {together:.3f} beside; "
                    f"acoustic {ac_alone:.2f} ms alone, {ac_t:.2f} beside; together {full[kind, rows] / together:.2f}"
                    f" + {ac_full / ac_t:.2f} = {full[kind, rows] / together + ac_full / ac_t:.2f} cards' worth; "
                    f"chain timeouts {int(engine.chain_state[0])}")
            del engine
            torch.cuda.empty_cache()
        except Exception as e:      # one way's failure must not lose the others' lines
            log(f"{name}: failed: {type(e).__name__}: {e}")
    setup.restore()
    log("done")


def sweep(programs: list[int]) -> None:
    """The chain on fewer programs than SMs, on plain streams: its programs need only that many SMs free at once,
    and the rest stay the acoustic stage's."""
    plain_ar, plain_ac = torch.cuda.Stream(priority=-100), torch.cuda.Stream(priority=0)   # as farm/workers.py
    unconfined([(f"chain on {p} programs", None if p >= 132 else p, (plain_ar, plain_ac)) for p in programs])


def contexts() -> None:
    """The first run's way again, and with nothing split: each stage's graphs captured as the engines capture them
    (on side streams: they use every SM), replayed on a stream of a green context of its own."""
    plain_ar, plain_ac = torch.cuda.Stream(priority=-100), torch.cuda.Stream(priority=0)
    torch.zeros(1, device="cuda")
    if "--sides" in sys.argv:       # which side's green context does it: each alone, then both again
        g = Green(40).streams
        ways = [("AR plain, acoustic in the 92-SM context, chain on 40", 40, (plain_ar, g[1])),
                ("AR in the 40-SM context, acoustic plain, chain on 40", 40, (g[0], plain_ac)),
                ("split 40 / 92, chain on 40", 40, (g[0], g[1])),
                ("AR plain, acoustic in the 92-SM context, chain on every SM", None, (plain_ar, g[1]))]
    elif "--ar-contexts" in sys.argv:   # the AR side's context alone, with the chain on all or fewer programs
        ways = [("plain streams", None, (plain_ar, plain_ac)),
                ("AR in a 64-SM context, chain on 64", 64, (Green(64).streams[0], plain_ac)),
                ("AR in a 96-SM context, chain on every SM", None, (Green(96).streams[0], plain_ac)),
                ("AR in a 40-SM context, chain on every SM", None, (Green(40).streams[0], plain_ac))]
    else:
        ways = [("plain streams", None, (plain_ar, plain_ac)),
                ("two whole-card green contexts", None, tuple(Green(None).streams)),
                ("two whole-card green contexts, chain on 40", 40, tuple(Green(None).streams)),
                ("split 40 / 92, chain on 40", 40, tuple(Green(40).streams)),
                ("split 64 / 68, chain on 64", 64, tuple(Green(64).streams))]
    unconfined(ways)


def main() -> None:
    if "--contexts" in sys.argv:
        return contexts()
    if "--sweep" in sys.argv:
        return sweep([int(a) for a in sys.argv[sys.argv.index("--sweep") + 1:]])
    splits = [int(a) for a in sys.argv[1:]] or [40, 64, 88]
    log(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, "
        f"{torch.cuda.get_device_properties(0).multi_processor_count} SMs")
    plain_ar, plain_ac = torch.cuda.Stream(priority=-100), torch.cuda.Stream(priority=0)   # as farm/workers.py
    torch.zeros(1, device="cuda")

    # 1-2. where work lands
    green = {s: Green(s) for s in splits}
    for s, g in green.items():
        for i, (name, stream) in enumerate(zip(("AR part", "acoustic part"), g.streams)):
            counts = [sms_used(stream, how) for how in ("direct", "graph from a side stream", "graph on it")]
            log(f"split {s}: {name} has {g.sms[i]} SMs by its resource; programs landed on {counts[0]} SMs "
                f"launched directly, {counts[1]} from a graph captured on a side stream, {counts[2]} from a graph "
                f"captured on the green stream")
            g.sms[i] = min(g.sms[i], counts[0]) or counts[0]    # the chain's programs must all fit in the part
    log(f"plain stream: {sms_used(plain_ar, 'direct')} SMs")

    # 3-4. confined: every graph captured on the stream it replays on
    setup = Setup(SCENARIOS)
    cfg = setup.cfg
    ac = setup.acoustic(plain_ac, confine=True)
    ac_full = ac.ms_alone(plain_ac)
    bw_full = copy_gbs(plain_ar)
    log(f"whole card: acoustic {ac_full:.2f} ms per evaluation ({len(setup.ids)} AR tokens, 5371 frames), copy "
        f"{bw_full:.0f} GB/s")
    engine = setup.ar_engine(plain_ar, None, confine=True)
    full = {kind: ar_ms(engine, cfg, plain_ar, kind, rows, ctx, "full") for kind, rows, ctx in SCENARIOS}
    log("whole card, AR alone: " + ", ".join(f"{kind} {rows} rows x {ctx} {full[kind]:.3f} ms/step"
                                             for kind, rows, ctx in SCENARIOS))
    del engine, ac
    torch.cuda.empty_cache()
    for s, g in green.items():
        name = f"split {s} (AR {g.sms[0]} SMs, acoustic {g.sms[1]})"
        try:
            ac = setup.acoustic(g.streams[1], confine=True)
            ac_alone = ac.ms_alone(g.streams[1])
            bw = copy_gbs(g.streams[0])
            bw_beside, ac_b = ac.beside(g.streams[1], lambda: copy_gbs(g.streams[0]))
            log(f"{name}: acoustic alone in its part {ac_alone:.2f} ms; copy in the AR part alone {bw:.0f} GB/s, "
                f"beside the acoustic stage {bw_beside:.0f} GB/s (acoustic {ac_b:.2f} ms)")
            engine = setup.ar_engine(g.streams[0], g.sms[0], confine=True)
            for kind, rows, ctx in SCENARIOS:
                alone = ar_ms(engine, cfg, g.streams[0], kind, rows, ctx, f"{name}-alone")
                together, ac_t = ac.beside(g.streams[1], lambda: ar_ms(engine, cfg, g.streams[0], kind, rows, ctx,
                                                                        f"{name}-beside"))
                log(f"{name}: {kind} {rows} rows x {ctx}: AR {alone:.3f} ms/step alone in its part, {together:.3f} "
                    f"beside; acoustic {ac_t:.2f} ms beside; together {full[kind] / together:.2f} + "
                    f"{ac_full / ac_t:.2f} = {full[kind] / together + ac_full / ac_t:.2f} cards' worth (against "
                    f"each alone on the whole card); chain timeouts {int(engine.chain_state[0])}")
            del engine, ac
            torch.cuda.empty_cache()
        except Exception as e:      # one split's failure must not lose the others' lines
            log(f"{name}: failed: {type(e).__name__}: {e}")
    setup.restore()
    torch.cuda.synchronize()
    log("done")


if __name__ == "__main__":
    main()
