"""A development probe: the triangle update's contraction at N = 1,024 (H = 128 channels, one complex, bf16),
o_h = a_h b_h^T, by cuBLAS through the calls PyTorch offers, kernel time and kernel names from one profile of
10 calls each, each checked against a float64 product first:

    python3 tools/probe_contraction.py
    CUBLASLT_WORKSPACE_SIZE=262144 python3 tools/probe_contraction.py   # the library's workspaces (KiB) larger:
    CUBLAS_WORKSPACE_CONFIG=:262144:2 python3 tools/probe_contraction.py  # kernels that need more become choices

Why: under Nsight Compute, cuBLAS ran cuEquivariance's contraction (same sizes, same TNT layout) on a 128x128
kernel 50 us faster than the 256x128 one it chose for ours (kernels/NOTES.md). Which call or library setting
picks which kernel is what this prints. Not the record (that is ``mage measure``)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: mage


def _ways(at, bt, o):
    """(name, library, call): each way of asking cuBLAS for the same product."""
    import torch
    a3, b3, o3 = at.flatten(0, 1), bt.flatten(0, 1), o.flatten(0, 1)
    return [
        ("matmul", "default", lambda: torch.matmul(at, bt.transpose(-1, -2), out=o)),
        ("bmm 3-d", "default", lambda: torch.bmm(a3, b3.transpose(1, 2), out=o3)),
        ("matmul", "cublaslt", lambda: torch.matmul(at, bt.transpose(-1, -2), out=o)),
        ("bmm 3-d", "cublaslt", lambda: torch.bmm(a3, b3.transpose(1, 2), out=o3)),
        ("o^T = b a^T", "default", lambda: torch.matmul(bt, at.transpose(-1, -2), out=o)),
        # the channels in parts: cuBLAS's heuristic is asked about a smaller batch
        ("2 x 64 ch", "default", lambda: _parts(at, bt, o, 2)),
        ("4 x 32 ch", "default", lambda: _parts(at, bt, o, 4)),
    ]


def _parts(at, bt, o, n):
    import torch
    for part in torch.arange(at.shape[1]).tensor_split(n):  # every channel, whatever n divides
        s = slice(int(part[0]), int(part[-1]) + 1) if len(part) else slice(0, 0)
        torch.matmul(at[:, s], bt[:, s].transpose(-1, -2), out=o[:, s])


def main():
    import torch
    from mage.profile import profile
    g = torch.Generator(device="cuda").manual_seed(1)
    at, bt = (torch.randn(1, 128, 1024, 1024, device="cuda", generator=g).to(torch.bfloat16) for _ in range(2))
    o = torch.empty_like(at)
    want = (at[0, :4].double() @ bt[0, :4].double().transpose(-1, -2))
    import os
    print({k: os.environ.get(k) for k in ("CUBLASLT_WORKSPACE_SIZE", "CUBLAS_WORKSPACE_CONFIG")},
          "bf16 reduced-precision reduction:", torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction)
    for name, lib, call in _ways(at, bt, o):
        torch.backends.cuda.preferred_blas_library(lib)
        o.fill_(float("nan"))
        call()
        torch.cuda.synchronize()
        got = o[0, :4].double() if "o^T" not in name else o[0, :4].double().transpose(-1, -2)
        err = float((got - want).norm() / want.norm())
        p = profile(call, iters=10)
        print(f"{name:12s} {lib:9s} err {err:.1e} {p.kernel_us:8.1f} us", {k[:48]: round(u, 1) for k, u in
                                                                           p.kernel_us_by_name.items()}, flush=True)
    torch.backends.cuda.preferred_blas_library("default")


if __name__ == "__main__":
    main()
