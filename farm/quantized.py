"""`farm quantize`, and the checks of the quantised AR options a render or a song is given (--ar-checkpoint,
--ar-format, --kv-cache)."""
from __future__ import annotations

from pathlib import Path

from .errors import UserError

EXTRA = "compressed-tensors is not installed: pip install 'yue2-farm[quant]'"


def _library() -> None:
    """The format's reader and writer is an optional extra: say how to get it rather than fail on import."""
    import importlib.util

    if importlib.util.find_spec("compressed_tensors") is None:
        raise UserError(EXTRA)


def write_quantized(model: str, vae: str | None, out: Path, weight_format: str) -> Path:
    from stages.ar_checkpoint import FORMATS, quantize_checkpoint
    from stages.requests import open_checkpoint

    from .models import resolve_model

    if weight_format not in FORMATS:
        raise UserError(f"--format: expected one of {', '.join(FORMATS)}, got {weight_format!r}")
    _library()
    paths = resolve_model(model, vae)
    ckpt = open_checkpoint(paths.model_dir, paths.vae_dir)
    return quantize_checkpoint(paths.model_dir, ckpt.cfg, Path(out).expanduser(), weight_format)


def check_ar_checkpoint(ar_dir: str | Path, cfg, flag: str = "--ar-checkpoint") -> str:
    """A quantised AR checkpoint that fits `cfg` → its format; a clear error otherwise (headers only)."""
    from stages.ar_checkpoint import WEIGHTS_FILE, layout, read_format
    from stages.checkpoint import check_layout

    path = Path(ar_dir).expanduser()
    if not path.is_dir():
        raise UserError(f"{flag} {ar_dir}: not a directory")
    _library()
    fmt = read_format(path, cfg)
    shapes = layout(cfg.model, fmt)
    check_layout(path / WEIGHTS_FILE, shapes, shapes)
    return fmt


def check_kv_cache(kv_cache: str, flag: str = "--kv-cache") -> None:
    from stages.kv_cache import KV_FORMATS

    if kv_cache not in KV_FORMATS:
        raise UserError(f"{flag}: expected one of {', '.join(KV_FORMATS)}, got {kv_cache!r}")


def check_ar_format(asked: str | None, checkpoint_format: str | None, flag: str = "--ar-format") -> str:
    """The AR weights' format a render or a song runs: the one asked for (bf16 unless asked), or the AR
    checkpoint's; asking for another than the checkpoint holds is an error, not a silent choice."""
    from stages.quant import FORMATS

    if asked is not None and asked not in FORMATS:
        raise UserError(f"{flag}: expected one of {', '.join(FORMATS)}, got {asked!r}")
    if checkpoint_format is not None:
        if asked not in (None, checkpoint_format):
            raise UserError(f"{flag} {asked}: the AR checkpoint holds {checkpoint_format} weights")
        return checkpoint_format
    return asked or "bf16"
