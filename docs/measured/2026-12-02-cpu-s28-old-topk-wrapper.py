"""`python docs/measured/2026-12-02-cpu-s28-old-topk-wrapper.py bench ar ...` = `python -m farm bench ar ...` with the
sampler's top-k as the tree has it (torch.topk over every row): the baseline side of the radix top-k A/B of 2026-12-02
(third session), run as .gpu/old_topk.py while the kernel was in the tree; separate processes (the compiled step is
shared per process)."""
import sys

from stages import fast_sampling as fs


def old_top(x, live=None):
    values, ids = x.topk(min(fs.CANDIDATES, x.shape[1]), dim=1, sorted=False)
    return values, ids


fs.top = old_top
sys.argv = ["farm"] + sys.argv[1:]
from farm.cli import main  # noqa: E402

main()
