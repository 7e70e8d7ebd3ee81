"""Does a song's acoustic stage depend on what Inductor's timings chose? (2026-12-08, session s62; written on the CPU
box.) Inductor times a reduction's candidate configurations (block sizes, warps) on the card at first launch and may
pad a product after timing it; on two H100s the same tree gave latents 0.009926 and 0.009992 mean abs from FP32
(`…-s61-` and `…-s62-bench-acoustic.json`), while one machine gave the same bits twice. This sets the farm's
deterministic option (`stages.compiled`, from …-s62-inductor-deterministic.patch) kept ("on") or cleared ("off"),
then runs the s60 fold probe in this process: the acoustic engine built, the reference chunk solved four times, the
times printed and the latents saved as $OUT/s60-latents-TAG.npy. Run it with Inductor's caches off (every choice
timed afresh), TORCHINDUCTOR_DISTORT_BENCHMARKING_RESULT unset and set to "inverse" (Inductor then keeps the slowest
candidate), in both modes: if the two "off" runs differ and the two "on" runs agree, the option is what keeps a song
the same from card to card, and the "on" runs' times against the "off" ones are what it costs.
Usage: TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 python3 …-s62-inductor-determinism-probe.py on|off TAG
(from the repository root; out/ck a yue2-3b checkpoint)."""
import os
import runpy
import sys

from stages import compiled

FOLD_PROBE = os.path.join(os.path.dirname(__file__), "2026-12-07-cpu-s60-fold-probe.py")

mode, tag = sys.argv[1], sys.argv[2]
if mode == "off":
    compiled.INDUCTOR_OPTIONS.clear()
print(tag, mode, "options", compiled.INDUCTOR_OPTIONS, "distort",
      repr(os.environ.get("TORCHINDUCTOR_DISTORT_BENCHMARKING_RESULT", "")))
sys.argv = [FOLD_PROBE, tag]
runpy.run_path(FOLD_PROBE, run_name="__main__")
