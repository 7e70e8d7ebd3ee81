"""Hardware knowledge and planning for the yue2-farm: which stage runs on which card, and how long an album takes.

Pure planning: standard library only (NVML's `pynvml` is imported inside `probe_nvml`), no torch, no Ray, and no
import of `stages` or `farm`. The farm calls:

    probe_nvml(node) / load_profile(path) + profile_inventory(profile)   -> list[GpuDevice]
    plan(inventory, tracks, PlanOptions(...))                            -> Plan   (.describe(), .to_dict())
    simulate(plan, inventory, tracks, options)                           -> SimResult (.describe(), .to_dict())
    new_state / start_at / next_dispatch / apply / finish / fail         the dispatch rule the Ray driver executes

Rooms: gpus (catalogue, NVML), profiles (cluster TOML), workload (model and track shapes), memory and costs (GiB and
seconds per stage per card), calibration and fitting (efficiency factors), roles / estimate / placement / reasons /
formats (the planner), dispatch and simulate (running a plan).
"""
from .calibration import Calibration, default_calibration, load_calibration
from .dispatch import (Assign, DispatchState, WorkerSlot, apply, fail, finish, new_state, next_dispatch, start_at,
                       workers_from_plan)
from .fitting import Measured, write_calibration
from .gpus import CATALOGUE, GpuDevice, GpuSpec, cpu_device, lookup, probe_nvml
from .memory import MemoryNeed, card_memory, stage_memory, vendor_single_card
from .placement import exhaustive_plan, plan
from .plans import Plan, Worker
from .profiles import ClusterProfile, ProfileError, cpu_inventory, load_profile, profile_inventory
from .roles import PlanOptions
from .simulate import SimOptions, SimResult, simulate
from .workload import STAGES, ModelShape, TrackShape, album_tracks

__all__ = [
    "Assign", "CATALOGUE", "Calibration", "ClusterProfile", "DispatchState", "GpuDevice", "GpuSpec", "Measured",
    "MemoryNeed", "ModelShape", "Plan", "PlanOptions", "ProfileError", "STAGES", "SimOptions", "SimResult",
    "TrackShape", "Worker", "WorkerSlot", "album_tracks", "apply", "card_memory", "cpu_device", "cpu_inventory",
    "default_calibration", "exhaustive_plan", "fail", "finish", "load_calibration", "load_profile", "lookup", "new_state",
    "next_dispatch", "plan", "probe_nvml", "profile_inventory", "simulate", "stage_memory", "start_at", "vendor_single_card",
    "workers_from_plan", "write_calibration",
]
