"""stages.ptxas: every process of a machine gives Triton the same ptxas, so its compile cache is found again."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from stages.ptxas import VARIABLE, bundled_ptxas, pin_ptxas


def _torch_dir(folder, mode: int | None):
    """A stand-in for torch's package folder, with a bin/ptxas of the given file mode (None: no ptxas)."""
    (folder / "bin").mkdir(parents=True)
    if mode is not None:
        (folder / "bin" / "ptxas").write_text("#!/bin/sh\n")
        (folder / "bin" / "ptxas").chmod(mode)
    return folder


def test_torch_s_own_ptxas_is_pinned_when_nothing_is_set(tmp_path, monkeypatch):
    monkeypatch.delenv(VARIABLE, raising=False)
    torch_dir = _torch_dir(tmp_path, 0o755)
    assert pin_ptxas(torch_dir) == str(torch_dir / "bin" / "ptxas") == os.environ[VARIABLE]


def test_a_value_the_user_set_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv(VARIABLE, "/opt/cuda/bin/ptxas")
    assert pin_ptxas(_torch_dir(tmp_path, 0o755)) == "/opt/cuda/bin/ptxas" == os.environ[VARIABLE]


def test_nothing_is_set_without_a_runnable_ptxas_in_torch(tmp_path, monkeypatch):
    monkeypatch.delenv(VARIABLE, raising=False)
    assert pin_ptxas(_torch_dir(tmp_path / "absent", None)) is None
    assert pin_ptxas(_torch_dir(tmp_path / "not-runnable", 0o644)) is None     # Inductor skips such a file too
    assert VARIABLE not in os.environ


def test_importing_the_stages_pins_it_before_anything_compiles():
    """A fresh interpreter: the package's import alone sets the variable to this torch's ptxas (none in a CPU
    build of torch, which ships no ptxas: then nothing is set)."""
    env = {k: v for k, v in os.environ.items() if k != VARIABLE}
    code = "import os, stages; print(os.environ.get('TRITON_PTXAS_PATH'))"
    out = subprocess.run([sys.executable, "-c", code], env={**env, "PYTHONPATH": os.getcwd()}, check=True,
                         capture_output=True, text=True).stdout.strip()
    assert out == str(bundled_ptxas())


_CACHE_CHILD = """
import sys, torch
import stages                                    # pins the ptxas (stages/ptxas.py)
from stages import skinny_gemm
from stages.ar import step_inputs
from stages.compiled import shared

def ours():
    x = torch.randn(2, 256, device="cuda", dtype=torch.bfloat16)
    skinny_gemm.linear(x, torch.randn(512, 256, device="cuda", dtype=torch.bfloat16))

def inductor():      # the AR step's glue, compiled as the engine compiles it
    ids = torch.arange(4, device="cuda")
    shared(step_inputs)(ids, ids, ids > 0, torch.randn(16, 64, device="cuda", dtype=torch.bfloat16),
                        torch.randn(2, 16, 32, device="cuda", dtype=torch.bfloat16))

for step in sys.argv[1:]:
    ours() if step == "ours" else inductor()
torch.cuda.synchronize()
"""


def cache_runs(tmp_path, child: str = _CACHE_CHILD) -> tuple[set, set]:
    """A cold process that compiles our GEMM and then the AR glue, and a warm one that runs the glue first (one
    compile thread: a warm start's path); the Triton cache folders holding the GEMM after each."""
    env = {k: v for k, v in os.environ.items() if k != VARIABLE}
    env.update(TRITON_CACHE_DIR=str(tmp_path / "triton"), TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
               PYTHONPATH=os.getcwd())
    filed = []
    for order, extra in ((["ours", "inductor"], {}), (["inductor", "ours"], {"TORCHINDUCTOR_COMPILE_THREADS": "1"})):
        subprocess.run([sys.executable, "-c", child, *order], env={**env, **extra}, check=True, timeout=300)
        filed.append({p.parent.name for p in (tmp_path / "triton").rglob("skinny_gemm*.json")})
    return filed[0], filed[1]


@pytest.mark.gpu
def test_a_second_process_finds_our_kernels_in_the_compile_cache(tmp_path):
    """The second process finds the GEMM the first compiled. Without the pin, which ptxas version Triton filed our
    kernels under depended on what Inductor had done first in the process (stages/ptxas.py), and a machine's
    second process compiled them again."""
    if bundled_ptxas() is None:
        pytest.skip("this torch ships no ptxas of its own")
    first, second = cache_runs(tmp_path)
    assert first and second == first
