#!/usr/bin/env bash
# Device runs prepared on the CPU box in session s54, one step per call on one warm machine; logs go to $OUT.
#   step probe    (carry [".carry"], the prefix of ../shared/tools/device-carry.sh, init-checkpoint into out/ck)
#                 the machine, then the FP8-acoustic probe (…-cpu-s54-acoustic-fp8-probe.py, SDPA) (~4 min);
#                 on an H100 also `farm bench ar` with the layer chain off beside on, for its calibration's
#                 chain saving (borrowed from the H200 until now) (~2 min)
#   step batch    (carry [".carry"], as probe on a fresh machine) the machine, then the batched-acoustic probe
#                 (…-cpu-s54-acoustic-batch-probe.py, SDPA): several songs' chunks in one evaluation (~3 min)
#   step decode   (carry [".carry"], as probe on a fresh machine) the machine, then the decode-batch probe
#                 (…-cpu-s54-decode-batch-probe.py): 1, 2 and 4 tiles in one batch (~2 min)
#   step autotune (carry [".carry"], as probe on a fresh machine) the machine, then the acoustic layer compiled
#                 with max-autotune beside the default compile (…-cpu-s54-acoustic-autotune-probe.py) (~5–8 min)
#   step kv-album (carry [".fa4a"]) FA4's first half into out/, then the s53 plan's kv-album: the 12-track album
#                 with BF16 and FP8 KV in one call (SDPA) — on an H200 only (the H100's ran in s53; on an H100
#                 the step only brings FA4's half) (~8 min)
#   step album12  (carry [".fa4b"]) the s53 plan's album12 (FA4 joined: the album with its start keys, the song)
#                 (~6 min). The FP8 probe is not rerun with FA4: its error, not its speed, rules FP8 out.
# The s53 plan names its logs s53-*; they come back renamed s54-*.
set -u
step=${1:?step: probe, batch, decode, autotune, kv-album or album12}
m=docs/measured
probe=$m/2026-12-06-cpu-s54-acoustic-fp8-probe.py
export TRITON_CACHE_DIR=/tmp/s53-caches/triton TORCHINDUCTOR_CACHE_DIR=/tmp/s53-caches/inductor

renamed() {
    for f in "$OUT"/s53-*; do
        [ -e "$f" ] && mv "$f" "$OUT/s54-${f##*/s53-}"
    done
}

case "$step" in
probe)
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/s54-machine.txt" 2>&1
    cp "$OUT/s54-machine.txt" out/
    timeout 300 python3 "$probe" out/ck > "$OUT/s54-acoustic-fp8-sdpa.log" 2>&1
    echo "rc $?" >> "$OUT/s54-acoustic-fp8-sdpa.log"
    if grep -q H100 "$OUT/s54-machine.txt"; then
        for chain in on off; do
            timeout 120 python3 -m farm bench ar --model out/ck --device cuda --rows 1 --rows 24 \
                --numerics-tokens 64 --chain $chain --json "$OUT/s54-bench-ar-chain-$chain.json" \
                > "$OUT/s54-bench-ar-chain-$chain.log" 2>&1
            echo "rc $?" >> "$OUT/s54-bench-ar-chain-$chain.log"
        done
    fi
    ;;
batch)
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/s54-machine-batch.txt" 2>&1
    cp "$OUT/s54-machine-batch.txt" out/s54-machine.txt
    timeout 300 python3 $m/2026-12-06-cpu-s54-acoustic-batch-probe.py out/ck > "$OUT/s54-acoustic-batch-sdpa.log" 2>&1
    echo "rc $?" >> "$OUT/s54-acoustic-batch-sdpa.log"
    ;;
decode)
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/s54-machine-decode.txt" 2>&1
    cp "$OUT/s54-machine-decode.txt" out/s54-machine.txt
    timeout 240 python3 $m/2026-12-06-cpu-s54-decode-batch-probe.py out/ck > "$OUT/s54-decode-batch.log" 2>&1
    echo "rc $?" >> "$OUT/s54-decode-batch.log"
    ;;
autotune)
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/s54-machine-autotune.txt" 2>&1
    cp "$OUT/s54-machine-autotune.txt" out/s54-machine.txt
    timeout 500 python3 $m/2026-12-06-cpu-s54-acoustic-autotune-probe.py out/ck > "$OUT/s54-acoustic-autotune.log" 2>&1
    echo "rc $?" >> "$OUT/s54-acoustic-autotune.log"
    ;;
kv-album)
    cp .fa4a/part_a out/
    grep -q H100 out/s54-machine.txt || bash $m/2026-12-06-cpu-s53-device-plan.sh kv-album
    renamed
    ;;
album12)
    bash $m/2026-12-06-cpu-s53-device-plan.sh album12
    renamed
    ;;
esac
