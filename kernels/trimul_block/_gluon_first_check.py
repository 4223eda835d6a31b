"""The Gluon first kernel checked without a GPU: a torch reference with the rule's roundings (the GPU probe
compares the kernel with it and with the rule's own kernel), and its compile for sm_90a."""
from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import triton

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


# ----------------------------------------------------------------------------------------------------------------------
# compile for sm_90a on the CPU
# ----------------------------------------------------------------------------------------------------------------------

_BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"


def sass_facts(sass):
    """Per register-budget region (code after a USETMAXREG, in program order): the highest register used + 1.
    Plus local-memory traffic (spills), wgmma waits and a few instruction counts."""
    regions, order, cur = {}, [], "entry"
    for line in sass.splitlines():
        mm = re.search(r"USETMAXREG\.\w+\.CTAPOOL\s+(?:UP\d,\s*)?(0x[0-9a-f]+)", line)
        if mm:
            cur = int(mm.group(1), 16)
            order.append(cur)
            continue
        regs = [int(r) for r in re.findall(r"\bR(\d+)\b", line)]
        if regs:
            regions[cur] = max(regions.get(cur, 0), max(regs) + 1)
    count = lambda pat: len(re.findall(pat, sass))  # noqa: E731
    return dict(max_reg_by_budget=regions, setmaxnreg_order=order, local_ldst=count(r"\b(?:LDL|STL)\b"),
                depbar=sorted(set(re.findall(r"WARPGROUP\.DEPBAR\.LE gsb0, (0x[0-9a-f]+)", sass))),
                hgmma=count(r"HGMMA"), ldsm=count(r"\bLDSM"), stsm=count(r"\bSTSM"), sts=count(r"\bSTS\b"),
                lds=count(r"\bLDS\b"), bar_sync=count(r"\bBAR\.SYNC"), utmastg=count(r"UTMASTG"),
                utmaldg=count(r"UTMALDG"), mufu=count(r"\bMUFU"))


def _desc_sig(block, layout):
    return f"tensordesc<bf16[{block[0]}, {block[1]}],{layout!r}>"


def compile_variant(keep=None, **config):
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    c = dict(DEFAULT, **config)
    L = _layouts()
    sig = dict(z_desc=_desc_sig([BR, C_WIDTH], L["z"]), w_desc=_desc_sig([C_WIDTH, NB], L["w"]),
               a_desc=_desc_sig([NB, BR], L["st"]), b_desc=_desc_sig([NB, BR], L["st"]),
               g_desc=_desc_sig([BR, NB], L["st"]), M="*bf16", GAMMA="*bf16", BETA="*bf16", BIAS="*bf16", R="i32",
               NN="i32", nprog="i32", eps="fp32")
    sig.update({k: "constexpr" for k in c})
    names = list(sig)
    attrs = {(names.index(a),): [["tt.divisibility", 16]] for a in ("M", "GAMMA", "BETA", "BIAS", "R", "NN")}
    k = triton.compile(GluonASTSource(fn=first_in_kernel, signature=sig, constexprs=c, attrs=attrs),
                       target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4, num_stages=1))
    with tempfile.TemporaryDirectory() as d:
        cubin = Path(d) / "k.cubin"
        cubin.write_bytes(k.asm["cubin"])
        usage = subprocess.run([str(_BIN / "cuobjdump"), "--dump-resource-usage", str(cubin)], capture_output=True,
                               text=True, check=True).stdout
        sass = subprocess.run([str(_BIN / "cuobjdump"), "-sass", str(cubin)], capture_output=True, text=True,
                              check=True).stdout
    field = lambda key: int(re.search(rf"{key}:(\d+)", usage).group(1))  # noqa: E731
    ptx = k.asm["ptx"]
    res = dict(REG=field("REG"), STACK=field("STACK"), shared=k.metadata.shared,
               threads=int(m.group(1)) if (m := re.search(r"\.reqntid\s+(\d+)", ptx)) else None,
               setmaxnreg=re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)", ptx))
    res.update(sass_facts(sass))
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        for ext in ("ttgir", "llir", "ptx"):
            (Path(keep) / f"k.{ext}").write_text(k.asm[ext])
        (Path(keep) / "k.sass").write_text(sass)
        (Path(keep) / "k.cubin").write_bytes(k.asm["cubin"])
    return res

