#!/usr/bin/env bash
# Device runs prepared on the CPU box in session s55, one step per call on one warm machine; logs go to $OUT.
# What s54 left for an H200 (no product code changed since the s48 headline but the start, s49–s52):
#   step start    (carry [".carry"], the prefix of ../shared/tools/device-carry.sh, init-checkpoint into out/ck)
#                 the card's name into $OUT and out/ (on an H100 the session gives the machine back) (~1 min)
#   step fa4a     (carry [".fa4a"]) FA4's first half into out/ only (seconds)
#   step album12  (carry [".fa4b"]) the s53 plan's album12: FA4 joined, the headline album with its start keys,
#                 then the reference track (~6 min)
#   step kv-album (any carry, once FA4's first half is in out/) the s53 plan's kv-album: the 12-track album with
#                 the BF16 and the FP8 KV cache in one call (SDPA on both sides) (~5–8 min)
# With the device minutes short (s55 lost ~12 to refused starts), album12 goes first: fa4a, album12, kv-album.
#   step kv-first (carry [".carry"], the prefix and init-checkpoint) when only one call's minutes are left: the card's
#                 name, then kv-album in the same call with shorter timeouts (no FA4 needed: SDPA on both sides;
#                 the BF16 album also gives the start keys on an H200) (~6 min)
# The s53 plan names its logs s53-*; they come back renamed s55-*.
set -u
step=${1:?step: start, fa4a, album12, kv-album or kv-first}
m=docs/measured

renamed() {
    for f in "$OUT"/s53-*; do
        [ -e "$f" ] && mv "$f" "$OUT/s55-${f##*/s53-}"
    done
}

case "$step" in
start)
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/s55-machine.txt" 2>&1
    cp "$OUT/s55-machine.txt" out/
    python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$OUT/s55-machine.txt" 2>&1
    ;;
fa4a)
    cp .fa4a/part_a out/
    ls -l out/part_a > "$OUT/s55-fa4a.txt"
    ;;
kv-first)
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/s55-machine.txt" 2>&1
    for kv in bf16 fp8; do
        timeout 250 python3 -m farm bench album --model out/ck --tracks 12 --no-sequential --kv-cache $kv \
            --json "$OUT/s55-album12-kv$kv.json" --summary "$OUT/s55-summary-album-kv$kv.json" \
            > "$OUT/s55-album12-kv$kv.log" 2>&1
        echo "rc $?" >> "$OUT/s55-album12-kv$kv.log"
    done
    ;;
kv-album)
    bash $m/2026-12-06-cpu-s53-device-plan.sh kv-album
    renamed
    ;;
album12)
    bash $m/2026-12-06-cpu-s53-device-plan.sh album12
    renamed
    ;;
esac
