#!/usr/bin/env bash
# FlashAttention-4 for the device machine's acoustic stage (stages/nar_attention.py picks it on Hopper when it
# imports), built here as two git-ignored carry halves, .fa4a/part_a and .fa4b/part_b: the package set is larger
# than one call's 64 MiB. The versions are the ones every FA4 figure in docs/benchmarks.md ran (flash-attn-4
# 4.0.0b40, nvidia-cutlass-dsl 4.8.1 with its CUDA 13 libraries); cuda-bindings and protobuf come with the image.
# On the machine (docs/measured/2026-12-04-cpu-s45-device-plan.sh, fa4()): one call carries .fa4a and leaves
# part_a in out/, a later call on the same machine carries .fa4b, joins the halves into out/fa4site and puts a
# sitecustomize.py that calls site.addsitedir on it first on PYTHONPATH (its .pth files must be read).
# Usage, from the repository: bash docs/measured/2026-12-05-cpu-s49-fa4-carry.sh
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
for d in .fa4a .fa4b; do
    grep -qxF "/$d/" .git/info/exclude 2>/dev/null || echo "/$d/" >> .git/info/exclude
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
plat=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
      --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64)
python3 -m pip download -q --no-deps "${plat[@]}" -d "$tmp/whl" flash-attn-4==4.0.0b40 nvidia-cutlass-dsl==4.8.1 \
    nvidia-cutlass-dsl-libs-base==4.8.1 nvidia-cutlass-dsl-libs-core==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1 \
    "apache-tvm-ffi>=0.1.11,<0.2" torch-c-dlpack-ext quack-kernels einops
python3 -m pip install -q --no-deps --no-compile "${plat[@]}" --target "$tmp/fa4site" "$tmp"/whl/*.whl
(cd "$tmp" && tar cf - fa4site | xz -6 -T0 > fa4.tar.xz)
size=$(stat -c %s "$tmp/fa4.tar.xz")
half=$(( (size + 1) / 2 ))
mkdir -p .fa4a .fa4b
head -c "$half" "$tmp/fa4.tar.xz" > .fa4a/part_a
tail -c +$(( half + 1 )) "$tmp/fa4.tar.xz" > .fa4b/part_b
cat .fa4a/part_a .fa4b/part_b | cmp - "$tmp/fa4.tar.xz"
du -sh .fa4a .fa4b
