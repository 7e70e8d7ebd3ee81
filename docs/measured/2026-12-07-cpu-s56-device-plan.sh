#!/usr/bin/env bash
# Device runs prepared on the CPU box in session s56, one step per call on one warm H200; logs go to $OUT.
# No product code changed since s48's headline but the start (s49–s52) and the bad-input checks (s55). What is stale
# on an H200, in the order this session runs it:
#   step quant    (carry [".carry"], the prefix of ../shared/tools/device-carry.sh, init-checkpoint into out/ck) the
#                 card's name, `farm bench ar` at 1 and 24 rows in BF16 and FP8 in one process each, then the
#                 reference track with FP8 AR weights: the FP8 keys date from 2026-12-01/03, before the candidate
#                 kernels and most of the layer chain's work (s53 reran them on an H100 only) (~7 min)
#   step kv-album (any carry) the s53 plan's kv-album: the 12-track album with the BF16 and the FP8 KV cache, SDPA on
#                 both sides (~8 min); the FP8-KV album's keys date from 2026-12-01
#   step fa4a / album12 (carries [".fa4a"] then [".fa4b"]) the s53 plan's album12: the headline album with FA4 and
#                 its start keys, then the reference track (~6 min)
#   step album-2gpu (carry [".carry"], the prefix and init-checkpoint; only where nvidia-h200-x2 is lent) the card
#                 pair's names, the plan the planner now makes for 12 reference tracks (since s56 it simulates the
#                 near-best placements: all four stages on both cards, 50.6 s forecast, against 62.6 s for the
#                 estimate's old choice), then `farm bench album --tracks 12 --no-sequential` over both cards with
#                 its Gantt chart (~5 min; `album12_2gpu_s` is still the 2026-11-30 figure, 75.8 s)
# The s53 plan names its logs s53-*; they come back renamed s56-*.
set -u
step=${1:?step: quant, kv-album, fa4a, album12 or album-2gpu}
m=docs/measured
export TRITON_CACHE_DIR=/tmp/s56-caches/triton TORCHINDUCTOR_CACHE_DIR=/tmp/s56-caches/inductor

renamed() {
    for f in "$OUT"/s53-*; do
        [ -e "$f" ] && mv "$f" "$OUT/s56-${f##*/s53-}"
    done
    [ -e "$OUT/album12-1gpu-gantt.png" ] && mv "$OUT/album12-1gpu-gantt.png" "$OUT/s56-album12-1gpu-gantt.png"
    return 0
}

case "$step" in
quant)
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/s56-machine.txt" 2>&1
    python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$OUT/s56-machine.txt" 2>&1
    for fmt in bf16 fp8; do
        timeout 150 python3 -m farm bench ar --model out/ck --device cuda --rows 1 --rows 24 --numerics-tokens 256 \
            --format $fmt --json "$OUT/s56-bench-ar-$fmt.json" --summary "$OUT/s56-summary-ar-$fmt.json" \
            > "$OUT/s56-bench-ar-$fmt.log" 2>&1
        echo "rc $?" >> "$OUT/s56-bench-ar-$fmt.log"
    done
    timeout 200 python3 -m farm bench song --model out/ck --device cuda --format fp8 \
        --json "$OUT/s56-bench-song-fp8.json" --summary "$OUT/s56-summary-song-fp8.json" \
        > "$OUT/s56-bench-song-fp8.log" 2>&1
    echo "rc $?" >> "$OUT/s56-bench-song-fp8.log"
    ;;
album-2gpu)
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/s56-machine-2gpu.txt" 2>&1
    python3 -m farm plan --tracks 12 > "$OUT/s56-plan-2gpu.txt" 2>&1
    timeout 420 python3 -m farm bench album --model out/ck --tracks 12 --no-sequential \
        --gantt "$OUT/s56-album12-2gpu-gantt.png" --json "$OUT/s56-album12-2gpu.json" \
        --summary "$OUT/s56-summary-album-2gpu.json" > "$OUT/s56-album12-2gpu.log" 2>&1
    echo "rc $?" >> "$OUT/s56-album12-2gpu.log"
    ;;
fa4a)
    cp .fa4a/part_a out/
    ls -l out/part_a > "$OUT/s56-fa4a.txt"
    ;;
kv-album | album12)
    bash $m/2026-12-06-cpu-s53-device-plan.sh "$step"
    renamed
    ;;
esac
