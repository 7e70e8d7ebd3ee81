"""Session s57, on the 2-core CPU box: how long `plan` takes and what it forecasts, after the planner's trial
simulations stopped building reasons and lower bounds and `gpus.lookup` was cached; the flow method's rounds of
simulated one-card moves swept (SIM_ROUNDS). Run: python docs/measured/2026-12-07-cpu-s57-planner-speed.py"""
import dataclasses
import time

from cluster import placement
from cluster.calibration import shipped_calibrations
from cluster.placement import plan
from cluster.profiles import load_profile, profile_inventory
from cluster.roles import PlanOptions
from cluster.workload import TrackShape, album_tracks


def run(profile: str, tracks: list, rounds: int | None = None) -> None:
    prof = load_profile(f"configs/clusters/{profile}.toml")
    opts = PlanOptions.for_profile(prof, calibrations=shipped_calibrations())
    if rounds is not None:
        placement.SIM_ROUNDS = rounds
    start = time.perf_counter()
    p = plan(profile_inventory(prof), tracks, opts)
    took = time.perf_counter() - start
    print(f"{profile:16s} {len(tracks):4d} tracks  rounds {placement.SIM_ROUNDS}  method {p.method:6s} "
          f"forecast {p.forecast_s:8.1f} s  estimate {p.makespan_s:8.1f} s  planned in {took:5.1f} s", flush=True)


shipped = placement.SIM_ROUNDS
reference = [dataclasses.replace(TrackShape.reference(), prompt_tokens=559)] * 12   # as the s56 record
run("h200", reference)
run("h200x2", reference)
run("home-lab", album_tracks(12, seed=0))
run("home-lab-one-node", album_tracks(12, seed=0))
for n in (24, 96, 256):
    for rounds in (2, 3, 4):
        run("rental-fleet-64", album_tracks(n, seed=0), rounds)
placement.SIM_ROUNDS = shipped
