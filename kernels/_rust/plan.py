"""neighbor_agg's work plan (which warp sums which edges), built by the library once per graph and
cached by its rowptr tensor, like a sparse library's matrix descriptor; partial sums and flags once per
feature width F."""
from __future__ import annotations

import ctypes
import weakref

import torch

from . import _call, library

PLAN_FIELDS = 6  # row, first edge, end edge, first partial slot, part, parts (the kernel's PLAN_FIELDS)
_PLANS: dict = {}


class Plan:
    def __init__(self, rowptr: torch.Tensor):
        lib = library()
        rp = rowptr.to("cpu", torch.int32).contiguous()
        n = rp.numel() - 1
        tasks, parts = ctypes.c_int64(), ctypes.c_int64()
        as_i32 = ctypes.POINTER(ctypes.c_int32)
        src = ctypes.cast(rp.data_ptr(), as_i32)
        split = lib.mage_rust_neighbor_split()
        _call("mage_rust_neighbor_plan", src, n, split, None, 0, ctypes.byref(tasks), ctypes.byref(parts))
        self.tasks, self.parts, self.split = tasks.value, parts.value, split
        self.entries = None
        if parts.value:
            host = torch.empty(tasks.value * PLAN_FIELDS, dtype=torch.int32)
            _call("mage_rust_neighbor_plan", src, n, split, ctypes.cast(host.data_ptr(), as_i32), host.numel(),
                  ctypes.byref(tasks), ctypes.byref(parts))
            self.entries = host.to(rowptr.device)
        self.scratch = {}  # F -> (partial sums [parts, F], flags [parts])

    def buffers(self, F: int, device):
        """(plan entries, partial sums, flags) for width F: tensors, or 0 for each when no row is split."""
        if not self.parts:
            return 0, 0, 0
        if F not in self.scratch:
            self.scratch[F] = (torch.empty((self.parts, F), dtype=torch.float32, device=device),
                               torch.zeros(self.parts, dtype=torch.int32, device=device))
        ws, flags = self.scratch[F]
        return self.entries, ws, flags


def plan_for(graph) -> Plan:
    """The plan of ``graph``'s rowptr as it is now: keyed by the tensor and its version counter, so a
    rowptr rewritten in place (and a graph built again from it) gets a new plan, not the old one's rows.
    A plan whose rowptr is gone is dropped (with its device buffers) when the next plan is made."""
    rowptr = graph.rowptr
    key = (id(rowptr), rowptr._version)
    hit = _PLANS.get(key)
    if hit is not None and hit[0]() is rowptr:
        return hit[1]
    for k in [k for k, (ref, _) in _PLANS.items() if ref() is None or (k[0] == key[0] and ref() is rowptr)]:
        del _PLANS[k]
    plan = Plan(rowptr)
    _PLANS[key] = (weakref.ref(rowptr), plan)
    return plan
