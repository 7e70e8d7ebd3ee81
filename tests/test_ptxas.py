"""stages.ptxas: every process of a machine gives Triton the same ptxas, so its compile cache is found again."""
from __future__ import annotations

import os
import subprocess
import sys

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
