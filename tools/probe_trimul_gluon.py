"""On an sm_90 GPU: the fused road's Gluon first kernel (kernels/trimul_block/_gluon_first.py) against the rule's
roundings (``_gluon_first_check.reference_first``) and against the rule's own first kernel launched as its road
launches it, at N = 96, 256, 1024 (one complex) and N = 36 (two: 1,296 pairs a complex, so tiles cross from one to
the next), normal and heavy-tailed z (rows near 1e25, a constant row), a random 0/1 mask, outputs poisoned with NaN
first; then both kernels' time by the profiler (kernel time, mean of 20 calls). A development probe: its numbers go
to kernels/NOTES.md.

    python3 tools/probe_trimul_gluon.py [--quick] [--no-time]      # from the repository root
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels.trimul_block import _gluon_first as K  # noqa: E402
from kernels.trimul_block import _gluon_first_check as KC  # noqa: E402

RULE = "fused_r64_h32_tma2_r64_fsig_ab_g64_cublas"
EPS = 1e-5


# the rule's first kernel, launched as _fused.update launches it for the rule's config (the grid road)

def project_first(z, mask, gamma, beta, w_in, b_in, at, bt, g):
    from kernels._triton import common
    from kernels.trimul_block import _fused as F
    from kernels.trimul_block.tiles import TILES
    c = TILES["bf16"][RULE]
    assert not (c["IN_CM"] or c["IN_FOLD"] or c["IN_PIPE"] or c["IN_RESIDENT"] or c["FIN_ZGATE"]), "rule changed"
    N, C = z.shape[-2], z.shape[-1]
    B = z.shape[0] if z.dim() == 4 else 1
    H = (w_in.shape[1] - C) // 4
    R, NN = B * N * N, N * N
    sdt = z.dtype
    zc, m = z.reshape(R, C).to(sdt).contiguous(), mask.reshape(R).to(sdt).contiguous()
    gi, bi, wi, bb = (t.to(sdt).contiguous() for t in (gamma, beta, w_in, b_in))
    wi, bb, wd2, wd1, wb, wg = F.first_weights(w_in, b_in, wi, bb, C, H, c, F._width(C))
    offs_64 = max(at.numel(), R * C) >= common.INT32_LIMIT
    flags = dict(BF16=True, EMULATE=False, PRECISION="ieee", OFFS_64=offs_64)
    F.first_grid(zc, m, gi, bi, wi, bb, at, bt, g, (wd2, wd1, wb, wg), F.store_descriptors(at, bt, g, B, NN, C, H, c),
                 NN, C, H, c, flags)
    return at, bt, g


def make_inputs(B, N, kind, seed=0, C=128, H=128, dev="cuda"):
    gen = torch.Generator(device="cpu").manual_seed(seed)
    shape = (B, N, N, C)
    z = torch.randn(shape, generator=gen)
    if kind == "heavy":  # log-normal scales per element and per row, a few rows past the squares' overflow
        z = z * torch.exp(1.5 * torch.randn(shape, generator=gen)) * torch.exp(2.0 * torch.randn((B, N, N, 1), generator=gen))
        z.view(-1, C)[::997] *= 1e25  # |x| up to ~1e26: x^2 overflows FP32 without the guard's scaling
        z.view(-1, C)[5] = 3.0  # a constant row (variance 0)
    z = z.to(torch.bfloat16)
    mask = (torch.rand((B, N, N), generator=gen) > 0.25).float()
    gamma = 1 + 0.2 * torch.randn(C, generator=gen)
    beta = 0.2 * torch.randn(C, generator=gen)
    w_in = torch.randn((C, 4 * H + C), generator=gen) / C ** 0.5
    b_in = 0.2 * torch.randn(4 * H + C, generator=gen)
    return [t.to(dev) for t in (z, mask, gamma, beta, w_in, b_in)]


def poisoned(B, N, C=128, H=128, dev="cuda"):
    a = torch.full((B, H, N, N), float("nan"), dtype=torch.bfloat16, device=dev)
    return a, torch.full_like(a, float("nan")), torch.full((B * N * N, C), float("nan"), dtype=torch.bfloat16, device=dev)


def _ulps(x, ref):
    """|x - ref| in units of bf16's spacing at |ref| (2^(e-7))."""
    r = ref.float()
    e = torch.floor(torch.log2(r.abs().clamp_min(2.0 ** -126)))
    return ((x.float() - r).abs() / torch.exp2(e - 7)).nan_to_num(float("inf"))


def compare(name, got, ref, atol=2e-3, max_ulp=2.0, frac_ok=0.999):
    got, ref = got.float(), ref.float()
    nan = int(torch.isnan(got).sum())
    diff = (got - ref).abs()
    u = _ulps(got, ref)
    close = (u <= max_ulp) | (diff <= atol)
    frac = float(close.float().mean())
    exact = float((got == ref).float().mean())
    ok = nan == 0 and frac >= frac_ok and float(diff.max()) <= 0.05 * max(1.0, float(ref.abs().max()))
    print(f"    {name:>10}: NaN {nan:>8}  exact {exact:.5f}  within {max_ulp:g} ulp/atol {frac:.6f}  "
          f"max|d| {float(diff.max()):.3e}  max ulp {float(u.max()):.1f}  {'ok' if ok else 'FAIL'}")
    return ok


def check(B, N, kind, do_project=True, **config):
    z, mask, gamma, beta, w_in, b_in = make_inputs(B, N, kind)
    a, b, g = poisoned(B, N)
    K.first_kernel(z, mask, gamma, beta, w_in, b_in, a, b, g, EPS, **config)
    torch.cuda.synchronize()
    ra, rb, rg = KC.reference_first(z, mask, gamma, beta, w_in, b_in, EPS)
    print(f"  B={B} N={N} z={kind} config={config or 'default'}")
    ok = all([compare("a vs ref", a, ra), compare("b vs ref", b, rb), compare("g vs ref", g, rg)])
    if do_project:
        pa, pb, pg = poisoned(B, N)
        project_first(z, mask, gamma, beta, w_in, b_in, pa, pb, pg)
        torch.cuda.synchronize()
        ok &= all([compare("a vs rule", a, pa), compare("b vs rule", b, pb), compare("g vs rule", g, pg)])
        compare("rule vs ref", pa, ra)  # for scale: the rule's own distance from the reference
    return ok


def kernel_us(fn, match, iters=20, warmup=5):
    """Kernel time per call of the kernels named ``match`` in ``fn``'s calls (the mask's conversion left out)."""
    from mage.profile import profile
    by_name = profile(fn, iters=iters, warmup=warmup).kernel_us_by_name
    hits = [v for k, v in by_name.items() if k == match or k.startswith(match + "(")]
    return sum(hits), len(hits)


def timing(N=1024, B=1, configs=None):
    z, mask, gamma, beta, w_in, b_in = make_inputs(B, N, "normal")
    a, b, g = poisoned(B, N)
    pa, pb, pg = poisoned(B, N)
    print(f"timing at B={B} N={N} on {torch.cuda.get_device_name()}:")
    us, n = kernel_us(lambda: project_first(z, mask, gamma, beta, w_in, b_in, pa, pb, pg), "_in_kernel")
    print(f"  rule _in_kernel               {us:9.1f} us  ({n} kernel names matched)")
    for cfg in configs or [dict(), dict(PIPE=False), dict(STB=1)]:
        us, n = kernel_us(lambda: K.first_kernel(z, mask, gamma, beta, w_in, b_in, a, b, g, EPS, **cfg),
                          "first_in_kernel")
        print(f"  gluon first_in_kernel {str(cfg or 'default'):>24} {us:9.1f} us  ({n} kernel names matched)")
    # bytes: z in, a b g out
    gb = (B * N * N * 128 * 2 * 4) / 1e9
    print(f"  (moves {gb:.2f} GB: {gb / 3.35e-3:.0f} us at 3.35 TB/s)")


if __name__ == "__main__":
    assert torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9, "needs an sm_90 GPU"
    quick = "--quick" in sys.argv
    cases = [(1, 96), (1, 256), (2, 36)] + ([] if quick else [(1, 1024)])
    ok = True
    for B, N in cases:
        for kind in ("normal", "heavy"):
            ok &= check(B, N, kind)
    for cfg in (dict(PIPE=False), dict(STB=1)):
        ok &= check(1, 96, "heavy", do_project=False, **cfg)
        ok &= check(2, 36, "normal", do_project=False, **cfg)
    print("ALL OK" if ok else "SOME FAILED")
    if "--no-time" not in sys.argv:
        timing()
