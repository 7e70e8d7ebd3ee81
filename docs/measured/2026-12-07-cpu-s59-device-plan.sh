#!/usr/bin/env bash
# Device runs of session s59: where the acoustic stage's time goes beyond its kernels. One step per call on one warm
# machine; logs go to $OUT. The s58 steps (start, song, album) are reused as they are.
#   step start  (carry [".fa4a"] with .carry/whl inside) the s58 start: small wheels, FA4's first half
#   step time   (carry [".fa4b"]) FA4 joined, the yue2-3b checkpoint into out/ck, the s59 time probe
#               (…-cpu-s59-acoustic-time-probe.py), the last-wave and acoustic GPU tests, `farm bench acoustic`
#   step first  (carry [".fa4b"]) …-cpu-s59-first-call-probe.py (what a new chunk length's first evaluation pays;
#               the τ copy pinned against blocking), `farm bench acoustic` and `farm bench song` on this tree
#   step verify (carry [".fa4b"], after start; for the next session) the GPU tests the session's last changes did
#               not see (the warm-up test among them), then `farm bench song` with Dynamo's recompiles logged: none
#               may fall inside the timed run; its song and acoustic give the H200 keys, then the album step
#   step song / album: as in the s58 plan (the H200 keys of the s58 tree, if an H200 came)
set -u
step=${1:?step: start, time, song or album}
s=s59
plan=docs/measured/2026-12-07-cpu-s58-device-plan.sh
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR=/tmp/$s-caches/triton TORCHINDUCTOR_CACHE_DIR=/tmp/$s-caches/inductor
fa4_and_checkpoint() {    # FA4's two halves joined onto the path, the yue2-3b checkpoint into out/ck
    test -d out/fa4site || cat out/part_a .fa4b/part_b | tar -xJ -C out
    mkdir -p out/fa4boot
    echo "import site; site.addsitedir('$PWD/out/fa4site')" > out/fa4boot/sitecustomize.py
    export PYTHONPATH="$PWD/out/fa4boot:$PYTHONPATH"
    (test -d out/ck/model || python3 -m farm init-checkpoint out/ck --config yue2-3b --device cuda) \
        > "$OUT/$s-init.log" 2>&1
}
case "$step" in
start|song|album)
    bash "$plan" "$step"
    ;;
time)
    fa4_and_checkpoint
    echo "rc $?" >> "$OUT/$s-init.log"
    timeout 300 python3 docs/measured/2026-12-07-cpu-s59-acoustic-time-probe.py > "$OUT/$s-acoustic-time.log" 2>&1
    echo "rc $?" >> "$OUT/$s-acoustic-time.log"
    timeout 100 python3 -m pytest -q -m gpu tests/test_gpu.py -k "last_wave or flash_attention_4 or acoustic" \
        -p no:cacheprovider > "$OUT/$s-gpu-tests.log" 2>&1
    echo "rc $?" >> "$OUT/$s-gpu-tests.log"
    timeout 200 python3 -m farm bench acoustic --model out/ck --device cuda --json "$OUT/$s-bench-acoustic.json" \
        --summary "$OUT/$s-summary-acoustic.json" > "$OUT/$s-bench-acoustic.log" 2>&1
    echo "rc $?" >> "$OUT/$s-bench-acoustic.log"
    ;;
first)
    fa4_and_checkpoint
    MERGE=compiled TORCH_LOGS=recompiles timeout 120 python3 docs/measured/2026-12-07-cpu-s59-first-call-probe.py \
        > "$OUT/$s-first-call-compiled.log" 2>&1
    echo "rc $?" >> "$OUT/$s-first-call-compiled.log"
    timeout 150 python3 -m farm bench acoustic --model out/ck --device cuda --json "$OUT/$s-bench-acoustic2.json" \
        --summary "$OUT/$s-summary-acoustic2.json" > "$OUT/$s-bench-acoustic2.log" 2>&1
    echo "rc $?" >> "$OUT/$s-bench-acoustic2.log"
    timeout 200 python3 -m farm bench song --model out/ck --device cuda --json "$OUT/$s-bench-song.json" \
        --summary "$OUT/$s-summary-song.json" > "$OUT/$s-bench-song.log" 2>&1
    echo "rc $?" >> "$OUT/$s-bench-song.log"
    ;;
verify)
    fa4_and_checkpoint
    timeout 120 python3 -m pytest -q -m gpu tests/test_gpu_acoustic.py -p no:cacheprovider \
        > "$OUT/$s-gpu-tests-verify.log" 2>&1
    echo "rc $?" >> "$OUT/$s-gpu-tests-verify.log"
    TORCH_LOGS=recompiles timeout 220 python3 -m farm bench song --model out/ck --device cuda \
        --json "$OUT/$s-bench-song-verify.json" --summary "$OUT/$s-summary-song-verify.json" \
        > "$OUT/$s-bench-song-verify.log" 2>&1
    echo "rc $?" >> "$OUT/$s-bench-song-verify.log"
    ;;
esac
