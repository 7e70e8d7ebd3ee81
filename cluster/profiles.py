"""Cluster profiles: TOML files that describe nodes and their (virtual) GPUs by catalogue model.

Responsible for: reading and validating `configs/clusters/*.toml` with errors that name the file and the field,
and turning a profile into an inventory of virtual `GpuDevice`s. Not responsible for: real hardware (gpus.probe_nvml)
or placement.

Schema (every key other than `name` is optional unless marked):

    name = "home lab"                  # required, text
    description = "..."                # text
    reserve_gib = 2.0                  # GiB every card keeps free (default 1.0); PlanOptions.reserve_gib takes it
    forbid_ar_formats = ["fp8"]        # AR weight formats this cluster must not run (workload.AR_FORMAT_BYTES)
    [[nodes]]                          # zero or more
    name = "desk"                      # required, unique; letters, digits, '.', '_', '-'
    cpus = 16                          # required, integer >= 1
    memory_gib = 64                    # host RAM, number > 0
    count = 1                          # fleet shorthand: `count` identical nodes named desk-0, desk-1, ...
    gpus = ["RTX 4090", {model = "H100 SXM", count = 8}]   # catalogue names (or NVML names); may be empty
"""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from .gpus import GpuDevice, cpu_device, device_from_spec, known_models, lookup
from .workload import AR_FORMAT_BYTES

DEFAULT_RESERVE_GIB = 1.0
_TOP_KEYS = {"name", "description", "reserve_gib", "forbid_ar_formats", "nodes"}
_NODE_KEYS = {"name", "cpus", "memory_gib", "count", "gpus"}
_GPU_KEYS = {"model", "count"}
_NODE_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


class ProfileError(ValueError):
    """A cluster profile that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class NodeSpec:
    name: str
    cpus: int
    memory_gib: float | None
    gpus: tuple[str, ...]            # canonical catalogue models, one entry per card, in index order


@dataclass(frozen=True)
class ClusterProfile:
    name: str
    path: str
    description: str
    reserve_gib: float
    nodes: tuple[NodeSpec, ...]
    forbidden_formats: tuple[str, ...] = ()    # AR weight formats the planner may not choose here

    @property
    def gpu_count(self) -> int:
        return sum(len(node.gpus) for node in self.nodes)

    @property
    def cpus(self) -> int:
        return sum(node.cpus for node in self.nodes)

    def describe(self) -> str:
        lines = [f"{self.name}: {len(self.nodes)} node(s), {self.gpu_count} GPU(s), reserve {self.reserve_gib:g} GiB"
                 + (f"; AR formats forbidden: {', '.join(self.forbidden_formats)}" if self.forbidden_formats else "")]
        for node in self.nodes:
            gpus = ", ".join(node.gpus) or "no GPU"
            lines.append(f"  {node.name}: {node.cpus} CPUs; {gpus}")
        return "\n".join(lines)


def load_profile(path: str | Path) -> ClusterProfile:
    """Read and validate one profile; raises ProfileError naming the file and the offending field."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: not valid TOML: {exc}") from exc
    where = str(path)
    _check_keys(where, "", data, _TOP_KEYS)
    name = _text(where, "name", data.get("name"), required=True)
    description = _text(where, "description", data.get("description", ""))
    reserve = _number(where, "reserve_gib", data.get("reserve_gib", DEFAULT_RESERVE_GIB), minimum=0.0)
    forbidden = data.get("forbid_ar_formats", [])
    if not isinstance(forbidden, list) or any(f not in AR_FORMAT_BYTES for f in forbidden):
        raise ProfileError(f"{where}: forbid_ar_formats: expected a list of AR weight formats "
                           f"({', '.join(AR_FORMAT_BYTES)}), got {forbidden!r}")
    raw_nodes = data.get("nodes", [])
    if not isinstance(raw_nodes, list):
        raise ProfileError(f"{where}: nodes: expected an array of tables ([[nodes]]), got {_kind(raw_nodes)}")
    nodes = [node for i, raw in enumerate(raw_nodes) for node in _nodes(where, f"nodes[{i}]", raw)]
    seen: set[str] = set()
    for node in nodes:
        if node.name in seen:
            raise ProfileError(f"{where}: nodes: node name '{node.name}' is used twice")
        seen.add(node.name)
    return ClusterProfile(name, where, description, reserve, tuple(nodes), tuple(forbidden))


def profile_inventory(profile: ClusterProfile) -> list[GpuDevice]:
    """Virtual cards of a profile, node by node, with fake uuids VIRT-<node>-<index>."""
    return [device_from_spec(lookup(model), node.name, i)
            for node in profile.nodes for i, model in enumerate(node.gpus)]


def cpu_inventory(profile: ClusterProfile) -> list[GpuDevice]:
    """Each node's CPU as a pseudo-card (index -1): the planner uses these only when the inventory has no GPU."""
    return [cpu_device(node.name, node.cpus, node.memory_gib or 16.0) for node in profile.nodes]


def _nodes(where: str, field: str, raw) -> list[NodeSpec]:
    if not isinstance(raw, dict):
        raise ProfileError(f"{where}: {field}: expected a table, got {_kind(raw)}")
    _check_keys(where, field, raw, _NODE_KEYS)
    name = _text(where, f"{field}.name", raw.get("name"), required=True)
    if not _NODE_NAME.match(name):
        raise ProfileError(f"{where}: {field}.name: '{name}' may use only letters, digits, '.', '_' and '-'")
    cpus = _integer(where, f"{field}.cpus", raw.get("cpus"), required=True)
    memory = raw.get("memory_gib")
    memory = None if memory is None else _number(where, f"{field}.memory_gib", memory, minimum=1e-9)
    count = _integer(where, f"{field}.count", raw.get("count", 1))
    gpus = tuple(_gpus(where, f"{field}.gpus", raw.get("gpus", [])))
    if count == 1 and "count" not in raw:
        return [NodeSpec(name, cpus, memory, gpus)]
    return [NodeSpec(f"{name}-{i}", cpus, memory, gpus) for i in range(count)]


def _gpus(where: str, field: str, raw) -> list[str]:
    if not isinstance(raw, list):
        raise ProfileError(f"{where}: {field}: expected an array of GPU models, got {_kind(raw)}")
    models: list[str] = []
    for i, entry in enumerate(raw):
        item = f"{field}[{i}]"
        if isinstance(entry, dict):
            _check_keys(where, item, entry, _GPU_KEYS)
            model = _text(where, f"{item}.model", entry.get("model"), required=True)
            count = _integer(where, f"{item}.count", entry.get("count", 1))
        elif isinstance(entry, str):
            model, count = entry, 1
        else:
            raise ProfileError(f"{where}: {item}: expected a model name or {{model = ..., count = ...}}, got {_kind(entry)}")
        spec = lookup(model)
        if spec is None:
            raise ProfileError(f"{where}: {item}: unknown GPU model '{model}'; known models: {', '.join(known_models())}")
        models.extend([spec.model] * count)
    return models


def _check_keys(where: str, field: str, table: dict, allowed: set[str]) -> None:
    for key in table:
        if key not in allowed:
            place = f"{field}: " if field else ""
            raise ProfileError(f"{where}: {place}unknown key '{key}' (allowed: {', '.join(sorted(allowed))})")


def _kind(value) -> str:
    return f"{value!r} ({type(value).__name__})"


def _text(where: str, field: str, value, required: bool = False) -> str:
    if value is None and required:
        raise ProfileError(f"{where}: {field}: required")
    if not isinstance(value, str) or (required and not value.strip()):
        raise ProfileError(f"{where}: {field}: expected non-empty text, got {_kind(value)}")
    return value


def _integer(where: str, field: str, value, required: bool = False) -> int:
    if value is None and required:
        raise ProfileError(f"{where}: {field}: required")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ProfileError(f"{where}: {field}: expected an integer >= 1, got {_kind(value)}")
    return value


def _number(where: str, field: str, value, minimum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
        raise ProfileError(f"{where}: {field}: expected a number >= {minimum:g}, got {_kind(value)}")
    return float(value)
