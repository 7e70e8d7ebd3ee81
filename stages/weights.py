"""Per-stage model loading, and random-init checkpoints written in exactly the released layout.

A stage asks for the weight groups it needs (`parts`); only those tensors are read from disk, after the whole file
has been checked by name and shape. `init_checkpoint` writes `model/` and `vae/` directories a released checkpoint
would have (safetensors + config.json), filled with seeded random weights, for tests (tiny) and for honest speed
figures (yue2-3b shapes).
"""
from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import torch

from . import config as configs, config_json
from .checkpoint import check_layout, load_tensors, write_tensors
from .tokenizer import TIKTOKEN_FILE, write_synthetic_ranks
from .transformer import AR, HEAD, NAR, YuE2, expected_shapes, sinusoid_table
from .vae import random_vae_tensors

WEIGHTS_FILE = "model.safetensors"
ALL_PARTS = frozenset({AR, HEAD, NAR})
PE = "latent_pos_embed.pe"


def check_model_file(model_dir: str | Path, cfg: configs.Yue2Config, parts=ALL_PARTS) -> tuple[Path, list[str]]:
    """The MoT file's whole layout checked from its header (names, shapes, a damaged file) → (path, the names
    `parts` need)."""
    path = Path(model_dir) / WEIGHTS_FILE
    with torch.device("meta"):
        needed = list(YuE2(cfg.model, frozenset(parts)).state_dict())
    check_layout(path, expected_shapes(cfg.model, ALL_PARTS), needed, optional=[PE])
    return path, needed


def verify_checkpoint(model_dir: str | Path, vae_dir: str | Path, cfg: configs.Yue2Config) -> None:
    """Everything a render will read, checked in a second before any work starts (headers only)."""
    from .vae import check_decoder_file

    check_model_file(model_dir, cfg)
    check_decoder_file(vae_dir, cfg.vae)


def load_model(model_dir: str | Path, cfg: configs.Yue2Config, parts, *, device="cpu",
               dtype: torch.dtype | None = None) -> YuE2:
    """Build the model with just `parts` on `device`, reading only those tensors from `model_dir`."""
    dtype = dtype or getattr(torch, cfg.dtype)
    path, needed = check_model_file(model_dir, cfg, parts)
    with torch.device("meta"):
        model = YuE2(cfg.model, frozenset(parts))
    tensors = load_tensors(path, needed, dtype=dtype, device=device)
    if PE in needed and PE not in tensors:  # allowed to be absent: it is a fixed table
        tensors[PE] = sinusoid_table(cfg.model.max_latent_frames, cfg.model.hidden_size).to(device, dtype)
    model.load_state_dict(tensors, strict=True, assign=True)
    return model.eval().requires_grad_(False)


def random_model_tensors(cfg: configs.Yue2Config, seed: int, device="cpu") -> dict[str, torch.Tensor]:
    """Seeded random weights for every MoT tensor, in the config's storage dtype, on the CPU.

    Linear and embedding weights ~ N(0, 0.02²), biases 0, norm weights 1, `pe` the exact sinusoid table.
    """
    generator = torch.Generator(device).manual_seed(seed)
    dtype = getattr(torch, cfg.dtype)
    out = {}
    for name, shape in expected_shapes(cfg.model, ALL_PARTS).items():
        if name == PE:
            tensor = sinusoid_table(*shape)
        elif name.endswith("norm.weight") or name.endswith("layernorm.weight"):
            tensor = torch.ones(shape)
        elif name.endswith(".bias"):
            tensor = torch.zeros(shape)
        else:
            tensor = torch.randn(shape, generator=generator, device=device).mul_(0.02)
        out[name] = tensor.to(dtype).cpu()
    return out


def init_checkpoint(cfg: configs.Yue2Config, out_dir: str | Path, seed: int = 0, device="cpu") -> tuple[Path, Path]:
    """Write `out_dir/model/` and `out_dir/vae/` with random weights; returns both paths.

    Built in a temporary sibling directory and renamed into place, so an interrupted run leaves nothing half-made.
    """
    out_dir = Path(out_dir)
    for sub in ("model", "vae"):
        if (out_dir / sub).exists():
            raise FileExistsError(f"{out_dir / sub} already exists")
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".init-{uuid.uuid4().hex}"
    try:
        model_dir, vae_dir = tmp / "model", tmp / "vae"
        model_dir.mkdir(parents=True)
        vae_dir.mkdir()
        meta = {"format": "pt", "yue2_farm_random_seed": str(seed), "yue2_farm_config": cfg.name}
        write_tensors(model_dir / WEIGHTS_FILE, random_model_tensors(cfg, seed, device), meta)
        if cfg.tokens.tokenizer == "tiktoken":
            write_synthetic_ranks(model_dir / TIKTOKEN_FILE, cfg.tokens.n_text)
        write_tensors(vae_dir / WEIGHTS_FILE, random_vae_tensors(cfg.vae, seed), meta)
        write_configs(cfg, model_dir, vae_dir)
        for sub in ("model", "vae"):
            (tmp / sub).rename(out_dir / sub)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir / "model", out_dir / "vae"


def write_configs(cfg: configs.Yue2Config, model_dir: Path, vae_dir: Path) -> None:
    """The checkpoint's JSON files, as the release has them: model/config.json, model/generation_config.json (our
    sampling defaults) and vae/config.json."""
    _write_json(Path(model_dir) / "config.json", config_json.model_json(cfg))
    _write_json(Path(model_dir) / "generation_config.json", config_json.generation_json(cfg))
    _write_json(Path(vae_dir) / "config.json", config_json.vae_json(cfg))


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
