"""A development script for a profiler: the triangle update at N = 1024 (C = H = 128, one complex, bf16) as
our bf16 rule runs it and as cuEquivariance's fused column runs it, on one GPU. Each column is called twice
to warm up (its own prepare step outside the calls), then once between cudaProfilerStart and Stop, so only
the columns' kernels are profiled, whatever their names:

    ncu --profile-from-start off --set full python3 tools/profile_trimul_roads.py

(The first version counted launches to skip; its window caught the inputs' generation instead.) Not the
record (that is ``mage measure``); its profiles go to kernels/NOTES.md."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root
from mage import ops, registry  # noqa: E402

SPEC = ops.OPS["trimul_block"]
args = SPEC.inputs(dict(N=1024, C=128, H=128), seed=1, dtype="bf16", device="cuda")
for name in sys.argv[1:] or ("triton", "cuequivariance"):
    impl = registry.get("trimul_block", name, "bf16")
    prepared = impl.prepare(*args) if impl.prepare else args
    for _ in range(2):
        impl.fn(*prepared)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    impl.fn(*prepared)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    print(name, "profiled", flush=True)
