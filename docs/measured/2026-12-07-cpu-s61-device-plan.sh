#!/usr/bin/env bash
# Device run of session s61: the acoustic ODE without a host synchronisation per evaluation. timestep_tau copied τ
# from pageable host memory, which waits for the card to drain, and `torch.cuda.graph` synchronises and empties the
# allocator's cache before its capture. Three trees, untracked, travel with the call: _old/stages (as committed),
# _tau/stages (τ filled on the device only), and the working tree (that, and the capture begun without the sync).
# One call, no carry (SDPA's attention; the host's wait does not depend on the attention kernel): the checkpoint,
# the reference chunk's solve_chunk through the three trees twice (…-cpu-s60-fold-probe.py), the acoustic GPU tests.
# For the next H200 (the headline keys with the layer cut, which no H200 has run): the s60 plan's `start` (carry
# [".fa4a"]), then this plan's `record` (carry [".fa4b"]: FA4 joined, the checkpoint, the s60 plan's `song`), then
# the s60 plan's `album` (carry [".carry"]); ~5 device minutes after the machine starts.
set -u
if [ "${1:-sync}" = record ]; then
    test -d out/fa4site || cat out/part_a .fa4b/part_b | tar -xJ -C out
    PYTHONPATH=/tmp/site:$PWD python3 -m farm init-checkpoint out/ck --config yue2-3b --device cuda \
        > "$OUT/s61-record-init.log" 2>&1
    bash docs/measured/2026-12-07-cpu-s60-device-plan.sh song
    grep -h "│\|vs FP32\|path:" "$OUT"/s60-bench-*.log
    exit
fi
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=/tmp/s61-inductor TRITON_CACHE_DIR=/tmp/s61-triton
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/s61-sync-machine.txt" 2>&1
python3 -m farm init-checkpoint out/ck --config yue2-3b --device cuda > "$OUT/s61-sync-init.log" 2>&1
probe=docs/measured/2026-12-07-cpu-s60-fold-probe.py
for round in 1 2; do
    PYTHONPATH="$PWD/_old:$PYTHONPATH" timeout 100 python3 $probe s61-old > "$OUT/s61-sync-old-$round.log" 2>&1
    PYTHONPATH="$PWD/_tau:$PYTHONPATH" timeout 100 python3 $probe s61-tau > "$OUT/s61-sync-tau-$round.log" 2>&1
    timeout 100 python3 $probe s61-both > "$OUT/s61-sync-both-$round.log" 2>&1
done
timeout 100 python3 -m pytest -q -m gpu tests/test_gpu_acoustic.py -p no:cacheprovider \
    > "$OUT/s61-sync-gpu-acoustic.log" 2>&1
echo "rc $?" >> "$OUT/s61-sync-gpu-acoustic.log"
grep -h "stages from\|solve_chunk\|peak\|Error" "$OUT"/s61-sync-{old,tau,both}-*.log
tail -n 3 "$OUT/s61-sync-gpu-acoustic.log"
