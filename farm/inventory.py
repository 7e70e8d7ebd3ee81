"""`farm inventory`: the cards of this host (NVML) or of a cluster profile, as a table."""
from __future__ import annotations

import socket
from pathlib import Path


def show_inventory(profile_path: Path | None) -> None:
    from rich.console import Console
    from rich.table import Table

    from cluster.gpus import cpu_device, probe_nvml
    from cluster.profiles import load_profile, profile_inventory

    from .raycluster import card_resource, ray_start_flags

    host = socket.gethostname()
    if profile_path:
        profile = load_profile(profile_path)
        devices, title = profile_inventory(profile), f"cluster profile {profile.name} (virtual cards)"
    else:
        devices, title = probe_nvml(host), f"{host} (NVML)"
    table = Table(title=title, title_justify="left")
    for col in ("node", "index", "card", "uuid", "VRAM GiB", "bandwidth GB/s", "SMs", "cc", "bf16", "fp8",
                "bf16 TFLOP/s", "fp32 TFLOP/s", "Ray resource"):
        table.add_column(col)
    for d in devices:
        spec = d.spec()
        table.add_row(d.node, str(d.index), d.name, d.uuid, f"{d.vram_gib:.1f}", f"{spec.bandwidth_gbs:.0f}",
                      str(d.sm_count or "?"), f"{d.compute_capability[0]}.{d.compute_capability[1]}",
                      "yes" if d.bf16 else "no", "yes" if d.fp8 else "no", _rate(spec.bf16_tflops),
                      _rate(spec.fp32_tflops), card_resource(d))
    console = Console(width=200)
    console.print(table)
    if not devices:
        cpu = cpu_device(host, 1)
        console.print(f"No GPU visible (NVML): the farm runs every stage on this CPU ({card_resource(cpu)}).")
    elif not profile_path:
        console.print("To offer these cards to a farm's Ray cluster, start this node with:\n  "
                      + ray_start_flags(devices, host))


def _rate(value) -> str:
    return "?" if value is None else f"{value:.1f}"
