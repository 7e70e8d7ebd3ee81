#!/usr/bin/env bash
# The next device time's runs, prepared on the CPU box in session s45 (no device was lent in s44's last hours or
# in s45). One step per device call, each well inside the 600 s a call may run; logs go to $OUT.
#   step probes   the s45 FP8 stream and product probes and the s44 split-product probe (~4 min with the start)
#   step v2       the s45 chain with the weights as the MMA's M (BF16 and FP8) against today's chain
#   step NAME     NAME = share-counts or block-counts: the s44 patch applied to a copy of the tree, its probe
#                 (under a timeout: a hung kernel costs 3 minutes, not the call), the GPU suite, `farm bench ar`
# Before the first call, on the CPU box (the device gets the tree without .git):
#   git show 4151e10:stages/_layer_chain_gluon.py > stages/_chain_before.py   (untracked: it travels; delete it
#   before committing). It is the committed chain before s44's patches, which the share-counts probe compares to.
# Each call: prefix from the summary (pip install of .carry-small, PYTHONPATH, init-checkpoint into out/ck), then
#   bash docs/measured/2026-12-04-cpu-s45-device-plan.sh STEP
set -u
step=${1:?step: probes, v2, share-counts or block-counts}
here=$PWD
m=docs/measured
case "$step" in
probes)
    timeout 200 python3 $m/2026-12-04-cpu-s45-fp8-swap-stream-probe.py > "$OUT/s45-fp8-swap-stream.log" 2>&1
    timeout 200 python3 $m/2026-12-04-cpu-s45-fp8-split-product-probe.py > "$OUT/s45-fp8-split-product.log" 2>&1
    timeout 150 python3 $m/2026-12-04-cpu-s44-split-product-probe.py > "$OUT/s44-split-product.log" 2>&1
    ;;
v2)
    timeout 300 python3 $m/2026-12-04-cpu-s45-chain-v2-probe.py > "$OUT/s45-chain-v2.log" 2>&1
    echo "probe rc $?" >> "$OUT/s45-chain-v2.log"
    ;;
share-counts|block-counts)
    test -f stages/_chain_before.py || { echo "stages/_chain_before.py missing (see the header)"; exit 2; }
    try=/tmp/try-$step
    rm -rf "$try" && mkdir -p "$try"
    tar --exclude=./out --exclude=./.carry --exclude=./.fa4a --exclude=./.fa4b -cf - . | tar -xf - -C "$try"
    ln -s "$here/out" "$try/out"
    cd "$try" || exit 2
    (git apply "$m/2026-12-04-cpu-s44-chain-$step.patch" || patch -p1 < "$m/2026-12-04-cpu-s44-chain-$step.patch") \
        > "$OUT/s45-$step-apply.log" 2>&1 || exit 2
    export PYTHONPATH="${PYTHONPATH/$here/$try}"
    timeout 180 python3 $m/2026-12-04-cpu-s44-chain-share-counts-probe.py > "$OUT/s45-$step-probe.log" 2>&1
    echo "probe rc $?" >> "$OUT/s45-$step-probe.log"
    FARM_GPU_CKPT=out/ck timeout 200 python3 -m pytest -q -m gpu tests/test_gpu.py tests/test_gpu_products.py \
        > "$OUT/s45-$step-gpu-tests.log" 2>&1
    timeout 150 python3 -m farm bench ar --model out/ck --device cuda --json "$OUT/s45-$step-bench-ar.json" \
        > "$OUT/s45-$step-bench-ar.log" 2>&1
    ;;
*)
    echo "unknown step $step"; exit 2 ;;
esac
