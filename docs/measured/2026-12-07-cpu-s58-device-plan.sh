#!/usr/bin/env bash
# Device runs of session s58: the acoustic attention's last wave (stages/nar_attention.py, `wave_split`). One step
# per call on one warm machine (H100 or H200: the split follows the SM count, 132 on both); logs go to $OUT.
#   step start  (carry [".fa4a"], which also holds .carry/whl: `cp -r .carry/whl .fa4a/`) the small wheels into
#               /tmp/site and FA4's first half into out/ (Ray is not needed here)
#   step probe  (carry [".fa4b"]) FA4 joined; the attention probe (whole against split, forced plans, numerics,
#               graph) and the new GPU test first; then the yue2-3b checkpoint into out/ck and `farm bench acoustic`
#               (split, whole, SDPA) for whatever time the call has left
#   step song   (any carry) `farm bench song`, then the same with YUE2_FARM_NAR_ATTENTION=fa4-whole
#   step again  (carry [".fa4b"], after start on a fresh machine) after the engine warms the split's kernels up
#               (the first song run had paid their compile in its timed acoustic stage): FA4 joined, the checkpoint,
#               the new GPU test, then step song
#   step album  (carry [".carry"], after probe or again on the same machine) Ray into /tmp/site, then the 12-track
#               album with FA4 and its Gantt chart. For the next H200: start, probe, song, album (four calls; the
#               song and album give the H200 keys on this tree), then `farm calibrate` of both on the CPU box
set -u
step=${1:?step: start, probe, song, again or album}
s=s58
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR=/tmp/$s-caches/triton TORCHINDUCTOR_CACHE_DIR=/tmp/$s-caches/inductor
if [ -d out/fa4site ]; then
    mkdir -p out/fa4boot
    echo "import site; site.addsitedir('$PWD/out/fa4site')" > out/fa4boot/sitecustomize.py
    export PYTHONPATH="$PWD/out/fa4boot:$PYTHONPATH"
fi
case "$step" in
start)
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/$s-machine.txt" 2>&1
    python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$OUT/$s-machine.txt" 2>&1
    mkdir -p /tmp/site out
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .fa4a/whl/*.whl \
        > "$OUT/$s-start.log" 2>&1
    cp .fa4a/part_a out/
    echo "rc $?" >> "$OUT/$s-start.log"
    ;;
probe)
    test -d out/fa4site || cat out/part_a .fa4b/part_b | tar -xJ -C out
    mkdir -p out/fa4boot
    echo "import site; site.addsitedir('$PWD/out/fa4site')" > out/fa4boot/sitecustomize.py
    export PYTHONPATH="$PWD/out/fa4boot:$PYTHONPATH"
    timeout 200 python3 docs/measured/2026-12-07-cpu-s58-fa4-last-wave-probe.py > "$OUT/$s-last-wave-probe.log" 2>&1
    echo "rc $?" >> "$OUT/$s-last-wave-probe.log"
    timeout 100 python3 -m pytest -q -m gpu tests/test_gpu.py -k "last_wave or flash_attention_4" \
        -p no:cacheprovider > "$OUT/$s-gpu-tests.log" 2>&1
    echo "rc $?" >> "$OUT/$s-gpu-tests.log"
    (test -d out/ck/model || python3 -m farm init-checkpoint out/ck --config yue2-3b --device cuda) \
        > "$OUT/$s-init.log" 2>&1
    echo "rc $?" >> "$OUT/$s-init.log"
    timeout 240 python3 -m farm bench acoustic --model out/ck --device cuda --json "$OUT/$s-bench-acoustic.json" \
        --summary "$OUT/$s-summary-acoustic.json" > "$OUT/$s-bench-acoustic.log" 2>&1
    echo "rc $?" >> "$OUT/$s-bench-acoustic.log"
    ;;
again)
    test -d out/fa4site || cat out/part_a .fa4b/part_b | tar -xJ -C out
    mkdir -p out/fa4boot
    echo "import site; site.addsitedir('$PWD/out/fa4site')" > out/fa4boot/sitecustomize.py
    (test -d out/ck/model || python3 -m farm init-checkpoint out/ck --config yue2-3b --device cuda) \
        > "$OUT/$s-init.log" 2>&1
    PYTHONPATH="$PWD/out/fa4boot:$PYTHONPATH" timeout 100 python3 -m pytest -q -m gpu tests/test_gpu.py \
        -k "last_wave or flash_attention_4" -p no:cacheprovider > "$OUT/$s-gpu-tests-again.log" 2>&1
    echo "rc $?" >> "$OUT/$s-gpu-tests-again.log"
    PYTHONPATH="$PWD/out/fa4boot:$PYTHONPATH" bash "$0" song
    ;;
album)
    tar xJf .carry/ray-2.60.0.tar.xz -C /tmp/site
    timeout 330 python3 -m farm bench album --model out/ck --tracks 12 --no-sequential \
        --gantt "$OUT/$s-album12-1gpu-gantt.png" --json "$OUT/$s-album12.json" --summary "$OUT/$s-summary-album.json" \
        > "$OUT/$s-album12.log" 2>&1
    echo "rc $?" >> "$OUT/$s-album12.log"
    ;;
song)
    timeout 200 python3 -m farm bench song --model out/ck --device cuda --json "$OUT/$s-bench-song.json" \
        --summary "$OUT/$s-summary-song.json" > "$OUT/$s-bench-song.log" 2>&1
    echo "rc $?" >> "$OUT/$s-bench-song.log"
    YUE2_FARM_NAR_ATTENTION=fa4-whole timeout 200 python3 -m farm bench song --model out/ck --device cuda \
        --json "$OUT/$s-bench-song-whole.json" > "$OUT/$s-bench-song-whole.log" 2>&1
    echo "rc $?" >> "$OUT/$s-bench-song-whole.log"
    ;;
esac
