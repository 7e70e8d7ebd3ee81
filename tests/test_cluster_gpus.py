"""cluster/gpus.py and cluster/profiles.py: the catalogue, NVML name matching, device facts, cluster profiles."""
import pathlib

import pytest

from cluster.gpus import CATALOGUE, SM_RATES, GpuDevice, cpu_device, device_from_spec, lookup, probe_nvml
from cluster.profiles import ProfileError, cpu_inventory, load_profile, profile_inventory

CLUSTERS = pathlib.Path(__file__).resolve().parents[1] / "configs" / "clusters"


@pytest.mark.parametrize("nvml_name, model", [
    ("NVIDIA GeForce RTX 4090", "RTX 4090"),
    ("NVIDIA H200", "H200"),
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTX PRO 6000 Blackwell"),
    ("NVIDIA GeForce RTX 3050 Laptop GPU", "RTX 3050 Laptop"),
    ("NVIDIA GeForce RTX 3050 6GB Laptop GPU", "RTX 3050 Laptop"),
    ("NVIDIA A100-SXM4-80GB", "A100 80GB"),
    ("NVIDIA A100 80GB PCIe", "A100 80GB"),
    ("NVIDIA A100-PCIE-40GB", "A100 40GB"),
    ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA L4", "L4"),
    ("NVIDIA L40S", "L40S"),
    ("NVIDIA GeForce RTX 3060", "RTX 3060"),
    ("NVIDIA GeForce RTX 3090", "RTX 3090"),
    ("NVIDIA GeForce RTX 5060 Ti", "RTX 5060 Ti"),
    ("NVIDIA GeForce RTX 5090", "RTX 5090"),
    ("NVIDIA GB10", "DGX Spark"),
    ("nvidia geforce rtx 4090", "RTX 4090"),          # case and spacing do not matter
])
def test_lookup_matches_nvml_names(nvml_name, model):
    assert lookup(nvml_name).model == model


@pytest.mark.parametrize("nvml_name", [
    "NVIDIA GeForce RTX 4090 D",                         # fewer SMs
    "NVIDIA GeForce RTX 4090 Laptop GPU",                # a different chip
    "NVIDIA GeForce RTX 3050 Ti Laptop GPU",
    "NVIDIA GeForce RTX 3050 A Laptop GPU",              # Ada-based
    "NVIDIA GeForce RTX 3050",                           # the desktop card
    "NVIDIA GeForce RTX 3060 Ti",
    "NVIDIA L40",
    "NVIDIA H100 PCIe",
    "NVIDIA H100 NVL",
    "NVIDIA H200 NVL",
    "NVIDIA A100",                                       # 40 or 80 GB: ambiguous
    "NVIDIA RTX 6000 Ada Generation",
    "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    "Tesla T4",
    "AMD Radeon RX 7900 XTX",
    "",
])
def test_lookup_never_guesses(nvml_name):
    assert lookup(nvml_name) is None


def test_catalogue_covers_the_brief_and_names_resolve_to_themselves():
    wanted = {"RTX 3050 Laptop", "RTX 3060", "RTX 3090", "RTX 4090", "RTX 5060 Ti", "RTX 5090",
              "RTX PRO 6000 Blackwell", "L4", "L40S", "A100 40GB", "A100 80GB", "H100 SXM", "H200", "DGX Spark"}
    assert wanted <= {spec.model for spec in CATALOGUE}
    for spec in CATALOGUE:
        assert lookup(spec.model) is spec
        assert all(lookup(alias) is spec for alias in spec.aliases)
        assert spec.source and spec.bf16 and spec.bf16_tflops > spec.fp32_tflops > 0
    # FP8 tensor cores, by the vendors' datasheets (Ada, Hopper, Blackwell), not by the catalogue's own rule
    assert {s.model for s in CATALOGUE if s.fp8} == {"RTX 4090", "RTX 5060 Ti", "RTX 5090", "RTX PRO 6000 Blackwell",
                                                     "L4", "L40S", "H100 SXM", "H200", "DGX Spark"}


@pytest.mark.parametrize("model", ["RTX 3090", "RTX 4090", "RTX 5090", "RTX 5060 Ti", "RTX 3060", "A100 80GB"])
def test_catalogue_rates_agree_with_per_sm_figures(model):
    """SMs x boost clock x the per-SM table reproduces the datasheet where the table applies (GeForce, A100)."""
    spec = lookup(model)
    rates = SM_RATES[spec.compute_capability]
    derived = spec.sm_count * spec.boost_mhz * 1e6 * rates.bf16_per_clock / 1e12
    assert derived == pytest.approx(spec.bf16_tflops, rel=0.02)
    assert spec.sm_count * spec.boost_mhz * 1e6 * rates.fp32_per_clock / 1e12 == pytest.approx(spec.fp32_tflops, rel=0.02)


def test_h200_nvml_facts_give_its_bandwidth_and_sm_count():
    """docs/model.md §12: what NVML says of an H200 (6016-bit bus at 3201 MHz, 16,896 cores) becomes a card of
    4.81 TB/s and 132 SMs through the probe itself (a stand-in for the NVML module, the probe's real code)."""
    from types import SimpleNamespace

    from cluster.gpus import _probe_one

    nvml = SimpleNamespace(
        NVML_CLOCK_MEM="mem", NVML_CLOCK_SM="sm", nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: "NVIDIA H200", nvmlDeviceGetCudaComputeCapability=lambda h: (9, 0),
        nvmlDeviceGetMemoryBusWidth=lambda h: 6016, nvmlDeviceGetNumGpuCores=lambda h: 16896,
        nvmlDeviceGetMaxClockInfo=lambda h, kind: {"mem": 3201, "sm": 1980}[kind],
        nvmlDeviceGetUUID=lambda h: "GPU-x", nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(total=150_754_820_096))
    dev = _probe_one(nvml, "n", 0)
    assert dev.bandwidth_bytes_s == pytest.approx(4.81e12, rel=1e-3) and dev.sm_count == 132
    assert dev.bf16 and dev.fp8 and dev.sm_clock_mhz == 1980
    spec = dev.spec()
    assert spec.model == "H200" and spec.bf16_tflops == 989.4
    assert spec.vram_gib == pytest.approx(140.4, abs=0.05) and spec.bandwidth_gbs == pytest.approx(4813.5, rel=1e-3)


def test_unknown_card_is_described_from_nvml_facts():
    """A card the catalogue does not know, with the facts NVML gave on our H200 (16,896 cores = 132 SMs, 1,980 MHz,
    cc 9.0), is derived to within 1 % of the H200's datasheet (989.4 bf16, 66.9 fp32 TFLOP/s)."""
    h200 = lookup("H200")
    dev = GpuDevice("n", 0, "GPU-y", "NVIDIA Hopper Prototype", 96 * 2**30, 3e12, 16896 // 128, 1980, (9, 0), True,
                    True)
    spec = dev.spec()
    assert spec.bf16_tflops == pytest.approx(h200.bf16_tflops, rel=0.01)
    assert spec.fp32_tflops == pytest.approx(h200.fp32_tflops, rel=0.01)
    assert "derived from NVML" in spec.source
    future = GpuDevice("n", 1, "GPU-z", "NVIDIA Next", 2**35, 1e12, 100, 2000, (13, 0), True, True)
    assert future.spec().bf16_tflops is None and future.bf16_flops() is None


def test_virtual_and_cpu_devices():
    dev = device_from_spec(lookup("RTX 4090"), "desk", 1)
    assert (dev.uuid, dev.key, dev.virtual, dev.vram_gib) == ("VIRT-desk-1", "desk/1", True, 24.0)
    cpu = cpu_device("local", 2)
    assert cpu.is_cpu and cpu.key == "local/cpu" and cpu.spec().fp32_tflops > 0


def test_probe_nvml_returns_nothing_without_a_driver():
    assert probe_nvml("ci") == []


def test_shipped_profiles_load():
    expected = {"laptop-3050": (1, 1), "home-lab": (3, 3), "home-lab-one-node": (1, 2), "h200": (1, 1),
                "h200x2": (1, 2), "rental-fleet-64": (9, 64), "cpu": (1, 0)}
    for name, (nodes, gpus) in expected.items():
        profile = load_profile(CLUSTERS / f"{name}.toml")
        assert (len(profile.nodes), profile.gpu_count) == (nodes, gpus), name
        inventory = profile_inventory(profile)
        assert len(inventory) == gpus and all(d.virtual for d in inventory)
        assert len({d.uuid for d in inventory}) == gpus
        assert profile.describe().startswith(profile.name)


def test_profile_inventory_is_deterministic_and_keeps_mixed_nodes():
    profile = load_profile(CLUSTERS / "home-lab-one-node.toml")
    first, again = profile_inventory(profile), profile_inventory(profile)
    assert first == again
    assert [(d.key, d.name, d.uuid) for d in first] == [("desk/0", "RTX 4090", "VIRT-desk-0"),
                                                        ("desk/1", "RTX 3050 Laptop", "VIRT-desk-1")]
    fleet = load_profile(CLUSTERS / "rental-fleet-64.toml")
    assert [n.name for n in fleet.nodes][:2] == ["hopper-0", "hopper-1"]
    assert cpu_inventory(load_profile(CLUSTERS / "cpu.toml"))[0].key == "local/cpu"


@pytest.mark.parametrize("body, field", [
    ('name = "x"\ncolour = "red"\n', "unknown key 'colour'"),
    ('name = "x"\n[[nodes]]\nname = "a"\ncpus = 4\ngpu = ["RTX 4090"]\n', "nodes[0]: unknown key 'gpu'"),
    ('name = "x"\n[[nodes]]\nname = "a"\ncpus = 4\ngpus = ["RTX 9090"]\n', "nodes[0].gpus[0]: unknown GPU model 'RTX 9090'"),
    ('name = "x"\n[[nodes]]\nname = "a"\ncpus = "4"\n', "nodes[0].cpus: expected an integer >= 1"),
    ('name = "x"\n[[nodes]]\nname = "a"\ncpus = 0\n', "nodes[0].cpus: expected an integer >= 1"),
    ('name = "x"\nreserve_gib = -1\n', "reserve_gib: expected a number >= 0"),
    ('name = "x"\n[[nodes]]\ncpus = 4\n', "nodes[0].name: required"),
    ('name = "x"\n[[nodes]]\nname = "a b"\ncpus = 4\n', "nodes[0].name: 'a b' may use only"),
    ('name = "x"\n[[nodes]]\nname = "a"\ncpus = 1\n[[nodes]]\nname = "a"\ncpus = 1\n', "node name 'a' is used twice"),
    ('name = "x"\n[[nodes]]\nname = "a"\ncpus = 1\ngpus = [{model = "L4", n = 2}]\n', "nodes[0].gpus[0]: unknown key 'n'"),
    ('name = "x"\n[[nodes]]\nname = "a"\ncpus = 1\ngpus = [{model = "L4", count = 0}]\n', "nodes[0].gpus[0].count"),
    ('name = "x"\n[[nodes]]\nname = "a"\ncpus = 1\ngpus = "L4"\n', "nodes[0].gpus: expected an array"),
    ("name = \n", "not valid TOML"),
    ("description = 'no name'\n", "name: required"),
])
def test_profile_errors_name_the_file_and_the_field(tmp_path, body, field):
    path = tmp_path / "broken.toml"
    path.write_text(body)
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert str(path) in str(err.value) and field in str(err.value)


def test_profile_count_shorthand_expands_nodes_and_gpus(tmp_path):
    path = tmp_path / "fleet.toml"
    path.write_text('name = "f"\n[[nodes]]\nname = "rack"\ncount = 3\ncpus = 8\n'
                    'gpus = [{model = "NVIDIA H100 80GB HBM3", count = 2}, "L4"]\n')
    profile = load_profile(path)
    assert [n.name for n in profile.nodes] == ["rack-0", "rack-1", "rack-2"]
    assert profile.nodes[0].gpus == ("H100 SXM", "H100 SXM", "L4") and profile.gpu_count == 9
