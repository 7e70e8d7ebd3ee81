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


PROFILES = ROOT / "tests" / "data" / "clusters"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def ray_cluster():
    """One local multi-node Ray cluster for the whole session: a node per (test-profile node, GPU model)."""
    import ray
    from ray.cluster_utils import Cluster

    from cluster.profiles import load_profile
    from farm.raycluster import OBJECT_STORE_BYTES, profile_devices, profile_nodes

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "object_store_memory": OBJECT_STORE_BYTES,
        "metrics_export_port": free_port()})
    for name in ("ci", "lab", "mixed"):
        profile = load_profile(PROFILES / f"{name}.toml")
        for args in profile_nodes(profile, profile_devices(profile)):
            cluster.add_node(**args)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    cluster.metrics_port = cluster.head_node.metrics_export_port   # Prometheus text of the head node
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def pytest_collection_modifyitems(config, items):
    """`gpu` tests need CUDA: without it they are skipped, with the reason."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (run on the GPU machine: pytest -m gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def album(tmp_path_factory):
    path = tmp_path_factory.mktemp("album") / "album.toml"
    from .farm_album import ALBUM

    path.write_text(ALBUM)
    return path
