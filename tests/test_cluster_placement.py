"""cluster/placement.py (with roles.py and estimate.py): where each stage runs, and why."""
import dataclasses
import itertools
import json
import math
import pathlib
import time

import pytest

from cluster.costs import card_speed
from cluster.gpus import GpuDevice, device_from_spec, lookup
from cluster.estimate import _card_rows
from cluster.lp import maximize
from cluster import placement
from cluster.placement import exhaustive_plan, plan
from cluster.profiles import cpu_inventory, load_profile, profile_inventory
from cluster.roles import PlanOptions
from cluster.simulate import simulate
from cluster.workload import AR_STAGES, STAGES, ModelShape, TrackShape, album_tracks

CLUSTERS = pathlib.Path(__file__).resolve().parents[1] / "configs" / "clusters"


def profile_plan(name: str, tracks: int, **options):
    profile = load_profile(CLUSTERS / f"{name}.toml")
    opts = PlanOptions.for_profile(profile, **options)
    inventory = profile_inventory(profile) + cpu_inventory(profile)
    return plan(inventory, album_tracks(tracks, seed=1), opts), inventory, opts


def cards(*models: str) -> list[GpuDevice]:
    return [device_from_spec(lookup(m), f"n{i}", 0) for i, m in enumerate(models)]


def check_invariants(p, inventory, opts):
    """Every card within its memory budget; each card's shares add up to at most its whole time."""
    budget = {d.key: d.vram_gib - opts.reserve_gib for d in inventory if not d.is_cpu}
    for card in p.cards:
        if card.stages and card.card in budget:
            assert card.memory_gib <= budget[card.card] + 1e-9
    devices = {d.key: d for d in inventory}
    for key in {w.card for w in p.workers}:
        mine = [w for w in p.workers if w.card == key]
        kinds = {w.stage in AR_STAGES for w in mine}
        if p.shared_process and len(kinds) == 2 and not devices[key].is_cpu:   # AR beside acoustic/decode
            ar = sum(w.share for w in mine if w.stage in AR_STAGES)
            other = sum(w.share for w in mine if w.stage not in AR_STAGES)
            for row in _card_rows(opts.calibration_for(devices[key]).overlap):
                assert ar * row("plan") + other * row("acoustic") <= 1 + 1e-9
        else:
            assert sum(w.share for w in mine) <= 1 + 1e-9
    assert all(w.batch <= opts.max_batch for w in p.workers)
    json.dumps(p.to_dict())
    assert "Reasons:" in p.describe()


def test_lp_solver():
    value, x = maximize([1, 1], [[1, 2], [3, 1]], [4, 6])
    assert value == pytest.approx(2.8) and x == pytest.approx([1.6, 1.2])
    with pytest.raises(ValueError):
        maximize([1], [[-1]], [1])


def test_lone_laptop_runs_decode_and_says_why_not_the_rest():
    p, inventory, opts = profile_plan("laptop-3050", 12)
    assert p.makespan_s is None and not p.runnable
    assert p.unrunnable == ("plan", "semantic", "acoustic")
    assert p.cards_for("decode") == ("laptop/0",)
    laptop = inventory[0]
    for stage in p.unrunnable:
        (refused,) = [r for r in p.refusals if r.stage == stage]
        assert f"{stage} needs " in refused.reason and "GiB with batch 1" in refused.reason
        assert refused.reason.endswith("RTX 3050 Laptop (laptop/0) offers 4.00 GiB after the 2 GiB reserve")
        needed = float(refused.reason.split(" needs ")[1].split(" GiB")[0])
        assert needed > 4.0
        # Memory, not speed, is the disqualifier: the card has figures for the stage.
        assert not isinstance(card_speed(laptop, stage, opts.model, opts.calibration), str)
    assert "cannot run" in p.describe()
    check_invariants(p, inventory, opts)


def test_home_lab_places_each_stage_on_the_card_that_suits_it():
    turns = dataclasses.replace(PlanOptions().calibration, overlap_ar_slowdown=2.0, overlap_other_slowdown=2.0)   # no gain from running side by side
    p, inventory, opts = profile_plan("home-lab", 24, calibration=turns)
    assert p.runnable and p.makespan_s > p.one_track_s > 0
    assert "laptop/0" in p.cards_for("decode")                       # the small card decodes
    side_by_side, _, _ = profile_plan("home-lab", 24)
    assert side_by_side.makespan_s <= p.makespan_s                   # overlap only ever helps the estimate
    acoustic = max(p.workers_for("acoustic"), key=lambda w: w.share * 1 / w.card_seconds)
    assert acoustic.card == "workstation/0"                          # most compute does most flow matching
    assert "workstation/0" in p.cards_for("plan")                    # most bandwidth decodes tokens
    assert p.bottleneck in STAGES and p.method == "exact"
    check_invariants(p, inventory, opts)


def test_overlap_rows_are_the_hull_of_turns_and_running_both():
    assert [row("plan") for row in _card_rows(None)] == [1.0]
    assert len(_card_rows((2.0, 2.0))) == 1 and len(_card_rows((5.0, 1.3))) == 1   # p + q <= 1: taking turns
    rows = _card_rows((5.0, 1.08))
    for a, c in ((1, 0), (0, 1), (1 / 5.0, 1 / 1.08)):             # the hull's corners are feasible ...
        assert all(a * r("semantic") + c * r("decode") <= 1 + 1e-12 for r in rows)
    assert any(0.3 * r("plan") + 0.9 * r("acoustic") > 1 for r in rows)   # ... beyond them is not


def test_one_node_with_two_models_uses_both_cards():
    turns = dataclasses.replace(PlanOptions().calibration, overlap_ar_slowdown=2.0, overlap_other_slowdown=2.0)
    p, inventory, opts = profile_plan("home-lab-one-node", 12, calibration=turns)
    assert p.runnable
    assert p.cards_for("decode") == ("desk/1",)
    assert {w.stage for w in p.workers if w.card == "desk/0"} == {"plan", "semantic", "acoustic"}
    check_invariants(p, inventory, opts)


def test_one_h200_hosts_all_four_and_two_share_the_work():
    one, inventory, opts = profile_plan("h200", 12)
    assert {w.stage for w in one.workers} == set(STAGES) and {w.card for w in one.workers} == {"h200/0"}
    check_invariants(one, inventory, opts)
    two, inventory, opts = profile_plan("h200x2", 12)
    assert {w.card for w in two.workers} == {"h200x2/0", "h200x2/1"}
    assert two.makespan_s < one.makespan_s
    check_invariants(two, inventory, opts)


def test_the_exact_search_simulates_the_near_best_and_takes_the_fastest(monkeypatch):
    """On two H200s the estimate gives placements of 12 reference tracks nearly the same makespan, since it does not
    see how a burst of tracks splits between AR cards; the simulator (the farm's own dispatch rule) shows that all
    four stages on both cards, each AR engine taking half the tracks, is far ahead. The estimate alone (no
    simulation: SIM_TRACKS 0) keeps a plan the simulator puts well behind."""
    profile = load_profile(CLUSTERS / "h200x2.toml")
    opts, inventory = PlanOptions.for_profile(profile), profile_inventory(profile)
    tracks = [dataclasses.replace(TrackShape.reference(), title=f"t{i}") for i in range(12)]
    chosen = plan(inventory, tracks, opts)
    monkeypatch.setattr(placement, "SIM_TRACKS", 0)
    by_estimate = plan(inventory, tracks, opts)
    assert {c.stages for c in chosen.cards} == {tuple(STAGES)} != {c.stages for c in by_estimate.cards}
    assert any(r.startswith("simulated the") for r in chosen.reasons)
    assert not any(r.startswith("simulated the") for r in by_estimate.reasons)
    assert chosen.makespan_s <= (1 + placement.SIM_BAND) * by_estimate.makespan_s
    chosen_s, by_estimate_s = (simulate(p, inventory, tracks, opts).makespan_s for p in (chosen, by_estimate))
    assert chosen_s < 0.9 * by_estimate_s
    # the plan carries its forecast and says it first; the estimate alone stands where nothing was simulated
    assert chosen.forecast_s == chosen.expected_s == chosen_s and by_estimate.forecast_s is None
    assert f"makespan {chosen_s:,.1f} s (simulated; steady-state estimate {chosen.makespan_s:,.1f} s)" \
        in chosen.describe().splitlines()[0]
    assert by_estimate.expected_s == by_estimate.makespan_s
    check_invariants(chosen, inventory, opts)


def test_the_estimate_shares_the_first_ar_wave_between_cards():
    """Two H200s, every stage on both, 12 reference tracks: the dispatch gives each AR engine six of the burst, so
    the estimate's first AR wave is one card's six-track wave, not twelve tracks on one card. The estimate then lies
    within 5 % of the simulator's forecast (it was 19 % above it). A burst split between a fast and a slow card keeps
    the fast card's whole wave where that is shorter (the slow card's share can only delay its own tracks)."""
    profile = load_profile(CLUSTERS / "h200x2.toml")
    opts, inventory = PlanOptions.for_profile(profile), profile_inventory(profile)
    tracks = [dataclasses.replace(TrackShape.reference(), title=f"t{i}") for i in range(12)]
    problem = placement._Problem(inventory, tracks, opts)
    r = next(r for r, role in enumerate(problem.classes[0].roles) if role.stages == tuple(STAGES))
    role, est = problem.classes[0].roles[r], problem.evaluate(((0, r, 2),))
    for s in AR_STAGES:
        assert est.latency[s] == role.wave_latency(s, 6) < 0.8 * role.wave_latency(s, 12)
        assert role.wave_latency(s, 12) == role.timing(s).latency
    assert est.latency["acoustic"] == role.timing("acoustic").latency
    chosen = plan(inventory, tracks, opts)
    assert {c.stages for c in chosen.cards} == {tuple(STAGES)}
    assert abs(chosen.makespan_s / chosen.forecast_s - 1) < 0.05
    for pair, slow_share_longer in ((("H200", "RTX 4090"), True), (("H200", "H100 SXM"), False)):
        mixed = placement._Problem(cards(*pair), tracks, PlanOptions())
        fast, slow = (next(role for role in cls.roles if role.stages == ("plan",)) for cls in mixed.classes)
        rate = sum(1 / role.timing("plan").card_seconds for role in (fast, slow))
        share = {role: math.ceil(12 / (rate * role.timing("plan").card_seconds)) for role in (fast, slow)}
        shared = max(role.wave_latency("plan", share[role]) for role in (fast, slow))
        assert (shared > fast.timing("plan").latency) == slow_share_longer, pair
        assert mixed.evaluate._first_wave("plan", [fast, slow], [1, 1]) == min(shared, fast.timing("plan").latency)
        assert mixed.evaluate._first_wave("plan", [fast], [1]) == fast.timing("plan").latency


def test_cpu_fallback_puts_every_stage_on_the_cpu():
    tiny = [TrackShape(64 / 25, 32, 64, prompt_tokens=40) for _ in range(8)]
    profile = load_profile(CLUSTERS / "cpu.toml")
    opts = PlanOptions.for_profile(profile, model=ModelShape.tiny())
    p = plan(profile_inventory(profile) + cpu_inventory(profile), tiny, opts)
    assert p.method == "cpu" and p.runnable
    assert {w.card for w in p.workers} == {"local/cpu"} and {w.stage for w in p.workers} == set(STAGES)
    bare = plan([], tiny, PlanOptions(model=ModelShape.tiny()))
    assert {w.card for w in bare.workers} == {"local/cpu"}


def test_an_album_whose_scores_are_all_given_plans_without_a_plan_stage_load():
    """No track makes plan tokens (every score given, or one track re-rendered from its edit): the plan stage costs
    nothing, and the planner must not divide by its zero time."""
    given = [TrackShape(180.0, 0, 4500, prompt_tokens=600) for _ in range(3)]
    p, inventory, opts = profile_plan("h200", 3)
    alone = plan(inventory, given, opts)
    assert alone.runnable and alone.makespan_s < p.makespan_s
    assert {w.stage for w in alone.workers} >= {"semantic", "acoustic", "decode"}


def test_a_lone_4090_needs_one_process_per_card():
    """All four stages at batch 1: 12.2 GiB in one process, 21.8 GiB as four (4 x weights-and-context)."""
    shared = plan(cards("RTX 4090"), album_tracks(4), PlanOptions(reserve_gib=2.5))
    assert shared.runnable and len(shared.workers) == 4
    apart = plan(cards("RTX 4090"), album_tracks(4), PlanOptions(shared_process=False, reserve_gib=2.5))
    assert not apart.runnable and apart.makespan_s is None
    assert any("next to the stages" in s.note for s in apart.stages if not s.runnable)


def test_batches_follow_the_options_and_the_album():
    p = plan(cards("H200"), album_tracks(5))
    assert {w.batch for w in p.workers_for("plan")} == {5}            # no more slots than tracks
    small = plan(cards("H200"), album_tracks(40), PlanOptions(max_batch=8))
    assert {w.batch for w in small.workers_for("semantic")} == {8}
    with pytest.raises(ValueError):
        plan(cards("H200"), [])


MODELS = ["RTX 3050 Laptop", "RTX 4090", "H200"]


def generated_cases():
    for size in range(1, 5):
        for combo in itertools.combinations_with_replacement(MODELS, size):
            for tracks in ((1, 6) if size < 4 else (6,)):
                yield combo, tracks


@pytest.mark.slow      # every small cluster, searched exhaustively
def test_planner_matches_exhaustive_search_on_every_small_cluster():
    """Every multiset of <= 4 cards from MODELS (4-card sets at one album size, to keep the test fast)."""
    checked = 0
    for combo, tracks in generated_cases():
        inventory, workload = cards(*combo), album_tracks(tracks, seed=len(combo))
        fast, brute = plan(inventory, workload), exhaustive_plan(inventory, workload)
        assert fast.method == "exact" and brute.method == "exhaustive"
        if brute.makespan_s is None:
            assert fast.makespan_s is None and fast.unrunnable == brute.unrunnable, combo
        else:
            assert fast.makespan_s == pytest.approx(brute.makespan_s, rel=1e-9), (combo, tracks)
        checked += 1
    assert checked == 2 * 3 + 2 * 6 + 2 * 10 + 15


def test_flow_method_is_close_to_exact_on_a_mid_sized_cluster():
    inventory = cards("RTX 3050 Laptop", "RTX 4090", "RTX 4090", "L40S", "L40S")     # 37,000 assignments
    workload = album_tracks(30, seed=5)
    exact = plan(inventory, workload)
    flow = plan(inventory, workload, PlanOptions(exact_limit=0))
    assert exact.method == "exact" and flow.method == "flow"
    # both choose by simulation in the end: exact among the estimate's near-best (its first SIM_CANDIDATES), flow
    # one card at a time from its own choice, which may land on one the exact search did not simulate
    exact_s, flow_s = (simulate(p, inventory, workload).makespan_s for p in (exact, flow))
    assert exact_s / 1.25 <= flow_s <= 1.25 * exact_s
    assert any(r.startswith("simulated ") for r in flow.reasons)


def test_a_thousand_cards_plan_in_seconds():
    mix = [("RTX 4090", 250), ("L40S", 250), ("A100 80GB", 200), ("H100 SXM", 200), ("H200", 100)]
    inventory = [device_from_spec(lookup(m), f"{m.replace(' ', '')}-{i // 8}", i % 8) for m, n in mix for i in range(n)]
    start = time.perf_counter()
    p = plan(inventory, album_tracks(1000, seed=2))
    assert time.perf_counter() - start < 30
    assert p.method == "flow" and p.runnable and set(STAGES) == {w.stage for w in p.workers}
    assert any("flow: an LP" in r for r in p.reasons)
    check_invariants(p, inventory, PlanOptions())


def test_fp8_ar_weights_are_chosen_on_a_bandwidth_poor_card_not_on_an_h200():
    """With bf16 and fp8 allowed, a 5060 Ti (448 GB/s) runs FP8 AR weights (its AR stages are bound by bytes) and an
    H200 keeps BF16: there the FP8 step's extra launches (calibration) cost what its bytes save. One format for the
    whole album, said in the reasons with both makespans."""
    options = PlanOptions(ar_formats=("bf16", "fp8"))
    tracks = album_tracks(4, seed=0)
    poor = plan([device_from_spec(lookup("RTX 5060 Ti"), "desk", 0)], tracks, options)
    rich = plan([device_from_spec(lookup("H200"), "dc", 0)], tracks, options)
    assert poor.ar_format == "fp8" and rich.ar_format == "bf16"
    only = {f: plan([device_from_spec(lookup(g), "n", 0)], tracks, PlanOptions(ar_formats=(f,)))
            for g, f in (("RTX 5060 Ti", "bf16"), ("RTX 5060 Ti", "fp8"))}
    assert poor.expected_s == only["fp8"].expected_s < 0.95 * only["bf16"].expected_s
    assert "AR weights fp8 on every AR card" in poor.reasons[-1] and "in bf16" in poor.reasons[-1]
    assert "must be 5% faster" in rich.reasons[-1] and "AR weights bf16" in rich.describe()
    assert "AR weights fp8, KV cache bf16" in poor.describe()


def test_nvfp4_is_chosen_on_a_bandwidth_poor_card_when_allowed():
    """All three formats allowed: a 5060 Ti (448 GB/s) runs NVFP4 (fewest bytes), and a profile forbidding it falls
    back to FP8 there."""
    tracks = album_tracks(4, seed=0)
    card = [device_from_spec(lookup("RTX 5060 Ti"), "desk", 0)]
    chosen = plan(card, tracks, PlanOptions(ar_formats=("bf16", "fp8", "nvfp4")))
    assert chosen.ar_format == "nvfp4" and "AR weights nvfp4 on every AR card" in chosen.reasons[-1]
    only = {f: plan(card, tracks, PlanOptions(ar_formats=(f,))).expected_s for f in ("bf16", "fp8", "nvfp4")}
    assert only["nvfp4"] < only["fp8"] < only["bf16"]
    without = plan(card, tracks, PlanOptions(ar_formats=("bf16", "fp8", "nvfp4"), forbidden_formats=("nvfp4",)))
    assert without.ar_format == "fp8" and "profile forbids nvfp4" in without.reasons[-1]


def test_the_kv_cache_is_chosen_like_the_weights_where_it_pays():
    """`kv_formats` lets the plan choose the KV cache the same way as the weights (5 % on the forecast): with the
    shipped calibrations an H100, where an FP8 KV byte costs 1.34 BF16 bytes' time, takes the FP8 cache for 12
    tracks; an H200, where it costs 1.65, keeps BF16. The reasons name both forecasts."""
    from cluster.calibration import shipped_calibrations

    tracks = album_tracks(12, seed=0)
    both = PlanOptions(calibrations=shipped_calibrations(), kv_formats=("bf16", "fp8"))
    chosen = {g: plan(cards(g), tracks, both) for g in ("H100 SXM", "H200")}
    alone = {(g, kv): plan(cards(g), tracks, dataclasses.replace(both, kv_formats=(), model=ModelShape.yue2_3b()
                                                                 .with_formats(kv_format=kv))).expected_s
             for g in ("H100 SXM", "H200") for kv in ("bf16", "fp8")}
    assert chosen["H100 SXM"].kv_format == "fp8" and chosen["H200"].kv_format == "bf16"
    assert chosen["H100 SXM"].expected_s == alone[("H100 SXM", "fp8")] < 0.95 * alone[("H100 SXM", "bf16")]
    assert 0.95 * alone[("H200", "bf16")] <= alone[("H200", "fp8")] < alone[("H200", "bf16")]
    why = chosen["H100 SXM"].reasons[-1]
    assert "(KV cache fp8)" in why and "in bf16 with bf16 KV" in why
    assert "another pair must be 5% faster" in chosen["H200"].reasons[-1]
    assert "KV cache fp8" in chosen["H100 SXM"].describe().splitlines()[1]


def test_a_profile_forbids_a_format(tmp_path):
    text = ('name = "desk"\nforbid_ar_formats = ["fp8"]\n[[nodes]]\nname = "desk"\ncpus = 8\n'
            'gpus = ["RTX 5060 Ti"]\n')
    (tmp_path / "desk.toml").write_text(text)
    profile = load_profile(tmp_path / "desk.toml")
    options = PlanOptions.for_profile(profile, ar_formats=("bf16", "fp8"))
    chosen = plan(profile_inventory(profile), album_tracks(4, seed=0), options)
    assert chosen.ar_format == "bf16" and "profile forbids fp8" in chosen.reasons[-1]
    with pytest.raises(ValueError, match="no format is left"):
        plan(profile_inventory(profile), album_tracks(4, seed=0), dataclasses.replace(options, ar_formats=("fp8",)))
    (tmp_path / "bad.toml").write_text(text.replace('["fp8"]', '["int3"]'))
    with pytest.raises(Exception, match="forbid_ar_formats"):
        load_profile(tmp_path / "bad.toml")


def test_formats_change_the_bytes_the_models_count():
    """FP8 weights: the step reads 2.17 GB instead of 3.58 (the lm_head stays BF16), NVFP4 1.55 GB (half a byte per
    value, an e4m3 scale per 16), and the card keeps quantised copies instead of folded ones; an FP8 cache halves the
    AR engines' KV but not the acoustic stage's prefix K/V."""
    from cluster.memory import group_bytes

    bf16, fp8 = ModelShape.yue2_3b(), ModelShape.yue2_3b().with_formats("fp8", "fp8")
    nvfp4 = ModelShape.yue2_3b().with_formats("nvfp4")
    assert round(bf16.ar_step_weight_bytes / 1e9, 2) == 3.58 and round(fp8.ar_step_weight_bytes / 1e9, 2) == 2.17
    assert round(nvfp4.ar_step_weight_bytes / 1e9, 2) == 1.55
    # the lm_head (0.76 GB) and the norms are the same in every format; the matrices are 2 : 1 : 0.5625 (+ scales)
    matrices = {f: m.ar_step_matrix_bytes for f, m in (("bf16", bf16), ("fp8", fp8), ("nvfp4", nvfp4))}
    assert abs(matrices["nvfp4"] / matrices["bf16"] - 0.5625 / 2) < 0.002
    assert fp8.ar_kv_bytes_per_token * 2 == bf16.ar_kv_bytes_per_token == fp8.kv_bytes_per_token == 112 * 1024
    assert round(group_bytes(bf16, "ar_step") / 1e9, 2) == 1.88 and round(group_bytes(fp8, "ar_step") / 1e9, 2) == 1.41
    assert round(group_bytes(nvfp4, "ar_step") / 1e9, 2) == 0.80
    with pytest.raises(ValueError, match="unknown AR weight format"):
        bf16.with_formats("int3")


def test_farm_plan_advises_a_format_and_takes_the_albums(tmp_path):
    """`farm plan --ar-format auto` lets the planner pick for these cards; without the flag the album's ar_format
    and kv_cache are planned for (a render runs the format it is given: the songs depend on it)."""
    from typer.testing import CliRunner

    from farm.cli import app

    lab = str(CLUSTERS / "home-lab.toml")
    one_node = str(CLUSTERS / "home-lab-one-node.toml")   # a 4090 and a 3050: the AR work is bound by bytes
    auto = CliRunner().invoke(app, ["plan", "--cluster", one_node, "--tracks", "12", "--ar-format", "auto"])
    assert auto.exit_code == 0, auto.output
    assert "AR weights nvfp4 on every AR card" in auto.output and "in bf16" in auto.output
    spec = tmp_path / "a.toml"
    spec.write_text('title = "T"\nar_format = "fp8"\nkv_cache = "fp8"\n[[tracks]]\ntitle = "One"\nlyrics = "la"\n'
                    'style = "pop"\n')
    given = CliRunner().invoke(app, ["plan", "--cluster", lab, "--album", str(spec), "--output", "json"])
    assert given.exit_code == 0, given.output
    data = json.loads(given.output)
    assert data["ar_format"] == "fp8" and data["kv_format"] == "fp8"
    kv = CliRunner().invoke(app, ["plan", "--cluster", one_node, "--tracks", "12", "--kv-cache", "auto"])
    assert kv.exit_code == 0, kv.output
    assert "AR weights bf16 on every AR card (KV cache fp8)" in kv.output and "in bf16 with bf16 KV" in kv.output
