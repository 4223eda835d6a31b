"""The Gluon first kernel checked without a GPU: a torch reference with the rule's roundings (the GPU probe
compares the kernel with it and with the rule's own kernel), and its compile for sm_90a."""
from __future__ import annotations

from ._gluon_first import DEFAULT, _layouts, first_in_kernel
from ._gluon_parts import BR, C_WIDTH, NB


def reference_first(z, mask, gamma, beta, w_in, b_in, eps):
    """CPU (or any device) torch reference with the rule's roundings: the LayerNorm in FP32 with the overflow
    guard, zn rounded to bf16 once, the products of bf16 values summed in float64 then rounded to FP32 (the GPU
    sums in FP32 in its own order: compare with a tolerance), bias (bf16) added in FP32, exact sigmoid in FP32,
    a, b, g rounded to bf16 once. Returns a, b [B, H, N, N] and g [B*N*N, C], bf16."""
    import torch
    C, N = z.shape[-1], z.shape[-2]
    B = z.shape[0] if z.dim() == 4 else 1
    H = (w_in.shape[1] - C) // 4
    R = B * N * N
    f32 = torch.float32
    x = z.reshape(R, C).to(f32)
    amax = x.abs().amax(1)
    e = ((amax.view(torch.int32) >> 23) - 127).clamp(0, 126)
    s = ((127 - e) << 23).view(f32)
    xs = x * s[:, None]
    mean = xs.sum(1, dtype=f32) / C
    d = xs - mean[:, None]
    var = (d * d).sum(1, dtype=f32) / C
    den = var + torch.tensor(eps, dtype=f32) * s * s
    rstd = torch.where(den > 0, 1.0 / torch.sqrt(den), torch.zeros_like(den))
    gam = gamma.to(torch.bfloat16).to(f32)
    bet = beta.to(torch.bfloat16).to(f32)
    zn = (d * rstd[:, None] * gam[None, :] + bet[None, :]).to(torch.bfloat16)
    w = w_in.to(torch.bfloat16)
    p = (zn.double() @ w.double()).to(f32) + b_in.to(torch.bfloat16).to(f32)[None, :]
    m = mask.reshape(R).to(torch.bfloat16).to(f32)[:, None]
    a = (torch.sigmoid(p[:, :H]) * p[:, H:2 * H] * m).to(torch.bfloat16)
    b = (torch.sigmoid(p[:, 2 * H:3 * H]) * p[:, 3 * H:4 * H] * m).to(torch.bfloat16)
    g = torch.sigmoid(p[:, 4 * H:]).to(torch.bfloat16)
    cm = lambda t: t.reshape(B, N * N, H).permute(0, 2, 1).reshape(B, H, N, N).contiguous()  # noqa: E731
    return cm(a), cm(b), g


def compile_variant(**config) -> dict:
    """The kernel with ``config`` (DEFAULT otherwise) compiled for sm_90a here: ``kernels._triton.sm90.gluon_resources``,
    as the JIT specialises a launch whose pointers and sizes are multiples of 16."""
    from kernels._triton import sm90
    c = dict(DEFAULT, **config)
    L = _layouts()
    desc = lambda block, layout: f"tensordesc<bf16[{block[0]}, {block[1]}],{layout!r}>"  # noqa: E731
    sig = dict(z_desc=desc([BR, C_WIDTH], L["z"]), w_desc=desc([C_WIDTH, NB], L["w"]), a_desc=desc([NB, BR], L["st"]),
               b_desc=desc([NB, BR], L["st"]), g_desc=desc([BR, NB], L["st"]), M="*bf16", GAMMA="*bf16",
               BETA="*bf16", BIAS="*bf16", R="i32", NN="i32", nprog="i32", eps="fp32", **{k: "constexpr" for k in c})
    return sm90.gluon_resources(first_in_kernel, sig, c, aligned=("M", "GAMMA", "BETA", "BIAS", "R", "NN"))
