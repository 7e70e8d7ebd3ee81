#!/usr/bin/env bash
# Device runs of session s60: the s59 tree measured where s59 could not (the acoustic warm-up under inference mode,
# the 127-row warm tail, the prefill back to SDPA, the merge's written-out softmax), and the layer cut anew
# (…-cpu-s60-layer-cut.patch: transformer.layer_head_into / layer_tail_open) against the tree without it. No machine
# was lent in s60, so this plan waits for the next session. One step per call on one warm machine; logs go to $OUT.
#   step prepare (on the CPU box, before the calls) the committed stages into _old/ (untracked, so it travels),
#                then the patch applied to the tree (`git checkout stages farm tests` undoes it)
#   step start   (carry [".fa4a"] with .carry/whl inside) the card's name, the small wheels into /tmp/site,
#                FA4's first half into out/
#   step verify  (carry [".fa4b"]; the tree without the cut untracked in _old/stages) FA4 joined, the yue2-3b
#                checkpoint into out/ck, the acoustic GPU tests (the warm-up test among them), the reference chunk
#                through both trees (…-s60-fold-probe.py: old, new), and the new one with cuBLASLt preferred
#                (the H100 profile saw a memset and ~5 µs idle before each of cuBLAS's 115 products)
#   step song    (any carry) `farm bench song` with Dynamo's recompiles logged (none may fall inside the timed
#                run), `farm bench acoustic`
#   step rest    (any carry) the rest of the GPU suite
#   step album   (carry [".carry"], after verify) Ray into /tmp/site, the 12-track album with its Gantt chart
#   step quick   (no carry; one call for a session with ~7 device minutes left) the checkpoint, the A/B with SDPA's
#                attention (no FA4), the acoustic GPU tests (the FA4 ones skip)
set -u
step=${1:?step: prepare, start, verify, song, rest, album or quick}
s=s60
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR=/tmp/$s-caches/triton TORCHINDUCTOR_CACHE_DIR=/tmp/$s-caches/inductor
if [ -d out/fa4site ]; then
    mkdir -p out/fa4boot
    echo "import site; site.addsitedir('$PWD/out/fa4site')" > out/fa4boot/sitecustomize.py
    export PYTHONPATH="$PWD/out/fa4boot:$PYTHONPATH"
fi
logged() {    # logged NAME CMD...: the command's output into $OUT/$s-NAME.log, its exit status last
    local name=$1; shift
    "$@" > "$OUT/$s-$name.log" 2>&1
    echo "rc $?" >> "$OUT/$s-$name.log"
}
case "$step" in
prepare)
    rm -rf _old && mkdir _old && git archive HEAD stages | tar -x -C _old
    git apply docs/measured/2026-12-07-cpu-s60-layer-cut.patch && git status --short
    ;;
start)
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/$s-machine.txt" 2>&1
    python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$OUT/$s-machine.txt" 2>&1
    mkdir -p /tmp/site out
    logged start python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .fa4a/whl/*.whl
    cp .fa4a/part_a out/
    ;;
verify)
    test -d out/fa4site || cat out/part_a .fa4b/part_b | tar -xJ -C out
    bash "$0" verify-joined
    ;;
verify-joined)    # verify, once FA4's site exists (the preamble then puts it on the path)
    logged init bash -c 'test -d out/ck/model || python3 -m farm init-checkpoint out/ck --config yue2-3b --device cuda'
    probe=docs/measured/2026-12-07-cpu-s60-fold-probe.py
    PYTHONPATH="$PWD/_old:$PYTHONPATH" logged fold-old timeout 100 python3 $probe old
    logged fold-new timeout 100 python3 $probe new
    logged gpu-acoustic timeout 150 python3 -m pytest -q -m gpu tests/test_gpu_acoustic.py -p no:cacheprovider
    TORCH_BLAS_PREFER_CUBLASLT=1 logged fold-new-lt timeout 100 python3 $probe new-cublaslt
    ;;
song)
    TORCH_LOGS=recompiles logged bench-song timeout 220 python3 -m farm bench song --model out/ck --device cuda \
        --json "$OUT/$s-bench-song.json" --summary "$OUT/$s-summary-song.json"
    logged bench-acoustic timeout 200 python3 -m farm bench acoustic --model out/ck --device cuda \
        --json "$OUT/$s-bench-acoustic.json" --summary "$OUT/$s-summary-acoustic.json"
    ;;
rest)
    FARM_GPU_CKPT=out/ck logged gpu-rest timeout 150 python3 -m pytest -q -m gpu tests/test_gpu.py \
        tests/test_gpu_products.py -p no:cacheprovider
    ;;
quick)
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/$s-machine.txt" 2>&1
    logged init bash -c 'test -d out/ck/model || python3 -m farm init-checkpoint out/ck --config yue2-3b --device cuda'
    probe=docs/measured/2026-12-07-cpu-s60-fold-probe.py
    PYTHONPATH="$PWD/_old:$PYTHONPATH" logged fold-old-sdpa timeout 100 python3 $probe old-sdpa
    logged fold-new-sdpa timeout 100 python3 $probe new-sdpa
    logged gpu-acoustic-sdpa timeout 120 python3 -m pytest -q -m gpu tests/test_gpu_acoustic.py -p no:cacheprovider
    ;;
album)
    tar xJf .carry/ray-2.60.0.tar.xz -C /tmp/site
    logged album12 timeout 330 python3 -m farm bench album --model out/ck --tracks 12 --no-sequential \
        --gantt "$OUT/$s-album12-1gpu-gantt.png" --json "$OUT/$s-album12.json" --summary "$OUT/$s-summary-album.json"
    ;;
esac
