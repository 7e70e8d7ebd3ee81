#!/usr/bin/env bash
# Device runs of session s62, as they ran: `nvidia-h200` was asked for seven times and an H100 80GB HBM3 came on the
# seventh (raw logs docs/measured/2026-12-08-h100-s62-*). One step per call, back to back on one warm machine:
#   call 1 (carry [".fa4a"], .carry/whl inside): the s60 plan's `start`
#   call 2 (carry [".fa4b"]): `tests` — FA4 joined, the yue2-3b checkpoint, the acoustic GPU tests (the sync test
#          rewritten onto AcousticEngine.chunk_velocity after s61's device time), `farm bench song --format fp8`,
#          then `farm bench song` in BF16, one after the other (song_s_quantized dates from 2026-12-02)
#   call 3 (no carry): `acoustic` — `farm bench acoustic` (the song's acoustic stage was 0.4 s slower than s61's H100)
#   call 4 (no carry; the tree at 26ec8dd, the layer cut before τ on the card and chunk_velocity, untracked in _cut/:
#          `git archive 26ec8dd stages | tar -x -C _cut`): `ab` — the reference chunk through both trees, twice
# For the next H200: the s61 plan's steps (docs/measured/2026-12-07-cpu-s61-device-plan.sh).
# Prepared, not run (three more start requests failed and the budget was spent): a `det` step, Inductor's
# deterministic mode on the card; it moved to the s63 plan (…-cpu-s63-device-plan.sh), which no machine ran either.
set -u
step=${1:?step: tests, acoustic or ab}
export PYTHONPATH=$PWD/out/fa4boot:/tmp/site:$PWD PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR=/tmp/c/t TORCHINDUCTOR_CACHE_DIR=/tmp/c/i
case "$step" in
tests)
    test -d out/fa4site || cat out/part_a .fa4b/part_b | tar -xJ -C out
    mkdir -p out/fa4boot
    echo "import site; site.addsitedir('$PWD/out/fa4site')" > out/fa4boot/sitecustomize.py
    python3 -m farm init-checkpoint out/ck --config yue2-3b --device cuda > "$OUT/s62-init.log" 2>&1
    timeout 150 python3 -m pytest -q -m gpu tests/test_gpu_acoustic.py -p no:cacheprovider \
        > "$OUT/s62-gpu-acoustic.log" 2>&1
    echo "rc $?" >> "$OUT/s62-gpu-acoustic.log"
    for fmt in fp8 bf16; do
        tag=song$([ $fmt = fp8 ] && echo -fp8)
        timeout 200 python3 -m farm bench song --model out/ck --device cuda --format $fmt \
            --json "$OUT/s62-bench-$tag.json" --summary "$OUT/s62-summary-${tag#song-}.json" \
            > "$OUT/s62-bench-$tag.log" 2>&1
        echo "rc $?" >> "$OUT/s62-bench-$tag.log"
    done
    tail -n 3 "$OUT/s62-gpu-acoustic.log"; grep -h "│\|rc " "$OUT"/s62-bench-song*.log
    ;;
acoustic)
    timeout 200 python3 -m farm bench acoustic --model out/ck --device cuda --json "$OUT/s62-bench-acoustic.json" \
        > "$OUT/s62-bench-acoustic.log" 2>&1
    echo "rc $?" >> "$OUT/s62-bench-acoustic.log"
    ;;
ab)
    probe=docs/measured/2026-12-07-cpu-s60-fold-probe.py
    for round in 1 2; do
        PYTHONPATH=$PWD/_cut:$PYTHONPATH timeout 100 python3 $probe cut > "$OUT/s62-ab-cut-$round.log" 2>&1
        timeout 100 python3 $probe head > "$OUT/s62-ab-head-$round.log" 2>&1
    done
    grep -h "stages from\|solve_chunk\|peak\|Error" "$OUT"/s62-ab-*.log
    ;;
esac
