"""cluster/workload.py, memory.py, costs.py, calibration.py: shapes, GiB, seconds, and fitting factors."""
import dataclasses
import pathlib

import pytest

from cluster.calibration import Calibration, default_calibration, load_calibration
from cluster.fitting import Measured, write_calibration
from cluster.costs import card_speed, decode_peak, job_seconds, stage_load, stage_timing, step_seconds, track_work
from cluster.gpus import GIB, decodes_on_tensor_cores, device_from_spec, lookup
from cluster.memory import card_memory, peaks, refusal, stage_memory, usable_gib, vendor_single_card
from cluster.workload import STAGES, ModelShape, TrackShape, album_tracks

ROOT = pathlib.Path(__file__).resolve().parents[1]
M = ModelShape.yue2_3b()
REF = TrackShape.reference()


def h200(stage, cal=None):
    return card_speed(device_from_spec(lookup("H200"), "h", 0), stage, M, cal or Calibration())


def test_model_shape_matches_model_md():
    assert M.branch_params == 1_409_408_000                      # 50.336 M per layer per branch x 28
    assert M.embed_params == 378_273_792 and M.aux_params == 4_986_944
    assert (M.branch_params + 2 * M.embed_params) * 2 / GIB == pytest.approx(4.03, abs=0.005)    # AR-only
    mot = 2 * M.branch_params + 2 * M.embed_params + M.aux_params + M.hidden
    assert mot / 1e6 == pytest.approx(3580.35, abs=0.01)
    assert (mot + M.pe_params) * 2 / GIB == pytest.approx(6.76, abs=0.005)
    assert M.kv_bytes_per_token == 112 * 1024
    assert M.vae_decoder_params / 1e6 == pytest.approx(66.37, abs=0.01)
    assert M.vae_decoder_params * 4 / GIB == pytest.approx(0.247, abs=0.001)
    assert M.vae_flop_per_frame * 25 / 1e9 == pytest.approx(57.7, abs=0.05)     # GFLOP per second of audio
    # docs/model.md §6 example: a 180 s song, L_n 4502, L_a ~6000.
    linear = 2 * 4502 * M.branch_params
    assert linear / 1e12 == pytest.approx(12.7, abs=0.05)
    assert (M.velocity_eval_flop(6000, 4502) - linear) / 1e12 == pytest.approx(10.8, abs=0.05)
    assert ModelShape.from_toml(ROOT / "configs/models/yue2-3b.toml") == M
    assert ModelShape.from_toml(ROOT / "configs/models/tiny.toml") == ModelShape.tiny()


def test_track_shapes():
    t = TrackShape.from_audio_seconds(120.0)
    assert t.semantic_tokens == 3000 and t.plan_tokens == round(120 * 4540 / 214.85)
    capped = TrackShape.from_audio_seconds(400.0, model=M)
    assert capped.semantic_tokens == 9000 and capped.plan_tokens == 4096
    assert REF.acoustic_chunks(M) == [(300 + 4540 + 5371 + 1, 5373)]
    long = TrackShape(360, 4096, 9000, prompt_tokens=8000)         # a long prefix splits the acoustic stage
    assert len(long.acoustic_chunks(M)) == 2 and sum(n - 2 for _, n in long.acoustic_chunks(M)) == 9000
    assert album_tracks(12, seed=7) == album_tracks(12, seed=7) != album_tracks(12, seed=8)


def test_stage_memory_loads_only_what_each_stage_needs():
    needs = {s: stage_memory(s, M, [REF]) for s in STAGES}
    assert needs["plan"].weights == pytest.approx(4.03 + 1.75, abs=0.01)   # + the step's folded q/k/v, gate/up
    assert needs["acoustic"].weights == pytest.approx(6.06, abs=0.01)          # 6.76 minus lm_head (0.70)
    assert needs["decode"].weights == pytest.approx(0.247, abs=0.001)
    assert all(n.context == 0.5 for n in needs.values())
    assert needs["semantic"].kv == pytest.approx((4840 + 9000) * 112 * 1024 / GIB)   # static |prefix| + max_tokens
    pk = peaks(M, [REF])
    one, four = card_memory({"semantic": 1}, M, pk), card_memory({"semantic": 4}, M, pk)
    assert four.kv == pytest.approx(4 * one.kv)
    assert card_memory({"decode": 1}, M, pk, core=512).activations < card_memory({"decode": 1}, M, pk).activations
    # a card that decodes on tensor cores also keeps the convolutions' weights split in two FP32 copies
    split = card_memory({"decode": 1}, M, pk, tensor_core_decode=True)
    assert split.weights == pytest.approx(3 * needs["decode"].weights)
    assert decodes_on_tensor_cores(lookup("H200")) and not decodes_on_tensor_cores(lookup("RTX 3050 Laptop"))


def test_shared_process_loads_weights_once():
    pk = peaks(M, [REF])
    everything = dict.fromkeys(STAGES, 1)
    shared = card_memory(everything, M, pk, shared_process=True)
    apart = card_memory(everything, M, pk, shared_process=False)
    assert shared.weights == pytest.approx(6.76 + 1.75 + 0.247, abs=0.01)      # the MoT + pe, the step's copies, VAE
    assert apart.weights == pytest.approx(5.78 + 5.78 + 6.06 + 0.247, abs=0.02)
    assert apart.context == 4 * shared.context
    assert shared.total < 23.0 < apart.total          # why a lone RTX 4090 needs the shared process


def test_refusal_is_a_sentence_with_numbers():
    laptop = device_from_spec(lookup("RTX 3050 Laptop"), "laptop", 0)
    need = stage_memory("acoustic", M, [REF])
    sentence = refusal("acoustic", need, laptop, 2.0)
    assert sentence.startswith(f"acoustic needs {need.total:.2f} GiB with batch 1 (weights 6.06")
    assert sentence.endswith("RTX 3050 Laptop (laptop/0) offers 4.00 GiB after the 2 GiB reserve")
    assert usable_gib(laptop, 2.0) == 4.0 and need.total > 8.0


def test_vendor_peaks_against_published_figures():
    """The published peaks (RTX 4090 full 11.18 / max-context 14.08 GiB, RTX 5060 Ti 10.05 GiB) against the phase
    model of memory.vendor_single_card. See memory.py's docstring for what the two variants mean."""
    max_prefix = M.context - M.semantic_max_tokens
    published = [(REF, None, 11.18), (REF, max_prefix, 14.08), (REF, None, 10.05)]
    guided = dataclasses.replace(REF, cfg_branches=2)
    for track, prefix, gib in published:
        resident = vendor_single_card(M, dataclasses.replace(track, cfg_branches=2), resident=True, semantic_prefix=prefix)
        assert resident.peak == pytest.approx(gib, rel=0.08)                 # within 8 %: -3.7, -2.6, +7.1 %
        offload = vendor_single_card(M, track, semantic_prefix=prefix)
        assert -0.41 <= offload.peak / gib - 1 <= -0.25                       # the offload default under-explains
    assert vendor_single_card(M, guided, resident=True).peak_phase == "semantic"
    assert vendor_single_card(M, REF).peak_phase == "AR restore"


def test_h200_timings_reproduce_the_calibration_sources():
    # Naive probe: batch-1 CUDA-graph decode 301 tok/s at ~5k context; batch 32 gave 4,565 tok/s (model: -8.5 %).
    speed = h200("semantic")
    kv, flop = 5000 * M.kv_bytes_per_token, M.ar_token_flop(5000)
    assert 1 / step_seconds(speed, kv, flop) == pytest.approx(301, rel=0.01)
    assert 32 / step_seconds(speed, 32 * kv, 32 * flop) == pytest.approx(4565, rel=0.10)
    # Acoustic: 75 ms per velocity eval at L_n 5,373 / L_a 9,522, plus the 84 ms prefill, plus the job overhead.
    probe_track = TrackShape(214.85, 3850, 5371)               # semantic prefix 4,150 -> L_a 9,522
    assert probe_track.acoustic_chunks(M) == [(9522, 5373)]
    seconds = job_seconds(h200("acoustic"), track_work(probe_track, "acoustic", M))
    assert seconds == pytest.approx(64 * 0.075 + 0.084 + 0.05, rel=0.02)
    # Decode: on an H200 the default runs on tensor cores (tf32x3): 0.189 s measured (2026-12-05), with the job
    # overhead; in cuDNN FP32 the reference runtime's 1.1 s (tiled at core 1024) + job overhead.
    assert job_seconds(h200("decode"), track_work(REF, "decode", M)) == pytest.approx(0.189, rel=0.02)
    rate, factor = decode_peak(lookup("H200"), "fp32")
    fp32 = track_work(REF, "decode", M).flop / (rate * 1e12 * getattr(Calibration(), factor))
    assert fp32 + Calibration().job_overhead_s == pytest.approx(1.15, rel=0.02)


def test_batching_trades_latency_for_throughput():
    speed = h200("semantic")
    load = stage_load([track_work(t, "semantic", M) for t in album_tracks(64, seed=1)])
    one, many = stage_timing(speed, load, 1), stage_timing(speed, load, 32)
    assert many.card_seconds < one.card_seconds / 4          # the weight read is shared by the batch
    assert many.latency > one.latency                        # each step reads 32 tracks' KV
    assert stage_timing(speed, load, 1).card_seconds == pytest.approx(
        sum(job_seconds(speed, track_work(t, "semantic", M)) for t in album_tracks(64, seed=1)) / 64, rel=0.05)


def test_cards_without_bf16_or_figures_are_refused_with_a_reason():
    from cluster.gpus import GpuDevice
    v100 = GpuDevice("n", 0, "GPU-v", "Tesla V100-SXM2-32GB", 32 * GIB, 900e9, 80, 1530, (7, 0), False, False)
    assert "needs bf16" in card_speed(v100, "acoustic", M, Calibration())
    assert not isinstance(card_speed(v100, "decode", M, Calibration()), str)


def test_write_calibration_recovers_known_factors(tmp_path):
    truth = dataclasses.replace(Calibration(), acoustic_efficiency=0.6, decode_efficiency=0.4,
                                decode_tf32x3_efficiency=0.7, ar_step_overhead_s=1.0e-3,
                                ar_track_step_overhead_s=0.4e-3)
    speed = {s: h200(s, truth) for s in STAGES}
    seconds = {s: job_seconds(speed[s], track_work(REF, s, M)) for s in STAGES}     # decode: tf32x3, the default
    rate, _ = decode_peak(lookup("H200"), "fp32")
    fp32 = track_work(REF, "decode", M).flop / (rate * 1e12 * truth.decode_efficiency) + truth.job_overhead_s
    kv = REF.mean_context("semantic") * M.kv_bytes_per_token
    tps = {b: b / step_seconds(speed["semantic"], b * kv, b * M.ar_token_flop(REF.mean_context("semantic")), b)
           for b in (1, 8, 32)}
    path = tmp_path / "h200.toml"
    fitted = write_calibration(path, Measured("NVIDIA H200", REF, seconds, tps, source="test bench",
                                              decode_seconds={"fp32": fp32, "tf32": 0.01}))
    for name in ("acoustic_efficiency", "decode_efficiency", "decode_tf32x3_efficiency", "ar_step_overhead_s",
                 "ar_track_step_overhead_s"):
        assert getattr(fitted, name) == pytest.approx(getattr(truth, name), rel=1e-6), name
    again = load_calibration(path)
    assert again == fitted and again.gpu == "H200" and again.measured["acoustic_s"] == pytest.approx(seconds["acoustic"])
    # Without batch points the bandwidth factor stays and the step overhead absorbs the rest: the AR stages'
    # predicted seconds then equal the measured ones.
    only_seconds = write_calibration(tmp_path / "b.toml", Measured("H200", REF, seconds))
    assert only_seconds.ar_bandwidth_efficiency == Calibration().ar_bandwidth_efficiency
    assert only_seconds.decode_efficiency == Calibration().decode_efficiency      # no FP32 decode measured
    # a report from before the tf32x3 default: its decode row was cuDNN FP32, and fits that factor only
    older = write_calibration(tmp_path / "d.toml", Measured("H200", REF, {"decode": fp32}, decode_precision="fp32"))
    assert older.decode_efficiency == pytest.approx(0.4, rel=1e-6)
    assert older.decode_tf32x3_efficiency == Calibration().decode_tf32x3_efficiency
    predicted = sum(job_seconds(h200(s, only_seconds), track_work(REF, s, M)) for s in ("plan", "semantic"))
    assert predicted == pytest.approx(seconds["plan"] + seconds["semantic"], rel=1e-9)
    with pytest.raises(ValueError, match="unknown GPU"):
        write_calibration(tmp_path / "c.toml", Measured("NVIDIA Quantum 9000", REF, seconds))


def test_calibration_files_are_checked(tmp_path):
    cal = default_calibration()
    assert cal.gpu == "H200" and 0 < cal.acoustic_efficiency <= 1.5 and cal.ar_step_overhead_s >= 0
    bad = tmp_path / "bad.toml"
    bad.write_text('gpu = "H200"\n[ar]\nbandwith_efficiency = 0.9\n')
    with pytest.raises(ValueError, match="ar.bandwith_efficiency: unknown key"):
        load_calibration(bad)


def test_a_step_without_the_layer_chain_costs_its_saving():
    """The fitted overheads are an H200's with the layer chain; a BF16 step on a card that cannot run it (not
    compute capability 9.0), and a quantised step anywhere, pay the chain's saving on top."""
    cal = dataclasses.replace(Calibration(), chain_step_saving_s=1.6e-4)
    ada = device_from_spec(lookup("RTX 4090"), "a", 0)
    fixed = {(card, fmt): card_speed(device, "semantic", dataclasses.replace(M, ar_format=fmt), cal).step_fixed_s
             for card, device in (("h200", device_from_spec(lookup("H200"), "h", 0)), ("ada", ada))
             for fmt in ("bf16", "fp8")}
    assert fixed["h200", "bf16"] == pytest.approx(cal.ar_step_overhead_s)
    assert fixed["ada", "bf16"] == pytest.approx(cal.ar_step_overhead_s + 1.6e-4)
    for card in ("h200", "ada"):
        assert fixed[card, "fp8"] == pytest.approx(cal.ar_step_overhead_s + cal.fp8_step_overhead_s + 1.6e-4)
    assert load_calibration(ROOT / "configs/calibration/h200.toml").chain_step_saving_s > 0
