"""Quantised AR checkpoints: the AR half of YuE2 as the Qwen3-shaped model the community publishes, in the
compressed-tensors format, written from a MoT checkpoint and read back for the AR stages.

A directory holds `model.safetensors`, `config.json` (a Hugging Face Qwen3 config with the MoT's shapes and a
`quantization_config`) and the MoT's tokenizer file. Tensor names are the MoT's AR names, which are already HF
Qwen3's (docs/model.md §1): per layer the seven linear matrices (q/k/v/o, gate/up/down) quantised, the norms in the
model dtype; the embedding, the final norm and the lm_head stay in the model dtype (the format's `ignore`). Two
formats, as the community publishes them:
- fp8: compressed-tensors' FP8_DYNAMIC preset ("float-quantized"): `<name>.weight` e4m3 values and a
  `<name>.weight_scale` of one value per output channel; FP8 activations per token, dynamic (W8A8);
- nvfp4: its NVFP4A16 preset ("nvfp4-pack-quantized"): `<name>.weight_packed` (e2m1 codes two to a byte),
  `<name>.weight_scale` (an e4m3 scale per 16 values) and `<name>.weight_global_scale` (one FP32 value: a stored
  value is code · weight_scale / weight_global_scale); activations stay in the model dtype (W4A16).
Our AR step never quantises its activations (stages/quant.py), which for FP8 is no less accurate than W8A8.

The compressed-tensors library writes the values (so our files are its format by construction) and parses the
config; it is imported only here, and only when a quantised checkpoint is written or read (it pulls in
transformers). The MoT checkpoint still serves the acoustic stage, whose AR prefix pass stays in the model dtype.
"""
from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import torch

from . import quant
from .checkpoint import CheckpointError, check_layout, load_tensors, write_tensors
from .config import ModelConfig, Yue2Config
from .tokenizer import TIKTOKEN_FILE
from .transformer import AR, HEAD, YuE2, expected_shapes

FORMATS = {"fp8": ("FP8_DYNAMIC", "float-quantized"),   # ours → (compressed-tensors preset, its format name)
           "nvfp4": ("NVFP4A16", "nvfp4-pack-quantized")}
WEIGHTS_FILE = "model.safetensors"
LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
           "mlp.up_proj", "mlp.down_proj")
QWEN3_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                "intermediate_size", "vocab_size", "rms_norm_eps", "rope_theta", "max_position_embeddings",
                "tie_word_embeddings")


def layout(cfg: ModelConfig, fmt: str = "fp8") -> dict[str, tuple[int, ...]]:
    """Name → shape of every tensor a quantised AR checkpoint in format `fmt` holds."""
    shapes = dict(expected_shapes(cfg, {AR, HEAD}))
    for i in range(cfg.num_hidden_layers):
        for lin in LINEARS:
            name = f"model.layers.{i}.{lin}."
            rows, cols = shapes[name + "weight"]
            if fmt == "fp8":
                shapes[name + "weight_scale"] = (rows, 1)
            else:
                del shapes[name + "weight"]
                shapes.update({name + "weight_packed": (rows, cols // 2), name + "weight_global_scale": (1,),
                               name + "weight_scale": (rows, cols // quant.FP4_GROUP)})
    return shapes


def _quantised(name: str) -> bool:
    return name.startswith("model.layers.") and name.endswith("_proj.weight")


def _dtype(name: str, fmt: str, model_dtype: torch.dtype) -> torch.dtype:
    """The dtype a tensor of a quantised AR checkpoint must have."""
    if not name.startswith("model.layers.") or "_proj." not in name:
        return model_dtype
    if name.endswith("weight_packed"):
        return torch.uint8
    if name.endswith("weight_global_scale") or (fmt == "fp8" and name.endswith("weight_scale")):
        return torch.float32
    return quant.FP8


def quantize_checkpoint(model_dir: str | Path, cfg: Yue2Config, out_dir: str | Path, fmt: str = "fp8") -> Path:
    """Write the AR half of the MoT checkpoint in `model_dir` as a quantised AR checkpoint in `out_dir` (a new
    directory, built beside it and renamed into place: never half-written)."""
    from compressed_tensors.quantization import preset_name_to_scheme

    from .weights import check_model_file

    if fmt not in FORMATS:
        raise CheckpointError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    out_dir = Path(out_dir)
    if out_dir.exists():
        raise FileExistsError(f"{out_dir} already exists")
    path, needed = check_model_file(model_dir, cfg, {AR, HEAD})
    scheme = preset_name_to_scheme(FORMATS[fmt][0], ["Linear"])
    tensors = {}
    for name, tensor in load_tensors(path, needed, dtype=None).items():
        if not _quantised(name):
            tensors[name] = tensor
            continue
        stem = name.removesuffix("weight")
        tensors.update({stem + key: value for key, value in _compress(tensor, scheme, fmt).items()})
    tmp = out_dir.with_name(f".{out_dir.name}.tmp-{uuid.uuid4().hex}")
    tmp.mkdir(parents=True)
    try:
        write_tensors(tmp / WEIGHTS_FILE, tensors, {"format": "pt", "yue2_farm_quantized_from": str(model_dir)})
        (tmp / "config.json").write_text(json.dumps(_config_json(cfg, scheme, fmt), indent=2) + "\n")
        if (Path(model_dir) / TIKTOKEN_FILE).exists():
            shutil.copyfile(Path(model_dir) / TIKTOKEN_FILE, tmp / TIKTOKEN_FILE)
        tmp.rename(out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def _compress(w: torch.Tensor, scheme, fmt: str) -> dict[str, torch.Tensor]:
    """One matrix as the compressed-tensors library stores it in `fmt` (its own compressors write the values)."""
    from compressed_tensors.compressors import FloatQuantizationCompressor, NVFP4PackedCompressor
    from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam

    if fmt == "fp8":
        amax = w.abs().amax(dim=1, keepdim=True)                 # per output channel, in the stored dtype
        scale, zero_point = calculate_qparams(-amax, amax, scheme.weights)
        packed = FloatQuantizationCompressor.compress(
            {"weight": w, "weight_scale": scale, "weight_zero_point": zero_point}, scheme)
        return {"weight": packed["weight"], "weight_scale": packed["weight_scale"]}
    w = w.float()                                                # NVFP4's scales are computed in FP32
    global_scale = generate_gparam(w.amin(), w.amax())
    groups = w.reshape(w.shape[0], -1, quant.FP4_GROUP)
    scale, _ = calculate_qparams(groups.amin(-1), groups.amax(-1), scheme.weights, global_scale=global_scale)
    packed = NVFP4PackedCompressor.compress(
        {"weight": w, "weight_scale": scale, "weight_global_scale": global_scale}, scheme)
    return {"weight_packed": packed["weight_packed"], "weight_scale": packed["weight_scale"],
            "weight_global_scale": global_scale}


def _config_json(cfg: Yue2Config, scheme, fmt: str) -> dict:
    from compressed_tensors.quantization import QuantizationConfig, QuantizationStatus

    qconfig = QuantizationConfig(config_groups={"group_0": scheme}, format=FORMATS[fmt][1],
                               quantization_status=QuantizationStatus.COMPRESSED,
                               ignore=["lm_head", "re:.*embed_tokens"])
    out = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "torch_dtype": cfg.dtype,
           "attention_bias": False, "hidden_act": "silu"}
    out.update({k: getattr(cfg.model, k) for k in QWEN3_FIELDS})
    out["quantization_config"] = qconfig.model_dump(mode="json", exclude_none=True)
    return out


def read_format(ar_dir: str | Path, cfg: Yue2Config) -> str:
    """Check a quantised AR checkpoint's config against the MoT it is to replace the AR half of → our format name.
    Every mismatch is a CheckpointError naming the file and the field."""
    from compressed_tensors.quantization import QuantizationConfig

    path = Path(ar_dir) / "config.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing (not a quantised AR checkpoint directory)") from None
    except ValueError as exc:
        raise CheckpointError(f"{path}: not valid JSON ({exc})") from None
    if data.get("model_type") != "qwen3":
        raise CheckpointError(f"{path}: model_type must be 'qwen3', got {data.get('model_type')!r}")
    for key in QWEN3_FIELDS:
        if data.get(key) != getattr(cfg.model, key):
            raise CheckpointError(f"{path}: {key} is {data.get(key)!r}, the MoT checkpoint has "
                                  f"{getattr(cfg.model, key)!r}")
    raw = data.get("quantization_config")
    if not isinstance(raw, dict) or raw.get("quant_method") != "compressed-tensors":
        raise CheckpointError(f"{path}: quantization_config.quant_method must be 'compressed-tensors'")
    try:
        qconfig = QuantizationConfig.model_validate(raw)
    except ValueError as exc:
        first = str(exc).splitlines()[0]
        raise CheckpointError(f"{path}: quantization_config is not a compressed-tensors config ({first})") from None
    fmt = next((ours for ours, (_, name) in FORMATS.items() if name == qconfig.format), None)
    if fmt is None:
        raise CheckpointError(f"{path}: quantization_config.format {qconfig.format!r} is not supported "
                              f"(supported: {', '.join(name for _, name in FORMATS.values())})")
    schemes = list(qconfig.config_groups.values())
    w = schemes[0].weights if len(schemes) == 1 else None
    want, what = {"fp8": ((8, "float", "channel", None), "FP8 weights with one scale per output channel"),
                  "nvfp4": ((4, "float", "tensor_group", quant.FP4_GROUP),
                            f"FP4 weights with a scale per {quant.FP4_GROUP} values")}[fmt]
    if w is None or (w.num_bits, w.type, w.strategy, w.group_size if fmt == "nvfp4" else None) != want:
        raise CheckpointError(f"{path}: quantization_config must hold one group of {what} "
                              f"(got {[s.weights for s in schemes]})")
    return fmt


def load_quantized_ar(ar_dir: str | Path, cfg: Yue2Config, *, device="cpu") -> tuple[YuE2, str]:
    """The AR stages' model from a quantised AR checkpoint, and its weight format (the AR engine's
    `weight_format`): embedding, norms and lm_head as modules, the linear layers only as the AR step's quantised
    tuples (stages/quant.py; the modules' own linear weights stay unallocated)."""
    from .step_weights import set_step_weights
    from .transformer import BranchWeights

    fmt = read_format(ar_dir, cfg)
    path = Path(ar_dir) / WEIGHTS_FILE
    shapes = layout(cfg.model, fmt)
    check_layout(path, shapes, shapes)
    tensors = load_tensors(path, shapes, dtype=None, device=device)
    dtype = getattr(torch, cfg.dtype)
    for name, t in tensors.items():
        want = _dtype(name, fmt, dtype)
        if t.dtype != want and not (want == torch.float32 and t.is_floating_point()):
            raise CheckpointError(f"{path}: tensor {name!r} is {t.dtype}, expected {want}")
    with torch.device("meta"):
        model = YuE2(cfg.model, frozenset({AR, HEAD}))
    plain = {n: t for n, t in tensors.items() if not n.startswith("model.layers.") or "_proj." not in n}
    model.load_state_dict(plain, strict=False, assign=True)

    def matrix(name):
        if fmt == "fp8":
            return tensors[name + ".weight"], tensors[name + ".weight_scale"].float().reshape(-1)
        packed, group = tensors[name + ".weight_packed"], tensors[name + ".weight_scale"]
        inverse = 1.0 / tensors[name + ".weight_global_scale"].float().reshape(1)
        return packed, group, inverse.expand(packed.shape[0]).contiguous()

    def pair(*names):
        return quant.cat([matrix(n) for n in names])

    layers = []
    for i in range(cfg.model.num_hidden_layers):
        p = f"model.layers.{i}."
        layers.append(BranchWeights(
            plain[p + "input_layernorm.weight"], pair(*(p + f"self_attn.{x}_proj" for x in "qkv")),
            plain[p + "self_attn.q_norm.weight"], plain[p + "self_attn.k_norm.weight"], pair(p + "self_attn.o_proj"),
            plain[p + "post_attention_layernorm.weight"], pair(p + "mlp.gate_proj", p + "mlp.up_proj"),
            pair(p + "mlp.down_proj")))
    set_step_weights(model, fmt, layers)
    return model.eval().requires_grad_(False), fmt
