#!/usr/bin/env bash
# Device runs prepared on the CPU box in session s51, one step per call; logs go to $OUT. Each call: the prefix that
# ../shared/tools/device-carry.sh prints (carry [".carry"]), init-checkpoint into out/ck, then
#   bash docs/measured/2026-12-05-cpu-s51-device-plan.sh STEP
#   step ptxas     …-s51-ptxas-probe.py: whether a second process finds the first one's Triton kernels, with the
#                  tree's ptxas pin (stages/ptxas.py) and with it stubbed out; a worker's start in three fresh
#                  processes on empty caches with the pin (s50 without it: AR build 41.4 / 31.7 / 12.8 s); then the
#                  new GPU test of the pin (~4 min)
#   step ptxas-ab  our kernels as each ptxas builds them: `farm bench ar --rows 1 --rows 24` with torch's ptxas
#                  (CUDA 13.0, what the pin picks) and with Triton's own (12.8, what a machine's first process used
#                  before the pin), each on empty caches of its own; then the whole GPU suite (~6 min)
#   step album12   the s45 plan's step of that name on the tree: the headline album and its start keys on an H200
#   later steps, each described where it stands below: ptxas-control, album2-twice, test-child, fa4a, fa4-cache,
#   default-dirs, loader-threads
# s51 ran ptxas, ptxas-ab, ptxas-control with album2-twice, test-child, fa4a and fa4-cache on H100s
# (docs/benchmarks.md, twenty-second session): the pin and FA4's cache landed. album12 was not run (no H200 came);
# it is still worth a call on one. Next session, first: default-dirs (the same question with Triton's cache folder
# left to its default, as users have it) and loader-threads (Ray is needed: carry [".carry"]), then album12 on an
# H200.
# s52 ran loader-threads and default-dirs on one H100 (docs/benchmarks.md, twenty-third session; logs renamed
# …-h100-s52-*): no miss with the default folder, and the copy threads did not move the worker's weights lap
# (removed). Left: album12 on an H200, and album-2gpu of the s45 plan when a two-card kind is lent.
set -u
step=${1:?step: one of those the header lists}
m=docs/measured

case "$step" in
ptxas)
    timeout 420 python3 $m/2026-12-05-cpu-s51-ptxas-probe.py "$OUT" > "$OUT/s51-ptxas-probe.log" 2>&1
    echo "probe rc $?" >> "$OUT/s51-ptxas-probe.log"
    FARM_GPU_CKPT=out/ck timeout 120 python3 -m pytest -q -m gpu tests/test_ptxas.py -k second_process \
        > "$OUT/s51-ptxas-gpu-test.log" 2>&1
    ;;
ptxas-ab)
    # (after the first ptxas call) part 1 again, its second process now compiling a function Inductor had not seen
    timeout 200 python3 $m/2026-12-05-cpu-s51-ptxas-probe.py "$OUT" --no-startup > "$OUT/s51-ptxas-probe-2.log" 2>&1
    triton_ptxas=$(python3 -c "import os, triton; print(os.path.join(os.path.dirname(triton.__file__), \
'backends', 'nvidia', 'bin', 'ptxas'))")
    torch_ptxas=$(python3 -c "from stages.ptxas import bundled_ptxas; print(bundled_ptxas())")
    for which in torch triton; do
        export TRITON_PTXAS_PATH=$torch_ptxas
        if [ $which = triton ]; then export TRITON_PTXAS_PATH=$triton_ptxas; fi
        export TRITON_CACHE_DIR=/tmp/s51-$which/triton TORCHINDUCTOR_CACHE_DIR=/tmp/s51-$which/inductor
        rm -rf /tmp/s51-$which
        "$TRITON_PTXAS_PATH" --version | tail -2 > "$OUT/s51-bench-ar-ptxas-$which.log"
        timeout 200 python3 -m farm bench ar --model out/ck --device cuda --rows 1 --rows 24 --numerics-tokens 256 \
            --json "$OUT/s51-bench-ar-ptxas-$which.json" >> "$OUT/s51-bench-ar-ptxas-$which.log" 2>&1
    done
    unset TRITON_PTXAS_PATH TRITON_CACHE_DIR TORCHINDUCTOR_CACHE_DIR
    FARM_GPU_CKPT=out/ck timeout 240 python3 -m pytest -q -m gpu tests/test_gpu.py tests/test_gpu_products.py \
        tests/test_ptxas.py \
        > "$OUT/s51-gpu-tests.log" 2>&1
    ;;
ptxas-control)
    # (after ptxas-ab) part 2 of the probe without the pin, on the same machine (~2.5 min)
    timeout 400 python3 $m/2026-12-05-cpu-s51-ptxas-probe.py "$OUT" --nopin-startup > "$OUT/s51-ptxas-nopin.log" 2>&1
    echo "probe rc $?" >> "$OUT/s51-ptxas-nopin.log"
    ;;
album2-twice)
    # (after ptxas-ab) two 2-track albums in a row on empty compile caches, the tree with its pin: when a machine's
    # second render begins its first stage (s50, before the pin: 96.7 s, then 47.1 s, then 32.9 s) (~2.5 min)
    export TRITON_CACHE_DIR=/tmp/s51-album/triton TORCHINDUCTOR_CACHE_DIR=/tmp/s51-album/inductor
    rm -rf /tmp/s51-album
    for run in first second; do
        timeout 170 python3 -m farm bench album --model out/ck --tracks 2 --plan-tokens 1000 --semantic-tokens 1000 \
            --no-sequential --json "$OUT/s51-album2-$run.json" > "$OUT/s51-album2-$run.log" 2>&1
        echo "album rc $?" >> "$OUT/s51-album2-$run.log"
    done
    ;;
test-child)
    # (after album2-twice) the GPU test's two processes with the pin and without: does the test tell them apart?
    timeout 300 python3 $m/2026-12-05-cpu-s51-ptxas-probe.py "$OUT" --test-child > "$OUT/s51-test-child.log" 2>&1
    echo "probe rc $?" >> "$OUT/s51-test-child.log"
    FARM_GPU_CKPT=out/ck timeout 120 python3 -m pytest -q -m gpu tests/test_ptxas.py -k second_process \
        > "$OUT/s51-ptxas-gpu-test-2.log" 2>&1
    ;;
fa4a)
    # FA4's first half stays in out/ while the machine is held (docs/measured/2026-12-05-cpu-s49-fa4-carry.sh);
    # carry [".fa4a"] alone; no Ray is needed: the prefix is PYTHONPATH=$PWD and init-checkpoint
    cp .fa4a/part_a out/
    ;;
fa4-cache)
    # the next call on the same machine, carry [".fa4b"]: FA4's compile in a worker's start, its on-disk cache off
    # and on (…-s51-fa4-cache-probe.py, ~2.5 min), then the FA4 GPU test with the cache on
    test -d out/fa4site || cat out/part_a .fa4b/part_b | tar -xJ -C out
    mkdir -p out/fa4boot
    echo "import site; site.addsitedir('$PWD/out/fa4site')" > out/fa4boot/sitecustomize.py
    export PYTHONPATH="$PWD/out/fa4boot:$PYTHONPATH"
    timeout 300 python3 $m/2026-12-05-cpu-s51-fa4-cache-probe.py "$OUT" > "$OUT/s51-fa4-cache.log" 2>&1
    echo "probe rc $?" >> "$OUT/s51-fa4-cache.log"
    FARM_GPU_CKPT=out/ck timeout 150 python3 -m pytest -q -m gpu tests/test_gpu.py -k flash \
        > "$OUT/s51-fa4-gpu-test.log" 2>&1
    ;;
default-dirs)
    # (added at the end of s51, not yet run) a worker's start three times with TRITON_CACHE_DIR unset, as on a
    # user's machine (every measurement of s51 set it): does the second start still compile our kernels again,
    # now because of where Triton's cache lies? If so, pin TRITON_CACHE_DIR as stages/ptxas.py pins ptxas (~2 min)
    timeout 400 python3 $m/2026-12-05-cpu-s51-ptxas-probe.py "$OUT" --default-dirs > "$OUT/s51-default-dirs.log" 2>&1
    echo "probe rc $?" >> "$OUT/s51-default-dirs.log"
    ;;
loader-threads)
    # (added at the end of s51, not yet run) the staged loader's host copy on several threads (landed on the CPU
    # box's evidence only): its GPU test, then two 2-track albums (the first fills the caches); the second's
    # weights lap should fall from 1.3-1.4 s towards the 0.4-0.6 s of a plain process (~3 min)
    FARM_GPU_CKPT=out/ck timeout 120 python3 -m pytest -q -m gpu tests/test_gpu.py -k pinned_buffers \
        > "$OUT/s51-loader-threads-gpu-test.log" 2>&1
    export TRITON_CACHE_DIR=/tmp/s51-loader/triton TORCHINDUCTOR_CACHE_DIR=/tmp/s51-loader/inductor
    for run in first second; do
        timeout 170 python3 -m farm bench album --model out/ck --tracks 2 --plan-tokens 1000 --semantic-tokens 1000 \
            --no-sequential --json "$OUT/s51-loader-album2-$run.json" > "$OUT/s51-loader-album2-$run.log" 2>&1
        echo "album rc $?" >> "$OUT/s51-loader-album2-$run.log"
    done
    ;;
album12)
    bash $m/2026-12-04-cpu-s45-device-plan.sh album12
    ;;
esac
