"""`farm bench …`: the speed of the farm on a GPU, as tables against the H200 floors and against our own sequential
path measured in the same run (docs/benchmarks.md). `song`: one reference-length track through the sequential
path; `ar`: the AR step at every batch size against its bandwidth floor; `acoustic`: one acoustic chunk's velocity
evaluation against the measured matmul rate; `album`: N tracks through the farm. The headline figures go to
docs/measured/summary.json (farm/measured.py).
"""
