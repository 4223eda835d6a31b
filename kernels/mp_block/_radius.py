"""The message-passing block's graph: a radius graph of random points in a periodic 3-D box, built on
the host with a cell list, vectorised with torch and in bounded memory.

Geometry. n points uniform in a cube of side L = n^(1/3) (one point per unit volume), periodic
(minimum-image distances, as a simulation cell of a material or a liquid is), joined when closer than
r = (3 deg / 4 pi)^(1/3): the ball of radius r then holds ``deg`` points on average, so the mean degree
is deg (n - 1) / n wherever the box is wider than 2r, with Poisson spread around it (low ``deg`` leaves
isolated nodes). Edge weights: the smooth cutoff (1 - (d/r)^2)^2, one at d = 0, zero with zero slope
at d = r, as an interatomic model's envelope is.

Numbering. Nodes are numbered in cell order (the points sorted by their grid cell), the preprocessing
a graph code does so that a node's neighbours sit near it in memory; columns are sorted within rows.

Cell list. Cells of side >= r, so every neighbour of a point lies in its own cell or one of the 26
around it. Candidates (i, j) are enumerated chunk by chunk of points (about 2^22 candidates a chunk,
so memory stays bounded at any n), their distances taken, and the pairs within r kept. A box of fewer
than 3 cells a side would list a cell twice among the 27; such boxes are small and take all pairs.
"""
from __future__ import annotations

import math

import torch

CANDIDATES = 1 << 22  # candidate pairs per chunk: a few hundred MB of temporaries at most


def radius(deg: float) -> float:
    """The cutoff that puts ``deg`` points in a ball at unit density."""
    return (3.0 * max(float(deg), 0.0) / (4.0 * math.pi)) ** (1.0 / 3.0)


def box_side(n: int) -> float:
    return float(max(n, 1)) ** (1.0 / 3.0)


def _within(pos, i, j, L, r2):
    """The candidate pairs closer than r (minimum image), as (i, j, d^2); never a point with itself."""
    d = pos[j] - pos[i]
    d -= L * torch.round(d / L)  # the nearest periodic image: d -> -d when i and j swap, so symmetric
    d2 = (d * d).sum(1)
    keep = (d2 < r2) & (i != j)
    return i[keep], j[keep], d2[keep]


def _all_pairs(pos, L, r2):
    n = pos.shape[0]
    rows = max(1, CANDIDATES // max(n, 1))
    parts = []
    for a in range(0, n, rows):
        i = torch.arange(a, min(a + rows, n)).repeat_interleave(n)
        j = torch.arange(n).repeat(min(a + rows, n) - a)
        parts.append(_within(pos, i, j, L, r2))
    return parts


def _cell_pairs(pos, cell3, nc, L, r2):
    """Each pair once: a point looks into its own cell (partners numbered after it) and the 13 cells
    of a half shell (offsets after (0, 0, 0) in lexicographic order); the mirror images are added by
    the caller. Half the candidates of looking into all 27 cells."""
    n = pos.shape[0]
    cid = (cell3[:, 0] * nc + cell3[:, 1]) * nc + cell3[:, 2]
    count = torch.bincount(cid, minlength=nc ** 3)
    start = torch.cumsum(count, 0) - count  # points are numbered in cell order: a cell is a range
    step = torch.tensor([-1, 0, 1])
    offsets = torch.cartesian_prod(step, step, step)[13:]  # (0, 0, 0) and the 13 after it
    k = offsets.shape[0]
    per_point = k * max(1.0, n / nc ** 3) * 2  # a generous guess of candidates a point: the chunk size
    rows = max(1, int(CANDIDATES / per_point))
    parts = []
    for a in range(0, n, rows):
        b = min(a + rows, n)
        near = (cell3[a:b, None, :] + offsets[None]) % nc  # [m, 14, 3]
        ncid = ((near[..., 0] * nc + near[..., 1]) * nc + near[..., 2]).reshape(-1)
        cnt = count[ncid]
        owner = torch.repeat_interleave(torch.arange(ncid.numel()), cnt)  # one entry a candidate
        first = torch.cumsum(cnt, 0) - cnt
        j = start[ncid][owner] + (torch.arange(owner.numel()) - first[owner])
        i = a + torch.div(owner, k, rounding_mode="floor")
        own = owner % k == 0  # the point's own cell: keep each pair once
        keep = ~own | (j > i)
        parts.append(_within(pos, i[keep], j[keep], L, r2))
    return parts


def radius_graph(pos: torch.Tensor, deg: float):
    """The points renumbered in cell order, and (rowptr, col, w) as CPU int32, int32, float32 tensors:
    the radius graph of ``pos`` [n, 3] (CPU float in [0, L)^3) at ``radius(deg)``. Symmetric: j in
    N(i) iff i in N(j), with the same weight."""
    n = pos.shape[0]
    L, r = box_side(n), radius(deg)
    rowptr = torch.zeros(n + 1, dtype=torch.int64)
    nc = max(int(L // (r * 1.0001)), 1) if r > 0 else 1  # cells a little wider than r: rounding in
    # the cell index cannot then put two points closer than r two cells apart
    cell3 = (pos * (nc / L)).long().clamp_(0, nc - 1)
    order = torch.argsort((cell3[:, 0] * nc + cell3[:, 1]) * nc + cell3[:, 2], stable=True)
    pos, cell3 = pos[order], cell3[order]
    if n == 0 or r == 0.0:
        return pos, rowptr.int(), torch.zeros(0, dtype=torch.int32), torch.zeros(0)
    r2 = r * r
    if nc < 3:
        parts = _all_pairs(pos, L, r2)
    else:  # each pair found once: add its mirror image
        parts = _cell_pairs(pos, cell3, nc, L, r2)
        parts += [(j, i, d2) for i, j, d2 in parts]
    i = torch.cat([p[0] for p in parts])
    j = torch.cat([p[1] for p in parts])
    d2 = torch.cat([p[2] for p in parts])
    order = torch.argsort(i * n + j)  # rows, then sorted columns within each row
    i, j, d2 = i[order], j[order], d2[order]
    rowptr[1:] = torch.cumsum(torch.bincount(i, minlength=n), 0)
    w = (1.0 - d2 / r2) ** 2
    return pos, rowptr.int(), j.int(), w.float()
