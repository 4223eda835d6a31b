"""A development probe of the Linear operator on one GPU: V-JEPA 2 ViT-L's four Linear shapes (2,048
tokens), cuBLAS (F.linear, then the GELU where the MLP has one) against our epilogue GEMM on the plain road
(its module default tile, and the tile the operator uses, 'plain128'), on the Hopper road, and the
operator's whole call ('op', host dispatch included), at bf16 and FP32; kernel time from do_bench
(median, L2 flushed), each with its error against float64:

    python3 tools/probe_linear.py                # from the repository root

Not the record; data/h100/models/linear_probe.txt is its output of 2026-12-05 (before 'plain128')."""
import torch, torch.nn.functional as F, triton.testing as tt
from kernels.matmul import triton_epilogue as te
M = 2048
for dt in (torch.bfloat16, torch.float32):
    torch.backends.cuda.matmul.allow_tf32 = False
    for K, N, gelu in ((1024, 3072, False), (1024, 1024, False), (1024, 4096, True), (4096, 1024, False)):
        x, W, b = (torch.randn(M, K, device="cuda", dtype=dt), torch.randn(N, K, device="cuda", dtype=dt) / K**.5,
                   torch.randn(N, device="cuda", dtype=dt))
        want = F.linear(x.double(), W.double(), b.double()); want = F.gelu(want) if gelu else want
        out = x.new_empty(M, N)
        fns = {"cublas": lambda: (F.gelu(F.linear(x, W, b)) if gelu else F.linear(x, W, b)),
               "plain": lambda: te.gemm_epilogue(x, W, b, out, gelu=gelu),
               "plain128": lambda: te.gemm_epilogue(x, W, b, out, gelu=gelu, **te.LINEAR_TILES[dt]),
               "hopper": lambda: te.hopper_epilogue(x, W, b, out, gelu=gelu),
               "op": lambda: torch.ops.mage.triton_linear(x, W, b, gelu)}
        line = f"{str(dt)[6:]:9s} K={K} N={N} gelu={int(gelu)}"
        for k, f in fns.items():
            out.fill_(float("nan")); y = f(); err = float((y.double() - want).norm() / want.norm())
            ms = tt.do_bench(f, warmup=10, rep=60)
            line += f" | {k} {ms*1000:7.1f} us err {err:.1e}"
        print(line, flush=True)
