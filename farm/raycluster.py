"""Ray for the farm: connect to a cluster or start one, and learn its cards (the inventory placement works from).

Every card is advertised to Ray as its own custom resource `farm_gpu_<uuid>` (a node's CPU as `farm_cpu_<node>`),
so an actor asks for exactly the card placement chose — Ray's own accelerator label reads only device 0 and treats
a node's GPUs as interchangeable. Three ways in:
- a running cluster (`--address`, or a `ray.init` already made in this process, as tests do): the inventory comes
  from a `--cluster` profile (virtual cards) or from NVML probes run on every node;
- a cluster profile and no address: a local cluster with one Ray node per (profile node, GPU model) — a mixed host
  becomes one node per model, since Ray treats a node's GPUs as interchangeable — whose cards are virtual (the
  work runs on the CPU);
- neither: a local Ray on this machine, its GPUs from NVML, or its CPU when it has none.
"""
from __future__ import annotations

import os
import re
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path

from cluster.gpus import GpuDevice, cpu_device, probe_nvml
from cluster.profiles import ClusterProfile, load_profile, profile_inventory

from .errors import UserError

OBJECT_STORE_BYTES = 256 << 20


def resource_name(node: str, uuid: str, is_cpu: bool) -> str:
    """The custom Ray resource that stands for one card (or a node's CPU): the only spelling of it."""
    return f"farm_cpu_{node}" if is_cpu else f"farm_gpu_{uuid}"


def card_resource(device: GpuDevice) -> str:
    return resource_name(device.node, device.uuid, device.is_cpu)


@dataclass
class Runtime:
    inventory: list[GpuDevice]
    profile: ClusterProfile | None
    owns_ray: bool
    local_cluster: object = None          # ray.cluster_utils.Cluster when we started one
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """One line for the render's output: where Ray's control service listens, and whether it asks for a token."""
        import ray

        auth = "token authentication on" if os.environ.get("RAY_AUTH_MODE", "").lower() == "token" else \
            "authentication OFF (RAY_AUTH_MODE)"
        kind = "local cluster" if self.owns_ray else "cluster"
        return f"Ray: {kind} at {ray.get_runtime_context().gcs_address}, {auth}"

    def stop(self) -> None:
        import ray

        if self.owns_ray:
            ray.shutdown()
            if self.local_cluster is not None:
                self.local_cluster.shutdown()


def start(address: str | None, profile_path: Path | None) -> Runtime:
    """Connect or start (see the module's docstring), keeping the caller's SIGTERM handler: Ray's C++ failure-signal
    handler would otherwise turn a SIGTERM into a stack dump and an abort, and the render could not stop cleanly."""
    import signal

    handler = signal.getsignal(signal.SIGTERM)
    try:
        return _start(address, profile_path)
    finally:
        if callable(handler) and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, handler)


def _start(address: str | None, profile_path: Path | None) -> Runtime:
    import ray

    ensure_auth_token()
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    profile = load_profile(profile_path) if profile_path else None
    if ray.is_initialized() or address:
        owns = not ray.is_initialized()
        if owns:
            try:
                ray.init(address=address, include_dashboard=False, log_to_driver=False)
            except ConnectionError as exc:   # something answers there, but not a Ray cluster's GCS (or not ours)
                raise UserError(f"--address {address}: {exc}") from None
        inventory = profile_devices(profile) if profile else (probe_cluster() or cluster_cpus())
        check_advertised(inventory)
        return Runtime(inventory, profile, owns)
    if profile is not None:
        return start_profile_cluster(profile)
    return start_local()


# HTTP/2's client connection preface and an empty SETTINGS frame (RFC 9113 §3.4): a gRPC server, as a Ray cluster's
# GCS is, answers with a SETTINGS frame of its own (frame type 4, the header's fourth byte).
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes(3) + b"\x04" + bytes(5)
ADDRESS_TIMEOUT_S = 5.0


def check_address(address: str, timeout: float | None = None) -> None:
    """A HOST:PORT cluster address must answer within `timeout` seconds, and as a Ray cluster's GCS does (Ray itself
    would keep trying for minutes, at a wrong port too: say the dashboard's). `auto` must find a cluster started on
    this machine; `ray://` (Ray Client) and a cluster behind TLS (RAY_USE_TLS) are left to Ray itself."""
    timeout = ADDRESS_TIMEOUT_S if timeout is None else timeout
    if address.startswith("ray://"):
        return
    if address == "auto":
        if not os.environ.get("RAY_ADDRESS") and not Path("/tmp/ray/ray_current_cluster").exists():
            raise UserError("--address auto: no Ray cluster was started on this machine (ray start --head)")
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"--address {address}: expected auto, HOST:PORT or ray://HOST:PORT")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as sock:
            if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
                return
            sock.sendall(H2_PREFACE)
            reply = b""
            while len(reply) < 4 and (part := sock.recv(9 - len(reply))):
                reply += part
    except TimeoutError:
        raise UserError(f"--address {address}: the port takes connections but nothing answered within "
                        f"{timeout:.0f} s: not a Ray cluster's GCS port (Ray's default is 6379)") from None
    except OSError as exc:
        raise UserError(f"--address {address}: no Ray cluster answers there within {timeout:.0f} s "
                        f"({exc.strerror or exc})") from None
    if len(reply) < 4 or reply[3] != 4:
        raise UserError(f"--address {address}: something answers there, but not a Ray cluster's GCS (it speaks "
                        f"gRPC; Ray's default port is 6379, the dashboard's 8265)")


def ensure_auth_token() -> None:
    """Keep Ray's token authentication on: without it every Ray server of a render would run code for anyone who
    can reach this machine. Tests and CI may switch it off with RAY_AUTH_MODE=disabled in their own environment.

    Ray 2.60 turns authentication on for a new `ray.init` cluster by itself, but a cluster started the `ray start`
    way (the local multi-node cluster of a profile) only when a token already exists. So a token is looked for
    where Ray looks (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token) and, when there is none, made as Ray
    itself would (256 random bits, readable by this user only); Ray then switches authentication on in both cases.
    Every node and the driver of a cluster need the same token: give `--address` clusters theirs through those
    variables.
    """
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "disabled":
        return
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return
    path = Path.home() / ".ray" / "auth_token"
    if path.exists():
        return
    import secrets

    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))


def start_local() -> Runtime:
    """This machine alone: its GPUs by NVML (each its own resource), else its CPU as one pseudo-card."""
    import ray

    node = _node_name(socket.gethostname())
    gpus = probe_nvml(node)
    inventory = gpus or [cpu_device(node, os.cpu_count() or 1)]
    resources = {card_resource(d): 1.0 for d in inventory}
    # address="local": always a cluster of our own, never one that a `ray start` (or a killed render) left named in
    # the machine's shared ray_current_cluster file. Ray 2.60 binds its gRPC servers to every interface and has no
    # option to keep them on loopback: token authentication (ensure_auth_token) is what keeps them private.
    ray.init(address="local", num_cpus=max(2, os.cpu_count() or 1), resources=resources, include_dashboard=False,
             object_store_memory=OBJECT_STORE_BYTES, log_to_driver=False, labels={"farm-node": node})
    return Runtime(inventory, None, True)


def start_profile_cluster(profile: ClusterProfile) -> Runtime:
    """A local multi-node Ray cluster shaped like the profile; its cards are virtual (the compute runs on CPU)."""
    import ray
    from ray._private.authentication.authentication_token_setup import maybe_enable_token_auth_if_token_available
    from ray.cluster_utils import Cluster

    # What `ray start --head` does (Ray's own function): with a token on hand and RAY_AUTH_MODE unset, switch token
    # authentication on for this process and the nodes it starts. ensure_auth_token made sure there is a token.
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "object_store_memory": OBJECT_STORE_BYTES})
    inventory = profile_inventory(profile)
    for node_args in profile_nodes(profile, inventory):
        cluster.add_node(**node_args)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    return Runtime(profile_devices(profile), profile, True, cluster)


def profile_devices(profile: ClusterProfile) -> list[GpuDevice]:
    """A profile's virtual cards, plus the CPU of each node that has no GPU."""
    return profile_inventory(profile) + [cpu_device(n.name, n.cpus) for n in profile.nodes if not n.gpus]


def profile_nodes(profile: ClusterProfile, inventory: list[GpuDevice]) -> list[dict]:
    """`Cluster.add_node` arguments: one Ray node per (profile node, GPU model), each card its own resource."""
    out = []
    for node in profile.nodes:
        cards = [d for d in inventory if d.node == node.name]
        models = list(dict.fromkeys(d.name for d in cards)) or [None]
        for i, model in enumerate(models):
            resources = {card_resource(d): 1.0 for d in cards if d.name == model}
            if i == 0:
                resources[f"farm_cpu_{node.name}"] = 1.0
            labels = {"farm-node": node.name, "gpu-model": _label(model or "cpu")}
            out.append({"num_cpus": 1, "resources": resources, "labels": labels,
                        "object_store_memory": 100 << 20})
    return out


def probe_cluster() -> list[GpuDevice]:
    """NVML on every alive node (a task pinned to it), keeping the cards that node advertises as farm resources."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote(num_cpus=0)
    def probe(name: str) -> list[GpuDevice]:
        return probe_nvml(name)

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    refs = [probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(
        _node_name(n.get("Labels", {}).get("farm-node") or n["NodeManagerHostname"])) for n in nodes]
    found = []
    for node, devices in zip(nodes, ray.get(refs)):
        advertised = set(node.get("Resources", {}))
        found += [d for d in devices if card_resource(d) in advertised]
    return found


def cluster_cpus() -> list[GpuDevice]:
    """With no advertised GPU anywhere, each node advertising farm_cpu_<name> offers its CPU."""
    import ray

    out = []
    for node in ray.nodes():
        for name in node.get("Resources", {}):
            if node.get("Alive") and name.startswith("farm_cpu_"):
                out.append(cpu_device(name.removeprefix("farm_cpu_"), int(node["Resources"].get("CPU", 1))))
    if not out:
        raise UserError("the Ray cluster advertises no farm cards: start nodes with the flags `farm inventory` "
                        "prints, or pass --cluster PROFILE.toml")
    return out


def check_advertised(inventory: list[GpuDevice]) -> None:
    import ray

    have = {name for n in ray.nodes() if n.get("Alive") for name in n.get("Resources", {})}
    missing = [card_resource(d) for d in inventory if card_resource(d) not in have]
    if missing:
        raise UserError(f"the Ray cluster does not advertise {', '.join(missing[:3])}"
                        f"{' …' if len(missing) > 3 else ''}: its nodes do not match the cluster profile")


def ray_start_flags(inventory: list[GpuDevice], node: str) -> str:
    """What to add to `ray start` on this host so the farm can pin stages to its cards."""
    import json

    resources = {card_resource(d): 1 for d in inventory}
    return (f"CUDA_DEVICE_ORDER=PCI_BUS_ID ray start --address=HEAD:6379 --resources='{json.dumps(resources)}' "
            f"--labels=farm-node={node}")


def _node_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "-", text)


def _label(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:63]
