"""Session s56 (CPU): the planner's choice by the estimate alone (SIM_TRACKS = 0, as before s56) against its choice
by simulation (the near-best by the estimate simulated, the fastest taken), each plan run through the simulator,
on the shipped cluster profiles with their shipped calibrations. Run from the repository root:
    python docs/measured/2026-12-07-cpu-s56-planner-by-simulation.py
"""
import dataclasses
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from cluster import placement                                   # noqa: E402
from cluster.simulate import SimOptions, simulate                # noqa: E402
from cluster.workload import TrackShape, album_tracks            # noqa: E402
from farm.plan_commands import inventory_for, options_for        # noqa: E402

CLUSTERS = pathlib.Path("configs/clusters")


def reference(n):
    return [dataclasses.replace(TrackShape.reference(), title=f"t{i}", prompt_tokens=559) for i in range(n)]


def roles(p):
    return " / ".join("+".join(c.stages) or "unused" for c in p.cards)


CASES = [("h200x2", "12 reference tracks", reference(12)), ("h200x2", "24 reference tracks", reference(24)),
         ("h200x2", "12 seeded", album_tracks(12, seed=0)), ("h200x2", "40 seeded", album_tracks(40, seed=2)),
         ("home-lab", "12 seeded", album_tracks(12, seed=0)), ("home-lab", "40 seeded", album_tracks(40, seed=2)),
         ("home-lab-one-node", "12 seeded", album_tracks(12, seed=0)), ("h200", "12 reference tracks", reference(12)),
         ("rental-fleet-64", "24 seeded", album_tracks(24, seed=0)),
         ("rental-fleet-64", "96 seeded", album_tracks(96, seed=0)),
         ("rental-fleet-64", "256 seeded", album_tracks(256, seed=0))]

print("| profile | album | by the estimate: simulated s (plan s) | by simulation: simulated s (plan s) | ratio | "
      "placement chosen by simulation |")
print("|---|---|---|---|---|---|")
quiet = SimOptions(record_jobs=False)
for name, what, tracks in CASES:
    inventory, profile = inventory_for(CLUSTERS / f"{name}.toml")
    options = options_for(profile)
    row = []
    for sim_tracks in (0, placement.SIM_TRACKS):
        placement.SIM_TRACKS = sim_tracks
        start = time.perf_counter()
        p = placement.plan(inventory, tracks, options)
        took = time.perf_counter() - start
        row.append((simulate(p, inventory, tracks, options, quiet).makespan_s, took, p))
    (old, old_t, _), (new, new_t, p) = row
    print(f"| {name} | {what} | {old:,.1f} ({old_t:.1f}) | {new:,.1f} ({new_t:.1f}) | {new / old:.3f} | "
          f"{p.method}: {roles(p) if len(p.cards) <= 4 else f'{len(p.cards)} cards'} |")
