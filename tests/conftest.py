"""Shared fixtures: the tiny config, one tiny random checkpoint per test session."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from stages.config import from_toml

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
torch.set_num_threads(1)  # the farm's workers run one thread; equal thread counts give equal bytes


@pytest.fixture(scope="session")
def tiny_cfg():
    return from_toml(ROOT / "configs" / "models" / "tiny.toml")


@pytest.fixture(scope="session")
def tiny_ckpt_dir(tmp_path_factory, tiny_cfg):
    from stages.weights import init_checkpoint

    out = tmp_path_factory.mktemp("tiny-ckpt")
    init_checkpoint(tiny_cfg, out, seed=0)
    return out
