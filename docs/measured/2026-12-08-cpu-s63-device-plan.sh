#!/usr/bin/env bash
# Device runs prepared in session s63, which got no machine (three requests: two found none, the third was told no
# machine is lent at present): Inductor's deterministic mode on the card, then, where an H200 comes, the headline keys
# with the layer cut (the s61 plan). First, on the CPU box, `git apply
# docs/measured/2026-12-08-cpu-s62-inductor-deterministic.patch` (Inductor's deterministic mode for every compile, in
# stages/compiled.py, and the two GPU tests). One step per call, back to back on one warm machine:
#   call 1 (no carry: SDPA's attention, FA4 is not needed): `probes` (~6–8 minutes) — the yue2-3b
#          checkpoint, the reference chunk's acoustic stage with the option off and on, each with Inductor's timings
#          as measured and inverted (…-s62-inductor-determinism-probe.py: its docstring says what to read), the four
#          latents compared
#   call 2 (no carry): `tests` — the two GPU tests that make the same comparison, on the yue2-3b checkpoint
#   Land the patch if "off" differs under inverted timings, "on" does not, and the time is level; then `farm bench
#   song` and `farm bench acoustic` with it (the s60 plan's `song`).
#   On an H200: the s60 plan's `start` (carry [".fa4a"], .carry/whl inside), the s61 plan's `record` (carry
#   [".fa4b"]), then the s60 plan's `album` (carry [".carry"]).
#   On two cards of one host (nvidia-h200-x2, when lent): the s56 plan's `album-2gpu` (album12_2gpu_s, 2026-11-30).
set -u
step=${1:?step: probes or tests}
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1    # SDPA's attention: the question is Inductor's, not the kernel's
case "$step" in
probes)
    nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/s63-det-machine.txt"
    python3 -c "import torch; from torch._inductor import config as c; print(torch.__version__, 'deterministic',
    hasattr(c, 'deterministic'))" >> "$OUT/s63-det-machine.txt" 2>&1
    python3 -m farm init-checkpoint out/ck --config yue2-3b --device cuda > "$OUT/s63-det-init.log" 2>&1
    probe=docs/measured/2026-12-08-cpu-s62-inductor-determinism-probe.py
    for mode in off on; do
        for distort in "" inverse; do
            tag=$mode-${distort:-plain}
            TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 TORCHINDUCTOR_DISTORT_BENCHMARKING_RESULT=$distort \
                timeout 130 python3 $probe $mode $tag > "$OUT/s63-det-$tag.log" 2>&1
            grep -h "options\|build\|solve_chunk\|Error" "$OUT/s63-det-$tag.log"
        done
    done
    python3 - <<'PY' | tee "$OUT/s63-det-compare.txt"
import os
import numpy as np
o = os.environ["OUT"]
got = {t: np.load(f"{o}/s60-latents-{t}.npy") for t in ("off-plain", "off-inverse", "on-plain", "on-inverse")
       if os.path.exists(f"{o}/s60-latents-{t}.npy")}
for a, b in (("off-plain", "off-inverse"), ("on-plain", "on-inverse"), ("off-plain", "on-plain")):
    if a in got and b in got:
        print(a, b, "values that differ", int((got[a] != got[b]).sum()), "max", float(abs(got[a] - got[b]).max()))
PY
    ;;
tests)
    FARM_GPU_CKPT=out/ck timeout 540 python3 -m pytest -q -m gpu tests/test_gpu_acoustic.py tests/test_gpu.py \
        -p no:cacheprovider -k inductor > "$OUT/s63-det-test.log" 2>&1
    echo "rc $?" >> "$OUT/s63-det-test.log"
    tail -n 3 "$OUT/s63-det-test.log"
    ;;
esac
