"""The three-track album the farm's Ray tests render (test_farm, test_farm_resume, test_faults, test_full_disk,
test_node_loss); the `album` fixture in conftest.py writes it."""
from __future__ import annotations

ALBUM = """
title = "Farm Test"
[defaults]
style = "lo-fi pop, warm piano"
seed = 11
[defaults.sampling.semantic]
max_tokens = 40
[[tracks]]
title = "One"
lyrics = "[verse]\\nPaper boats in the rain\\n"
[[tracks]]
title = "Two"
cot = "melody"
lyrics = "[verse]\\nHarbour lights\\n"
[[tracks]]
title = "Three"
cot = "off"
lyrics = "[verse]\\nNight bus\\n"
"""
FILES = ("score.abc", "plan.npy", "semantic.npy", "latents.npy", "audio.flac")


def same_content(name: str, a: bytes, b: bytes) -> bool:
    """Two renders' files hold the same thing: the same bytes, and for a FLAC the same samples (its Vorbis comments
    name the album and the track, which the one-song path does not know: farm/tags.py)."""
    if not name.endswith(".flac"):
        return a == b
    import io

    import numpy as np
    import soundfile as sf

    (x, rx), (y, ry) = (sf.read(io.BytesIO(data), dtype="int32", always_2d=True) for data in (a, b))
    return rx == ry and x.shape == y.shape and bool(np.array_equal(x, y))
