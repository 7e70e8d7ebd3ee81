#!/usr/bin/env bash
# Device runs prepared in session s57 (no engine change since s53; the planner's changes need no GPU). One step per
# call on one warm H200; logs go to $OUT. The steps of the s56 plan, plus one for a session with only a few minutes:
#   step ar-short (carry [".carry"], the prefix of ../shared/tools/device-carry.sh, init-checkpoint into out/ck)
#                 `farm bench ar` at 1 and 24 rows, FP8 first (its keys date from 2026-12-03), then BF16 on the same
#                 machine for the ratio (~5 min with the checkpoint's creation)
#   step quant | kv-album | fa4a | album12 | album-2gpu   as in docs/measured/2026-12-07-cpu-s56-device-plan.sh
set -u
step=${1:?step: ar-short, quant, kv-album, fa4a, album12 or album-2gpu}
case "$step" in
ar-short)
    export TRITON_CACHE_DIR=/tmp/s57-caches/triton TORCHINDUCTOR_CACHE_DIR=/tmp/s57-caches/inductor
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/s57-machine.txt" 2>&1
    python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$OUT/s57-machine.txt" 2>&1
    for fmt in fp8 bf16; do
        timeout 150 python3 -m farm bench ar --model out/ck --device cuda --rows 1 --rows 24 --numerics-tokens 256 \
            --format $fmt --json "$OUT/s57-bench-ar-$fmt.json" --summary "$OUT/s57-summary-ar-$fmt.json" \
            > "$OUT/s57-bench-ar-$fmt.log" 2>&1
        echo "rc $?" >> "$OUT/s57-bench-ar-$fmt.log"
    done
    ;;
*)
    bash docs/measured/2026-12-07-cpu-s56-device-plan.sh "$step"
    ;;
esac
