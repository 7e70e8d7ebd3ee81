"""Session s57 (CPU): the planner's forecast and its steady-state estimate on the shipped profiles, before and after the
estimate shared the first AR wave between cards (cluster/estimate.py `_first_wave`). Run from the repository root on
each tree: python docs/measured/2026-12-07-cpu-s57-first-wave-cases.py"""
import dataclasses, pathlib, time
from cluster import placement
from cluster.workload import TrackShape, album_tracks
from farm.plan_commands import inventory_for, options_for
C = pathlib.Path("configs/clusters")
ref = lambda n: [dataclasses.replace(TrackShape.reference(), title=f"t{i}", prompt_tokens=559) for i in range(n)]
CASES = [("h200x2", "12 ref", ref(12)), ("h200x2", "24 ref", ref(24)), ("h200x2", "12 seeded", album_tracks(12, seed=0)),
         ("h200x2", "40 seeded", album_tracks(40, seed=2)), ("home-lab", "12 seeded", album_tracks(12, seed=0)),
         ("home-lab", "24 seeded", album_tracks(24, seed=1)), ("home-lab", "40 seeded", album_tracks(40, seed=2)),
         ("home-lab-one-node", "12 seeded", album_tracks(12, seed=0)), ("h200", "12 ref", ref(12)),
         ("h200", "40 seeded", album_tracks(40, seed=2)),
         ("rental-fleet-64", "24 seeded", album_tracks(24, seed=0)), ("rental-fleet-64", "96 seeded", album_tracks(96, seed=0)),
         ("rental-fleet-64", "256 seeded", album_tracks(256, seed=0))]
for name, what, tracks in CASES:
    inv, prof = inventory_for(C / f"{name}.toml")
    t = time.perf_counter(); p = placement.plan(inv, tracks, options_for(prof)); dt = time.perf_counter() - t
    print(f"{name:18s} {what:11s} forecast {p.forecast_s:8.1f}  estimate {p.makespan_s:8.1f}  ({dt:4.1f} s)", flush=True)
