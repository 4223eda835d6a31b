"""The fused road's first kernel with its weights resident (config key ``IN_RESIDENT``; listed for bf16).

``_fused._in_kernel`` reads all of w_in for every tile of pairs: at C = H = 128 and bf16 that is 160 KB of
weights for 16 KB of z, and a profile found the first kernel bound by that traffic through L1 (70% busy,
DRAM 24%). Here one program per SM loads w_in once, as three tiles (a's gates and values interleaved, b's,
and the output gate's), and walks the pair tiles pid, pid + #programs, ...: the compiler keeps the
loop-invariant tiles in shared memory, where wgmma reads them (compiled for sm_90a, the tiles' allocations
sit before the loop), so the weights cross from L2 once an SM instead of once a tile.

It holds the whole of w_in: 2 (4 H' + C') C' bytes at bf16 for the padded widths C', H', 160 KB at the
models' 128 channels; FP32 there would need twice that, past a block's shared memory. Widths past its
budget, or past 128 channels (wider tiles spill), are refused (``_fused_config.config_limits``).
"""
from __future__ import annotations

import triton
import triton.language as tl

from ._fused_config import RESIDENT_BYTES, resident_bytes  # noqa: F401 - the budget, where it applies
from ._fused_rows import _layernorm_rows, _round, _tile_pairs


# <kernel>
@triton.jit
def _in_resident_kernel(
    Z, GAMMA, BETA, W, BIAS, M, AT, BT, G,  # as _fused._in_kernel, w_in and its bias in IN_JOIN's order
    NN, C, H, eps, tiles_total,
    NUM_PROGRAMS: tl.constexpr, BLOCK_R: tl.constexpr, CW: tl.constexpr, HW: tl.constexpr,
    BF16: tl.constexpr, EMULATE: tl.constexpr, PRECISION: tl.constexpr, OFFS_64: tl.constexpr,
):
    cs = tl.arange(0, CW)
    cmask = cs < C
    ps = tl.arange(0, 2 * HW)
    pmask = ps < 2 * H
    ldw = 4 * H + C
    # w_in's three tiles, loaded once: loop invariants, kept in shared memory for the dots below
    wmask = cmask[:, None] & pmask[None, :]
    wa = tl.load(W + cs[:, None] * ldw + ps[None, :], mask=wmask, other=0.0)
    wb = tl.load(W + cs[:, None] * ldw + 2 * H + ps[None, :], mask=wmask, other=0.0)
    wg = tl.load(W + cs[:, None] * ldw + 4 * H + cs[None, :], mask=cmask[:, None] & cmask[None, :], other=0.0)
    bias_a = tl.load(BIAS + ps, mask=pmask, other=0.0).to(tl.float32)
    bias_b = tl.load(BIAS + 2 * H + ps, mask=pmask, other=0.0).to(tl.float32)
    bias_g = tl.load(BIAS + 4 * H + cs, mask=cmask, other=0.0).to(tl.float32)
    hs = tl.arange(0, HW)
    hmask = hs < H
    for t in range(tl.program_id(0), tiles_total, NUM_PROGRAMS):
        rows, cm, rmask, nn = _tile_pairs(t, NN, H, BLOCK_R, OFFS_64)
        zn = _layernorm_rows(Z + rows[:, None] * C + cs[None, :], rmask[:, None] & cmask[None, :], GAMMA, BETA,
                             cs, cmask, C, eps, CENTER=not BF16)
        zn = _round(zn, BF16, EMULATE).to(wa.dtype)  # the GEMM's operand, rounded once
        m = tl.load(M + rows, mask=rmask, other=0.0).to(tl.float32)
        dst = cm[:, None] + hs[None, :] * nn
        smask = rmask[:, None] & hmask[None, :]
        pa = tl.dot(zn, wa, input_precision=PRECISION) + bias_a[None, :]
        ga, va = tl.split(tl.reshape(pa, (BLOCK_R, HW, 2)))  # columns gate 0, value 0, gate 1, ...
        tl.store(AT + dst, _round(tl.sigmoid(ga) * va * m[:, None], BF16, EMULATE), mask=smask)
        pb = tl.dot(zn, wb, input_precision=PRECISION) + bias_b[None, :]
        gb, vb = tl.split(tl.reshape(pb, (BLOCK_R, HW, 2)))
        tl.store(BT + dst, _round(tl.sigmoid(gb) * vb * m[:, None], BF16, EMULATE), mask=smask)
        g = tl.sigmoid(tl.dot(zn, wg, input_precision=PRECISION) + bias_g[None, :])
        tl.store(G + rows[:, None] * C + cs[None, :], _round(g, BF16, EMULATE), mask=rmask[:, None] & cmask[None, :])
# </kernel>


def programs(tiles_total: int, device) -> int:
    """One program an SM (none idle at small sizes); under the interpreter a few, so its loop is walked."""
    if device.type != "cuda":
        return max(1, min(tiles_total, 3))
    import torch
    return max(1, min(tiles_total, torch.cuda.get_device_properties(device).multi_processor_count))
