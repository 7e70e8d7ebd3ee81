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
# The s53 plan names its logs s53-*; they come back renamed s56-*.
set -u
step=${1:?step: quant, kv-album, fa4a or album12}
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
fa4a)
    cp .fa4a/part_a out/
    ls -l out/part_a > "$OUT/s56-fa4a.txt"
    ;;
kv-album | album12)
    bash $m/2026-12-06-cpu-s53-device-plan.sh "$step"
    renamed
    ;;
esac
