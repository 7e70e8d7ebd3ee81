#!/usr/bin/env bash
# Device runs prepared on the CPU box in session s53, one step per call on one warm H200; logs go to $OUT.
# Nothing in the tree changed since the s48 headline but the start (s49–s52), so these steps refresh what is stale
# on today's tree: the AR figures (2026-12-04), the quantised AR's one-row and song figures (2026-12-01/03, before
# the layer chain and the candidate kernels), the headline album with the start keys (never on an H200), the song.
#   step suite   (carry [".carry"], the prefix of ../shared/tools/device-carry.sh, init-checkpoint into out/ck) the
#                whole GPU suite, then `farm bench ar` at 1 and 24 rows in BF16 and in FP8 (~8 min)
#   step fp8     (carry [".fa4a"], PYTHONPATH=/tmp/site:$PWD as before) FA4's first half into out/, then the
#                reference track with FP8 AR weights, `farm bench song --format fp8`, and `farm bench ar` with
#                NVFP4 weights and with an FP8 KV cache (their keys date from 2026-12-01/02) (~7 min)
#   step album12 (carry [".fa4b"]) FA4 joined (the s45 plan's fa4()), the 12-track album with the start keys
#                (`--no-sequential`; s48: 85.63 s), then the reference track in BF16 (s48: 20.16 s) (~6 min)
#   step kv-album (carry [".carry"], a fresh machine: no FA4, so SDPA on both sides) the 12-track album with the BF16
#                KV cache, then with `--kv-cache fp8` in the same call: at 24 semantic rows `farm bench ar` now steps
#                1.47x faster with FP8 KV on an H100, while the last FP8-KV album (2026-12-01) was slower (~8 min)
# s53 ran suite, fp8 and album12 on one H100 and kv-album on another (no H200 came; docs/benchmarks.md, twenty-fourth
# session, logs …-h100-s53-*). Left for an H200: album12 (three calls: .carry, then fp8 for .fa4a, then .fa4b) and
# kv-album, which asks whether the FP8-KV album pays there too.
set -u
step=${1:?step: suite, fp8, album12 or kv-album}
m=docs/measured
export TRITON_CACHE_DIR=/tmp/s53-caches/triton TORCHINDUCTOR_CACHE_DIR=/tmp/s53-caches/inductor

case "$step" in
suite)
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/s53-machine.txt" 2>&1
    FARM_GPU_CKPT=out/ck timeout 270 python3 -m pytest -q -m gpu tests/test_gpu.py tests/test_gpu_products.py \
        tests/test_ptxas.py > "$OUT/s53-gpu-tests.log" 2>&1
    echo "rc $?" >> "$OUT/s53-gpu-tests.log"
    for fmt in bf16 fp8; do
        timeout 150 python3 -m farm bench ar --model out/ck --device cuda --rows 1 --rows 24 --numerics-tokens 256 \
            --format $fmt --json "$OUT/s53-bench-ar-$fmt.json" --summary "$OUT/s53-summary-ar-$fmt.json" \
            > "$OUT/s53-bench-ar-$fmt.log" 2>&1
        echo "rc $?" >> "$OUT/s53-bench-ar-$fmt.log"
    done
    ;;
fp8)
    cp .fa4a/part_a out/
    timeout 240 python3 -m farm bench song --model out/ck --device cuda --format fp8 \
        --json "$OUT/s53-bench-song-fp8.json" --summary "$OUT/s53-summary-song-fp8.json" \
        > "$OUT/s53-bench-song-fp8.log" 2>&1
    echo "rc $?" >> "$OUT/s53-bench-song-fp8.log"
    for variant in "nvfp4 --format nvfp4" "kvfp8 --kv-cache fp8"; do
        set -- $variant
        name=$1; shift
        timeout 150 python3 -m farm bench ar --model out/ck --device cuda --rows 1 --rows 24 --numerics-tokens 256 \
            "$@" --json "$OUT/s53-bench-ar-$name.json" --summary "$OUT/s53-summary-ar-$name.json" \
            > "$OUT/s53-bench-ar-$name.log" 2>&1
        echo "rc $?" >> "$OUT/s53-bench-ar-$name.log"
    done
    ;;
album12)
    test -d out/fa4site || cat out/part_a .fa4b/part_b | tar -xJ -C out
    mkdir -p out/fa4boot
    echo "import site; site.addsitedir('$PWD/out/fa4site')" > out/fa4boot/sitecustomize.py
    export PYTHONPATH="$PWD/out/fa4boot:$PYTHONPATH"
    python3 -c "import flash_attn.cute; print('FlashAttention-4 importable')" > "$OUT/s53-album12.log" 2>&1
    timeout 330 python3 -m farm bench album --model out/ck --tracks 12 --no-sequential \
        --gantt "$OUT/album12-1gpu-gantt.png" --json "$OUT/s53-album12.json" --summary "$OUT/s53-summary-album.json" \
        >> "$OUT/s53-album12.log" 2>&1
    echo "rc $?" >> "$OUT/s53-album12.log"
    timeout 200 python3 -m farm bench song --model out/ck --device cuda \
        --json "$OUT/s53-bench-song.json" --summary "$OUT/s53-summary-song.json" > "$OUT/s53-bench-song.log" 2>&1
    echo "rc $?" >> "$OUT/s53-bench-song.log"
    ;;
kv-album)
    for kv in bf16 fp8; do
        timeout 280 python3 -m farm bench album --model out/ck --tracks 12 --no-sequential --kv-cache $kv \
            --json "$OUT/s53-album12-kv$kv.json" --summary "$OUT/s53-summary-album-kv$kv.json" \
            > "$OUT/s53-album12-kv$kv.log" 2>&1
        echo "rc $?" >> "$OUT/s53-album12-kv$kv.log"
    done
    ;;
esac
