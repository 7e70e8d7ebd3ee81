"""Content identities: of a checkpoint (what weights), and of each stage of a track (what inputs and settings).

Stage keys are chained — the semantic key covers the plan key, and so on — so a changed setting invalidates exactly
its stage and the ones after it. A finished stage artifact is reused only when its key matches.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

from .models import ModelPaths, cache_dir

CHUNK = 1 << 24


def file_digest(path: Path) -> str:
    """sha256 of a file, remembered per (path, size, mtime) in the user cache: a 7 GB checkpoint is read once."""
    path = Path(path).resolve()
    stat = path.stat()
    token = f"{path}|{stat.st_size}|{stat.st_mtime_ns}"
    memo_path = cache_dir() / "digests.json"
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    if token in memo:
        return memo[token]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    memo[token] = h.hexdigest()
    try:
        memo_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo_path.with_name(f".digests-{os.getpid()}.json")
        tmp.write_text(json.dumps(memo))
        os.replace(tmp, memo_path)
    except OSError:
        pass  # a read-only cache only costs a re-hash next time
    return memo[token]


def dir_digest(directory: Path) -> str:
    """One digest over every regular file of a checkpoint directory, by name."""
    h = hashlib.sha256()
    for path in sorted(p for p in Path(directory).iterdir() if p.is_file() and not p.name.startswith(".")):
        h.update(f"{path.name}:{file_digest(path)}\n".encode())
    return h.hexdigest()


def checkpoint_identity(paths: ModelPaths, ar_checkpoint: Path | None = None, ar_format: str | None = None,
                        kv_cache: str = "bf16") -> dict:
    """The weights and numerics a render runs: the MoT and the VAE; and under "ar", what makes the plan and
    semantic stages differ from the MoT's own AR half in the model dtype — a quantised AR checkpoint (its format
    and digest), or the MoT's AR weights in another format, and an FP8 KV cache. "ar" enters those stages' keys,
    so a render never mixes their outputs."""
    model, vae = dir_digest(paths.model_dir), dir_digest(paths.vae_dir)
    out = {"model": model, "vae": vae, "id": _digest({"model": model, "vae": vae})[:16]}
    ar = {}
    if ar_checkpoint is not None:
        ar.update(format=ar_format, weights=dir_digest(ar_checkpoint))
    elif ar_format not in (None, "bf16"):      # the MoT's own AR weights, quantised when the engine loads
        ar["format"] = ar_format
    if kv_cache != "bf16":
        ar["kv_cache"] = kv_cache
    if ar:
        out.update(ar=ar, id=_digest({"model": model, "vae": vae, "ar": ar})[:16])
    return out


def stage_keys(identity: dict, request, settings, candidates=None) -> dict[str, str]:
    """plan → semantic → acoustic → decode, each key covering its inputs, its settings and the key before it.
    `candidates` (jobs.Candidates): best of N enters the plan key only when N > 1, so a one-candidate album keeps
    the keys it always had. The decode precision enters the decode key unless it is "fp32", the default before
    "tf32x3" (2026-12-05): a track rendered in fp32 keeps its keys, and one rendered on the old default and resumed
    on the new one decodes again (its audio moves by ~1e-5 on a Hopper card; elsewhere the bytes are the same)."""
    req = dataclasses.asdict(request)
    s = dataclasses.asdict(settings)
    best_of = dataclasses.asdict(candidates) if candidates is not None and candidates.count > 1 else None
    plan = _digest({"model": identity["model"], "request": req, "plan": s["plan"], "sampler": s["sampler"],
                    **({"ar": identity["ar"]} if "ar" in identity else {}),
                    **({"candidates": best_of} if best_of else {})})
    semantic = _digest({"plan": plan, "semantic": s["semantic"], "cfg": request.cfg_scale, "sampler": s["sampler"]})
    acoustic = _digest({"semantic": semantic, "ode_steps": s["ode_steps"], "cond_end": s["cond_end"]})
    decode = _digest({"acoustic": acoustic, "vae": identity["vae"], "core": s["vae_core_frames"],
                      "halo": s["vae_halo_frames"],
                      **({"precision": s["decode_precision"]} if s["decode_precision"] != "fp32" else {})})
    return {"plan": plan, "semantic": semantic, "acoustic": acoustic, "decode": decode}


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=list).encode()).hexdigest()
