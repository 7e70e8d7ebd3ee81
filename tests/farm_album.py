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
