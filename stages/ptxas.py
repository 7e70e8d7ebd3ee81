"""One ptxas for every Triton kernel of a process, so that the next process finds them in the compile cache.

Triton files a compiled kernel under a key that includes the version of the ptxas it would run, a version it
reads once per process, the first time it needs a key. PyTorch ships a newer ptxas than Triton's own (torch
2.11+cu130: CUDA 13.0's, in `torch/bin`; Triton 3.6: 12.8's), and Inductor points Triton at it
(`TRITON_PTXAS_PATH`) only on some of its paths. On a machine's first start Inductor compiles the AR step's glue,
and the cache keys it computes on the way read Triton's own version first: our kernels went under 12.8. On the
next start it loads that glue from its cache through the path that sets the variable before anything reads the
version: our kernels were looked for under 13.0, missed, and were all compiled again; only the third start found
them (an H100, 2026-12-05: a worker's parts 46.8, 32.0 and 16.5 s on empty caches, then warm twice; with the pin
38.3, 14.4 and 15.4 s; docs/benchmarks.md, twenty-second session).

`pin_ptxas` sets the variable as Inductor would, before anything compiles (the package's `__init__` calls it), so
every process of a machine agrees. Our kernels run as fast from either ptxas (measured on the same H100). A value
the user set is left alone.
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
