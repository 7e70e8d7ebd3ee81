"""What the step's kernels take of an SM, as Triton 3.6 compiles them for sm_90 on a CPU box (2026-12-04, session
s42): shared memory, registers a thread (cuobjdump, shipped with Triton) and, for the split kernel, how many key and
value buffers its page loop keeps (`local_alloc` in the TTGIR). Whether a program of one kernel fits on an SM beside
a program of the kernel before it decides whether programmatic dependent launch can start it early (docs/ar-engine.md,
"Room for the attention beside the chain").
Run from the repository root with Triton 3.6 on the path (`pip install --no-deps --target /tmp/tri36 triton==3.6.0`):
PYTHONPATH=/tmp/tri36:. python docs/measured/2026-12-04-cpu-s42-kernel-resources.py [OLD_KERNELS_FILE]
(OLD_KERNELS_FILE: `git show 90a51ba:stages/_paged_attention_triton.py`, the split kernel before its first page was
read early.)"""
import importlib.util
import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, ".")
from stages import _paged_attention_triton as tree  # noqa: E402


def resources(kernel) -> str:
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        out = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    regs = re.search(r"REG:(\d+)", out).group(1)
    return f"shared {kernel.metadata.shared} B, {regs} registers"


def split(module, stages: int):
    names = ["QKV", "QW", "COS", "SIN", "K", "V", "BT", "LENS", "PART", "LSE", "s_r", "scs_r", "sk_p", "sk_h", "sk_t",
             "sbt_r", "sp_r", "sp_h", "sp_s", "sl_r", "sl_h", "qk_scale", "eps"]
    types = ["*bf16"] * 6 + ["*i32", "*i32", "*fp32", "*fp32"] + ["i32"] * 11 + ["fp32", "fp32"]
    sig = dict(zip(names, types))
    const = dict(HEADS=16, KV=8, GROUP_PAD=16, D=128, PAGE=64, IEEE=False, PROGRAMS=16, STAGES=stages, PDL=True,
                 FP8=False)
    sig.update({c: "constexpr" for c in const})
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(21)}     # the strides, as the JIT specialises them
    return triton.compile(ASTSource(module.split_kv_attention, sig, const, attrs), target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": 4, "launch_pdl": True})


def main() -> None:
    kernels = {"tree": tree}
    if len(sys.argv) > 1:
        spec = importlib.util.spec_from_file_location("old_pat", sys.argv[1])
        old = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(old)
        kernels["90a51ba"] = old
    for name, module in kernels.items():
        for stages in (2, 4, 6, 8, 10):
            k = split(module, stages)
            buffers = re.findall(r"local_alloc : \(\) -> !ttg\.memdesc<(\d+)x64x128xbf16", k.asm["ttgir"])
            print(f"split kernel ({name}), STAGES {stages}: {resources(k)}; key/value buffers {buffers[:1] or ['1?']}",
                  flush=True)


if __name__ == "__main__":
    main()
