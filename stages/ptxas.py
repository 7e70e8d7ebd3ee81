"""One ptxas for every Triton kernel of a process, so that the next process finds them in the compile cache.

Triton files a compiled kernel under a key that includes the version of the ptxas it would run, and it reads that
version once per process. PyTorch ships a newer ptxas than Triton's own (torch 2.11+cu130: CUDA 13.0's, in
`torch/bin`; Triton 3.6: 12.8's), and Inductor points Triton at it (`TRITON_PTXAS_PATH`) only when it compiles
a kernel in the calling process. On a warm start it does: its graphs come from its cache before its pool of
compile processes is up. On a cold start it does not: the pool compiles them. So the kernels of a machine's first
process were filed under 12.8 and looked for under 13.0 by the next one, which compiled them all again (an H100,
2026-12-05: the AR engine's build 41 s cold, 32 s in the second process, 13 s from the third on).

`pin_ptxas` sets the variable as Inductor would, before anything compiles (the package's `__init__` calls it), so
every process of a machine agrees. A value the user set is left alone.
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

VARIABLE = "TRITON_PTXAS_PATH"


def bundled_ptxas(torch_dir: Path | None = None) -> Path | None:
    """The ptxas shipped inside torch (`torch/bin/ptxas`) if this installation has one, else None. Found without
    importing torch: the package's `__init__` calls this and importing torch is the caller's choice."""
    if torch_dir is None:
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.origin is None:
            return None
        torch_dir = Path(spec.origin).parent
    ptxas = torch_dir / "bin" / "ptxas"
    return ptxas if ptxas.is_file() and os.access(ptxas, os.X_OK) else None


def pin_ptxas(torch_dir: Path | None = None) -> str | None:
    """Point Triton at torch's ptxas unless `TRITON_PTXAS_PATH` is already set; return the value in force."""
    if VARIABLE not in os.environ:
        ptxas = bundled_ptxas(torch_dir)
        if ptxas is not None:
            os.environ[VARIABLE] = str(ptxas)
    return os.environ.get(VARIABLE)
