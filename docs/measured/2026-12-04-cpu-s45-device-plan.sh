#!/usr/bin/env bash
# The next device time's runs, prepared on the CPU box in session s45 (no device was lent in s44's last hours or
# in s45). One step per device call, each well inside the 600 s a call may run; logs go to $OUT.
#   step probes        the s45 FP8 stream and product probes and the s44 split-product probe (~4 min)
#   step v2            the s45 chain with the weights as the MMA's M (BF16 and FP8) against today's chain; its
#                      kernel comes with …-s45-chain-v2-engine.patch, and since s46 …-s46-chain-w8a16-engine.patch
#                      goes on top (FP8 weights in that chain, in the engine), both applied to a copy
#   step v2-engine     both patches, $YUE2_FARM_LAYER_CHAIN=swapped: the GPU suite (with the FP8 chain's test), then
#                      `farm bench ar`, with the swapped kernel
#   step v2-song       (added in s46) both patches, $YUE2_FARM_LAYER_CHAIN=swapped: `farm bench song` (~3 min),
#                      then (s47) where the acoustic stage's ~0.28 s beyond its 64 evaluations goes (~1.5 min)
#   step v2-fp8        (added in s46) both patches: `farm bench ar --format fp8` at 1 and 24 rows and `farm bench song
#                      --format fp8` (the engine's FP8 step is the W8A16 chain there; ~5 min)
#   step decode        (added in s47; ran in s47 and the patch landed: the step now runs the probe on the tree)
#                      the decoder's convolutions at FP32 accuracy on tensor cores, its probe (every conv of a tile
#                      and a whole track against cuDNN FP32 / TF32 and FP64) after its GPU tests (~2 min; it needs
#                      no checkpoint: leave the init-checkpoint prefix out)
#   step album-2gpu    (added in s47) only where kind nvidia-h200-x2 is lent: the tree as it is, `farm bench album
#                      --tracks 12 --no-sequential` over both cards (~4 min; `album12_2gpu_s` is still the
#                      2026-11-30 figure, taken before every change since). Ray must travel: carry [".carry"] and
#                      use the prefix ../shared/tools/device-carry.sh prints, then init-checkpoint as usual
# FlashAttention-4 for the songs' acoustic stage (s44's 20.48 s ran it; SDPA costs ~0.4 s more) travels in two
# halves, as the 64 MiB carry needs: the v2 call carries [".carry-small", ".fa4a"] and leaves part_a in out/, the
# v2-engine call carries [".carry-small", ".fa4b"] and unpacks both into out/fa4site, which later calls on the same
# machine find (out/ stays while the machine is held). On a fresh machine the songs run SDPA: each song log says which.
#   step share-counts  …-s44-chain-share-counts.patch: its probe (under a timeout: a hung kernel costs 3 minutes,
#   step block-counts  not the call), the GPU suite, `farm bench ar`; the same for …-s44-chain-block-counts.patch
# Each patch is applied to a copy of the tree (/tmp/try-STEP; out/ is linked), so the tree itself stays as it is.
# Order: v2; v2-engine if v2 is right and faster; then v2-song; v2-fp8 if v2's FP8 rows are right and faster than
# its BF16 ones; decode; album-2gpu when a two-card machine is lent; then probes, share-counts, block-counts (the
# last two patch today's chain: moot if v2 wins). ~42 minutes in all (and 4 on two cards), more than one session's
# 30: stop where the time ends and go on the next time.
# Before the first share/block-counts call, on the CPU box (the device gets the tree without .git):
#   git show 4151e10:stages/_layer_chain_gluon.py > stages/_chain_before.py   (untracked: it travels; delete it
#   before committing). It is the committed chain before s44's patches, which the share-counts probe compares to.
# Each call: the usual prefix (pip install of .carry-small, PYTHONPATH=/tmp/site:$PWD, init-checkpoint into out/ck),
#   then: bash docs/measured/2026-12-04-cpu-s45-device-plan.sh STEP
# Status after s47 (an H200 was lent for its last hour): v2, decode, share-counts and block-counts ran
# (docs/measured/2026-12-05-h200-s47-*, docs/benchmarks.md). v2 was right but slower than today's chain (BF16 and
# FP8), and share/block counts were slower too, so v2-engine, v2-song and v2-fp8 are moot; the decode landed. What
# is left worth a call: album-2gpu (a two-card machine), and probes (the s44/s45 product probes, records only).
# s48 ran no step of this plan (only one-card machines were lent); album-2gpu is still the one worth a call. FA4's
# joined halves (out/fa4site) import only with their .pth files read: put a sitecustomize.py that calls
# site.addsitedir on out/fa4site first on PYTHONPATH (docs/benchmarks.md, nineteenth session), as fa4() now does.
# Since s48 every `farm bench album` also prints each worker's load phases and when the first stage began: read
# them from album-2gpu's log (or any one-card album) for the ~39 s between an album's render wall and its makespan.
# s49 read them (6.6 device minutes were left: one H100 call; docs/benchmarks.md, twentieth session): a worker's
# start took 68.7 s with empty caches and 43.2 s with warm ones, 40.8 / 27.4 s of it the AR engine's build, which
# the tree could not explain. New step, first in the next session:
#   step startup       (added in s49) …-s49-startup-probe.py: a worker's start part by part in fresh processes
#                      (cold caches, then warm twice), the AR build under cProfile with its graphs' laps, the
#                      mapped file's page faults alone, and the weights through three loaders (today's; staged
#                      through pinned buffers from the mapped file; read() straight into them); then a 2-track
#                      album with warm caches, whose log now prints the AR engine's laps (~6 min). Ray must travel, and
#                      the albums' decode needs cffi: ../shared/tools/device-carry.sh cffi pycparser mutagen
#                      pyloudnorm, carry [".carry"] with its prefix (s49's call lost both decodes to a missing cffi)
#   step startup-staged (added in s49; the next call, same machine) on a copy, …-s49-staged-loading.patch (the
#                      weights through two pinned buffers in the product's loader) and …-s49-decoder-beside-
#                      weights.patch (the worker loads its decoder on the decode thread while the model's weights
#                      are read, done before any graph capture) and …-s49-one-warm-up.patch (one warm-up run per AR
#                      graph, not two): the whole GPU suite (the staged loader's test, graph step == eager, the
#                      batch-invariance tests with the AR laps), the same 2-track album (~6.5 min). Land each patch
#                      whose lap shows it (weights; decode ~0 with `its decoder loaded in … beside the weights`;
#                      each graph's warm-up about half of the `startup` step's) and whose tests pass. Both steps
#                      keep their compile caches in /tmp/s49-caches: on the machine that ran `startup` the album
#                      here is warm; on a fresh one, compare it with the probe's cold case instead. Carry [".fa4a"]
#                      in this call (it leaves FA4's first half in out/ for album12)
#   step album12       (added in s49; the third call, same machine, carry [".fa4b"]) after the patches that won
#                      landed: `farm bench album --tracks 12 --no-sequential --summary` with FlashAttention-4, for
#                      the headline makespan on today's tree and the new start keys (album12_1gpu_first_stage_s,
#                      album12_1gpu_wall_s; ~2.5 min). Ray and cffi are already in /tmp/site from `startup`; on a
#                      fresh machine carry [".carry"] instead (no room for a FA4 half beside Ray: SDPA, which the
#                      log says). The FA4 halves: bash docs/measured/2026-12-05-cpu-s49-fa4-carry.sh (35 + 35 MB)
# s50 ran startup, startup-staged and album12 on one H100 (docs/benchmarks.md, twenty-first session): the staged
# loader landed; decoder-beside-weights and one-warm-up were measured and dropped. A warm worker's start is 13.7 s,
# much of it Python compiling torch's source in every process on these machines. pycache ran too (s50, a 4th call).
# s51's steps are in …-cpu-s51-device-plan.sh (its album12 step calls this plan's).
set -u
step=${1:?step: startup, startup-staged, album12, pycache, probes, v2, v2-engine, v2-song, v2-fp8, decode, album-2gpu, share-counts or block-counts}
here=$PWD
m=docs/measured

patched_copy() {        # $@: the patches, in order; leaves the shell in the patched copy, PYTHONPATH pointing there
    try=/tmp/try-$step
    rm -rf "$try" && mkdir -p "$try"
    tar --exclude=./out --exclude=./.carry --exclude=./.fa4a --exclude=./.fa4b -cf - . | tar -xf - -C "$try"
    ln -s "$here/out" "$try/out"
    cd "$try" || exit 2
    for p in "$@"; do
        (git apply "$p" || patch -p1 < "$p") >> "$OUT/s45-$step-apply.log" 2>&1 || exit 2
    done
    export PYTHONPATH="${PYTHONPATH//$here/$try}"     # every entry (out/fa4site too: out is linked)
}

fa4() {     # FlashAttention-4 on the path if its halves have reached this machine (see the header)
    test -f "$here/.fa4a/part_a" && cp "$here/.fa4a/part_a" "$here/out/"
    if [ ! -d "$here/out/fa4site" ] && [ -f "$here/out/part_a" ] && [ -f "$here/.fa4b/part_b" ]; then
        cat "$here/out/part_a" "$here/.fa4b/part_b" | tar -xJ -C "$here/out"
    fi
    if [ -d "$here/out/fa4site" ]; then      # its .pth files (the CUTLASS DSL's path) are read only from a site dir
        mkdir -p "$here/out/fa4boot"
        echo "import site; site.addsitedir('$here/out/fa4site')" > "$here/out/fa4boot/sitecustomize.py"
        export PYTHONPATH="$here/out/fa4boot:$PYTHONPATH"
    fi
}

song() {    # $1: log name; the rest: farm bench song's options
    local name=$1
    shift
    python3 -c "import flash_attn.cute; print('FlashAttention-4 importable')" > "$OUT/$name.log" 2>&1
    timeout 200 python3 -m farm bench song --model out/ck --device cuda "$@" --json "$OUT/$name.json" \
        --summary "$OUT/s46-summary.json" >> "$OUT/$name.log" 2>&1
}

suite_and_bench() {
    FARM_GPU_CKPT=out/ck timeout 200 python3 -m pytest -q -m gpu tests/test_gpu.py tests/test_gpu_products.py \
        > "$OUT/s45-$step-gpu-tests.log" 2>&1
    timeout 150 python3 -m farm bench ar --model out/ck --device cuda --json "$OUT/s45-$step-bench-ar.json" \
        > "$OUT/s45-$step-bench-ar.log" 2>&1
}

case "$step" in
startup)
    # empty compile caches of its own for the probe's cold case; the album after it finds them warm
    export TRITON_CACHE_DIR=/tmp/s49-caches/triton TORCHINDUCTOR_CACHE_DIR=/tmp/s49-caches/inductor
    rm -rf /tmp/s49-caches
    timeout 480 python3 $m/2026-12-05-cpu-s49-startup-probe.py "$OUT" > "$OUT/s49-startup.log" 2>&1
    echo "probe rc $?" >> "$OUT/s49-startup.log"
    timeout 110 python3 -m farm bench album --model out/ck --tracks 2 --plan-tokens 1000 --semantic-tokens 1000 \
        --no-sequential --json "$OUT/s49-album2.json" > "$OUT/s49-album2.log" 2>&1
    echo "album rc $?" >> "$OUT/s49-album2.log"
    ;;
startup-staged)
    fa4
    export TRITON_CACHE_DIR=/tmp/s49-caches/triton TORCHINDUCTOR_CACHE_DIR=/tmp/s49-caches/inductor
    patched_copy "$m/2026-12-05-cpu-s49-staged-loading.patch" "$m/2026-12-05-cpu-s49-decoder-beside-weights.patch" \
        "$m/2026-12-05-cpu-s49-one-warm-up.patch"
    FARM_GPU_CKPT=out/ck timeout 300 python3 -m pytest -q -m gpu tests/test_gpu.py tests/test_gpu_products.py \
        > "$OUT/s49-staged-gpu-tests.log" 2>&1
    timeout 110 python3 -m farm bench album --model out/ck --tracks 2 --plan-tokens 1000 --semantic-tokens 1000 \
        --no-sequential --json "$OUT/s49-album2-staged.json" > "$OUT/s49-album2-staged.log" 2>&1
    echo "album rc $?" >> "$OUT/s49-album2-staged.log"
    ;;
album12)
    fa4
    export TRITON_CACHE_DIR=/tmp/s49-caches/triton TORCHINDUCTOR_CACHE_DIR=/tmp/s49-caches/inductor
    python3 -c "import flash_attn.cute; print('FlashAttention-4 importable')" > "$OUT/s49-album12.log" 2>&1
    timeout 400 python3 -m farm bench album --model out/ck --tracks 12 --no-sequential \
        --gantt "$OUT/album12-1gpu-gantt.png" --json "$OUT/s49-album12.json" --summary "$OUT/s49-summary.json" \
        >> "$OUT/s49-album12.log" 2>&1
    echo "album rc $?" >> "$OUT/s49-album12.log"
    ;;
pycache)
    # (added in s50) the rented machines' torch has no bytecode cache and cannot write one: every process compiles
    # ~1,500 modules from source (~5 s in the s50 probe's profile). Three 2-track albums: with a writable cache
    # (PYTHONPYCACHEPREFIX; the first fills it, with empty compile caches too), then warm, then without it
    export TRITON_CACHE_DIR=/tmp/s50-caches/triton TORCHINDUCTOR_CACHE_DIR=/tmp/s50-caches/inductor
    python3 -c "import os, sys, torch; print('dont_write_bytecode', sys.flags.dont_write_bytecode, 'torch dir \
writable', os.access(os.path.dirname(torch.__file__), os.W_OK), 'pycache_prefix', sys.pycache_prefix)" \
        > "$OUT/s50-pycache-env.log" 2>&1
    ls "$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')/__pycache__" 2>&1 | head -3 \
        >> "$OUT/s50-pycache-env.log"
    for run in fill cached plain; do
        if [ $run = plain ]; then unset PYTHONPYCACHEPREFIX
        else export PYTHONPYCACHEPREFIX=/tmp/s50-pycache; unset PYTHONDONTWRITEBYTECODE; fi
        timeout 170 python3 -m farm bench album --model out/ck --tracks 2 --plan-tokens 1000 --semantic-tokens 1000 \
            --no-sequential --json "$OUT/s50-album2-$run.json" > "$OUT/s50-album2-$run.log" 2>&1
        echo "album rc $?" >> "$OUT/s50-album2-$run.log"
    done
    ;;
probes)
    timeout 200 python3 $m/2026-12-04-cpu-s45-fp8-swap-stream-probe.py > "$OUT/s45-fp8-swap-stream.log" 2>&1
    timeout 200 python3 $m/2026-12-04-cpu-s45-fp8-split-product-probe.py > "$OUT/s45-fp8-split-product.log" 2>&1
    timeout 150 python3 $m/2026-12-04-cpu-s44-split-product-probe.py > "$OUT/s44-split-product.log" 2>&1
    ;;
v2)
    fa4
    patched_copy "$m/2026-12-04-cpu-s45-chain-v2-engine.patch" "$m/2026-12-05-cpu-s46-chain-w8a16-engine.patch"
    timeout 240 python3 $m/2026-12-04-cpu-s45-chain-v2-probe.py > "$OUT/s45-chain-v2.log" 2>&1
    echo "probe rc $?" >> "$OUT/s45-chain-v2.log"
    ;;
v2-engine)
    fa4
    patched_copy "$m/2026-12-04-cpu-s45-chain-v2-engine.patch" "$m/2026-12-05-cpu-s46-chain-w8a16-engine.patch"
    export YUE2_FARM_LAYER_CHAIN=swapped
    suite_and_bench
    ;;
v2-song)
    fa4
    patched_copy "$m/2026-12-04-cpu-s45-chain-v2-engine.patch" "$m/2026-12-05-cpu-s46-chain-w8a16-engine.patch"
    export YUE2_FARM_LAYER_CHAIN=swapped
    song s46-v2-bench-song
    timeout 150 python3 $m/2026-12-05-cpu-s47-acoustic-overhead-probe.py > "$OUT/s47-acoustic-overhead.log" 2>&1
    echo "probe rc $?" >> "$OUT/s47-acoustic-overhead.log"
    ;;
v2-fp8)
    fa4
    patched_copy "$m/2026-12-04-cpu-s45-chain-v2-engine.patch" "$m/2026-12-05-cpu-s46-chain-w8a16-engine.patch"
    timeout 150 python3 -m farm bench ar --model out/ck --device cuda --format fp8 --rows 1 --rows 24 \
        --json "$OUT/s46-v2-fp8-bench-ar.json" --summary "$OUT/s46-summary.json" > "$OUT/s46-v2-fp8-bench-ar.log" 2>&1
    song s46-v2-fp8-bench-song --format fp8
    ;;
decode)
    timeout 120 python3 -m pytest -q -m gpu tests/test_gpu.py -k "tf32x3 or tf32_decode or snake" \
        > "$OUT/s47-decode-gpu-tests.log" 2>&1
    timeout 420 python3 $m/2026-12-05-cpu-s47-conv-tf32x3-probe.py "$OUT/s47-conv-tf32x3.json" \
        > "$OUT/s47-conv-tf32x3.log" 2>&1
    echo "probe rc $?" >> "$OUT/s47-conv-tf32x3.log"
    ;;
album-2gpu)
    fa4
    nvidia-smi -L > "$OUT/s47-album12-2gpu.log" 2>&1
    timeout 420 python3 -m farm bench album --model out/ck --tracks 12 --no-sequential \
        --gantt "$OUT/album12-2gpu-gantt.png" --json "$OUT/s47-album12-2gpu.json" --summary "$OUT/s47-summary.json" \
        >> "$OUT/s47-album12-2gpu.log" 2>&1
    echo "album rc $?" >> "$OUT/s47-album12-2gpu.log"
    ;;
share-counts|block-counts)
    test -f stages/_chain_before.py || { echo "stages/_chain_before.py missing (see the header)"; exit 2; }
    patched_copy "$m/2026-12-04-cpu-s44-chain-$step.patch"
    timeout 180 python3 $m/2026-12-04-cpu-s44-chain-share-counts-probe.py > "$OUT/s45-$step-probe.log" 2>&1
    echo "probe rc $?" >> "$OUT/s45-$step-probe.log"
    suite_and_bench
    ;;
*)
    echo "unknown step $step"; exit 2 ;;
esac
