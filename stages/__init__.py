"""Stage engines for YuE2-3B, written from docs/model.md: pure PyTorch, no Ray, no storage, no CLI.

plan and semantic run on `ar.AREngine`, acoustic on `acoustic.AcousticEngine`, decode on `vae.OobleckDecoder`;
`song.render_song` chains them for one song in one process.
"""
from .ptxas import pin_ptxas

pin_ptxas()      # before any kernel compiles (stages/ptxas.py says why)
