"""Where checkpoints and named configs come from: `--model tiny`, a checkpoint directory, the user cache.

`tiny` is a random-weight checkpoint in the released layout, created in the user cache on first use (seconds on a
CPU) so that every command works on a fresh laptop with no download. Knows nothing about rendering.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

TINY_SEED = 0


class ModelError(ValueError):
    """A --model argument names nothing usable."""


@dataclass(frozen=True)
class ModelPaths:
    model_dir: Path
    vae_dir: Path


def configs_dir() -> Path:
    """The shipped configs/: beside the package in a checkout or editable install, inside it in a wheel."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "configs", here / "_configs"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError("the configs/ directory is missing from this installation")


def model_config_names() -> tuple[str, ...]:
    """The model configs `--config` and an album's `model` may name: configs/models/*.toml."""
    return tuple(sorted(p.stem for p in (configs_dir() / "models").glob("*.toml")))


def named_config(name: str):
    from stages.config import from_toml

    path = configs_dir() / "models" / f"{name}.toml"
    if not path.exists():
        raise ModelError(f"unknown model config {name!r}; known: {', '.join(model_config_names())}")
    return from_toml(path)


def cache_dir() -> Path:
    """$YUE2_FARM_CACHE, else $XDG_CACHE_HOME/yue2-farm, else ~/.cache/yue2-farm."""
    if os.environ.get("YUE2_FARM_CACHE"):
        return Path(os.environ["YUE2_FARM_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "yue2-farm"


def ensure_tiny() -> ModelPaths:
    """The cached tiny checkpoint, written on first use (concurrent first uses are safe: the loser keeps the winner's)."""
    from stages.weights import init_checkpoint

    root = cache_dir() / "checkpoints" / f"tiny-seed{TINY_SEED}"
    paths = ModelPaths(root / "model", root / "vae")
    if not (paths.model_dir.exists() and paths.vae_dir.exists()):
        try:
            init_checkpoint(named_config("tiny"), root, seed=TINY_SEED)
        except FileExistsError:
            pass
    return paths


def resolve_model(spec: str, vae: str | Path | None = None, flag: str = "--model") -> ModelPaths:
    """`tiny`, a directory holding model/ and vae/ (what init-checkpoint writes), or a model dir plus --vae DIR.
    `flag` names where the choice came from in errors (the option, or an album spec's `model` field)."""
    if spec == "tiny" and vae is None:
        return ensure_tiny()
    root = Path(spec).expanduser()
    if (root / "model").is_dir() and (root / "vae").is_dir() and vae is None:
        return ModelPaths(root / "model", root / "vae")
    if (root / "config.json").is_file():
        if vae is None:
            raise ModelError(f"{root} is a model directory without a VAE: pass --vae DIR")
        return ModelPaths(root, Path(vae).expanduser())
    raise ModelError(f"{flag} {spec}: not 'tiny' and not a checkpoint directory (expected model/ and vae/ inside, "
                     f"or a config.json with --vae)")
