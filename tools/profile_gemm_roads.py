"""A development script for a profiler: matmul's Hopper road at 4096^3 (TF32 128x256x32 and the split fp32x3
128x128x32, both with B K-major) and cuBLAS TF32, two calls each, on one sm_90 GPU:

    ncu --kernel-name "regex:_hopper_gemm|nvjet" --launch-skip 3 --launch-count 3 --set full \\
        python3 tools/profile_gemm_roads.py

Not the record (that is ``mage measure`` and tools/sweep_gemm_hopper.py); its profiles go to kernels/NOTES.md."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root
from kernels.matmul import triton_hopper as hop  # noqa: E402

n = 4096
A, B = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
Bt, out = B.t().contiguous(), torch.empty(n, n, device="cuda")
for _ in range(2):
    hop.gemm(A, Bt, precision="tf32", b_nk=True, out=out, **hop.TILES["tf32"]["m128_n256_k32_w8_s3_ps"])
    hop.gemm(A, Bt, precision="fp32x3", b_nk=True, out=out, **hop.TILES["fp32x3"]["m128_n128_k32_w8_s3_ps_split"])
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.matmul(A, B, out=out)
    torch.backends.cuda.matmul.allow_tf32 = False
torch.cuda.synchronize()
