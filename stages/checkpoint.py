"""Strict, selective safetensors I/O for checkpoints in the released layout.

Each stage reads only the tensors it needs (an AR stage never materialises a `nar_*` tensor; decode reads only
`decoder.*`), yet every tensor in the file is checked by name and shape against the layout first, so a wrong or
damaged checkpoint fails with the offending tensor's name before anything is loaded. Never unpickles anything.
Knows the layouts only through the `expected` shape maps its callers pass in.
"""
from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

Shape = tuple[int, ...]


class CheckpointError(ValueError):
    """A checkpoint file does not hold the tensors a stage needs, by name and shape."""


def _files(path: Path) -> dict[str, Path]:
    """Tensor name → the file holding it; understands `model.safetensors.index.json` shards."""
    index = path.with_name(path.name + ".index.json")
    if not path.exists() and index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        return {name: path.with_name(file) for name, file in weight_map.items()}
    if not path.exists():
        raise CheckpointError(f"{path}: missing")
    with _opened(path) as f:
        return {name: path for name in f.keys()}


def _opened(path: Path, device: str = "cpu"):
    """safe_open, with a damaged file (truncated, not safetensors) named as a CheckpointError."""
    try:
        return safe_open(str(path), framework="pt", device=device)
    except Exception as exc:   # safetensors raises its own SafetensorError (and OSError for unreadable files)
        raise CheckpointError(f"{path}: not a readable safetensors file ({exc})") from None


def read_header(path: str | Path) -> dict[str, Shape]:
    """Name → shape of every tensor in a checkpoint, read from the header only."""
    shapes: dict[str, Shape] = {}
    files = _files(Path(path))
    for file in sorted(set(files.values())):
        with _opened(file) as f:
            for name in f.keys():
                shapes[name] = tuple(f.get_slice(name).get_shape())
    return shapes


def check_layout(path: str | Path, expected: Mapping[str, Shape], needed: Iterable[str],
                 optional: Iterable[str] = ()) -> None:
    """Raise CheckpointError naming the first problem: an unexpected, mis-shaped, or missing-but-needed tensor.

    `expected` is the full layout of this kind of file; tensors the caller does not need may be absent (the AR-only
    checkpoint is a subset of the MoT layout), and `optional` ones may be absent even when needed (recomputable).
    """
    header = read_header(path)
    unexpected = sorted(set(header) - set(expected))
    if unexpected:
        more = f" (and {len(unexpected) - 1} more)" if len(unexpected) > 1 else ""
        raise CheckpointError(f"{path}: unexpected tensor {unexpected[0]!r}{more}")
    for name, shape in header.items():
        if tuple(expected[name]) != shape:
            raise CheckpointError(f"{path}: tensor {name!r} has shape {list(shape)}, "
                                  f"expected {list(expected[name])}")
    missing = sorted(set(needed) - set(header) - set(optional))
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise CheckpointError(f"{path}: missing tensor {missing[0]!r}{more}")


def load_tensors(path: str | Path, names: Iterable[str], *, dtype: torch.dtype | None,
                 device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Read just `names` (absent ones are skipped: `check_layout` decides what may be absent), cast to `dtype`
    (None: as stored)."""
    files = _files(Path(path))
    by_file: dict[Path, list[str]] = {}
    for name in names:
        if name in files:
            by_file.setdefault(files[name], []).append(name)
    out: dict[str, torch.Tensor] = {}
    read = _read_to_card if torch.device(device).type == "cuda" else _read
    for file, wanted in by_file.items():
        for name, tensor in read(file, wanted, device):
            out[name] = tensor if dtype is None else tensor.to(dtype)
    return out


def _read(file: Path, names: list[str], device) -> Iterable[tuple[str, torch.Tensor]]:
    with _opened(file, str(device)) as f:
        for name in names:
            yield name, f.get_tensor(name)


STAGE_BYTES = 64 << 20


def _read_to_card(file: Path, names: list[str], device, stage_bytes: int = STAGE_BYTES):
    """Each tensor's bytes through two pinned host buffers in turn, the copy to the card asynchronous on a side
    stream while the next part is read. safetensors' own CUDA path copies each tensor from pageable memory, one
    synchronous copy at a time: for the 7.26 GB of a yue2-3b checkpoint, its pages in the OS cache, that took
    1.0-1.4 s on an H100 VM against 0.33-0.37 s this way (docs/benchmarks.md, twenty-first session)."""
    stages = [torch.empty(stage_bytes, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
    free = [torch.cuda.Event(), torch.cuda.Event()]       # never recorded yet: waiting on one returns at once
    stream, turn = torch.cuda.Stream(device), 0
    read = []
    with _opened(file) as f:
        for name in names:
            host = f.get_tensor(name)                      # a view of the file's pages, not a copy
            card = torch.empty(host.shape, dtype=host.dtype, device=device)
            src, dst = host.reshape(-1).view(torch.uint8), card.reshape(-1).view(torch.uint8)
            for a in range(0, src.numel(), stage_bytes):
                n = min(stage_bytes, src.numel() - a)
                free[turn].synchronize()                   # its last copy to the card has left the buffer
                stages[turn][:n].copy_(src[a:a + n])
                with torch.cuda.stream(stream):
                    dst[a:a + n].copy_(stages[turn][:n], non_blocking=True)
                    free[turn].record(stream)
                turn ^= 1
            read.append((name, card))
    stream.synchronize()        # before the buffers go and before anyone reads the tensors on another stream
    return read


def atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_tensors(path: str | Path, tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]) -> None:
    """Write a safetensors file atomically (temp file + rename): a crash never leaves half a checkpoint."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex}")
    try:
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp), metadata=dict(metadata))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
