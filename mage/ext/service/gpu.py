"""The service experiment on a CUDA device: the executor that serves a batch of requests of one
implementation (inputs from host memory, the call, the outputs back to host memory). The session that
runs the loops of ``mage.ext.service.loops`` over the selected blocks and writes their rows is
``mage.ext.service.session``.

A request's inputs live in host memory, pinned or pageable (``host_mem``), one value per per-request
argument (the ``batch`` facet's ``axes``); the shared weights are on the device before the first request. Serving a
batch copies each request's inputs into its slice of a device buffer (H2D: along an axis the requests
share, on a new leading axis with ``Batching.stack``, or as the spec's ``Batching.join`` lays them out,
which may also shift indices on the device), calls the implementation on the batch, copies the batch's output back into one host buffer (D2H: each request's output is its slice
there) and waits for that copy. Arguments the spec marks ``resident`` (a graph's structure) grow with
the batch but do not travel with a request: they are built on the device once per batch size. CUDA
events split the batch into its parts on the device's timeline; the loop's wall clock gives the whole, and what the events do not cover (launch work before the first
copy, waking up from the synchronisation) is the part 'other'.

Batches are padded to the next power of two (up to the batcher's limit), as a server with compiled or
graph-captured code does, so each implementation sees a handful of shapes (one compilation or graph
each, all made during the warm-up) rather than one per batch size. The padding rows hold earlier
requests' inputs; their outputs are computed and not copied back.
"""
from __future__ import annotations

import time

from mage import facets
from mage.errors import MageInputError
from mage.ext.service import loops as sv
from mage.ops import Op, shape_key

# host memory a pool of requests drawn one by one may take (at least two requests are drawn)
POOL_BYTES = 1 << 30
DRAWN_POOL = 16  # requests drawn one by one (stack, join): enough that consecutive ones never share memory
_DRAWS: dict = {}  # the last pool drawn one by one, on the host, unpinned


def check_batching(spec: Op) -> None:
    """A served op says how its requests batch, naming its own arguments."""
    b = facets.get(spec, "batch", None)
    if b is None:
        raise MageInputError("serve", "--ops", f"{spec.name} does not say how its requests batch (its batch facet)")
    unknown = [a for a in (*b.axes, *b.resident) if a not in spec.args]
    if unknown or not b.axes or set(b.axes) & set(b.resident):
        raise MageInputError(spec.name, "batch",
                             f"axes and resident must name distinct arguments of {spec.args}, got axes "
                             f"{list(b.axes)}, resident {list(b.resident)}")
    if b.mode != "concat" and (b.resident or any(ax != 0 for ax in b.axes.values()) or b.out_axis != 0):
        raise MageInputError(spec.name, "batch", "stacked or joined requests lie along axis 0 of every argument "
                             "in axes and of the output, with no resident arguments")


def buckets(limit: int) -> list[int]:
    return sv.batch_sizes(limit)


class HostEvent:
    """A stand-in for ``torch.cuda.Event`` on the host's clock, so the executor's data movement (the
    slices, the padding, the outputs) runs and is tested on a machine without a GPU."""

    def __init__(self, enable_timing=True):
        self.t = 0.0

    def record(self):
        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, end) -> float:
        return (end.t - self.t) * 1e3  # milliseconds, as CUDA events give them


class CudaExecutor:
    """Serves batches of up to ``batch`` requests whose ``size`` entry is ``items`` (module docstring)."""

    def __init__(self, spec: Op, impl, shape: dict, items: int, batch: int, host_mem: str = "pinned",
                 pool=64, seed: int = 0, pad: bool = True, device: str = "cuda"):
        import torch
        self.torch, self.impl, self.batch, self.pad = torch, impl, batch, pad
        b = facets.get(spec, "batch")
        self.mode, self.join = b.mode, b.join
        self.pinned = host_mem == "pinned"
        grow = lambda n: dict(shape, **{b.size: n * items})  # noqa: E731 - the shape of n requests (concat)
        self.spec, self.seed, self.grow, self.device = spec, seed, grow, device
        self.axes = {spec.args.index(a): ax for a, ax in b.axes.items()}
        self.resident = [spec.args.index(a) for a in b.resident]
        # concat: the inputs of a whole batch, requests copied into slices; stack and join: one request's
        # draw gives the weights (its own values are replaced by the batch's)
        self.dev = list(spec.inputs(grow(batch if self.mode == "concat" else 1), seed=seed, device=device,
                                    dtype=impl.dtype))
        self._resident_at = {batch: {i: self.dev[i] for i in self.resident}}
        if self.mode == "concat":
            for i, ax in self.axes.items():
                if self.dev[i].dim() <= ax or self.dev[i].shape[ax] % batch:
                    raise MageInputError(spec.name, "batch", f"says {spec.args[i]} stacks requests along axis {ax}, "
                                         f"but {batch} requests give it shape {tuple(self.dev[i].shape)}")
            self.per = {i: self.dev[i].shape[ax] // batch for i, ax in self.axes.items()}
        else:
            self.per = {i: 1 for i in self.axes}
        # the requests' inputs: ``pool`` of them, each in host memory of its own, taken in turn, so that
        # consecutive requests never read one buffer (a list: the pool of another executor, reused)
        self.pool = pool if isinstance(pool, list) else self.request_pool(pool)
        if self.mode == "stack":  # the batch's buffers: a leading axis of ``batch`` requests
            for i in self.axes:
                one = self.pool[0][i]
                self.dev[i] = torch.empty((batch, *one.shape), dtype=one.dtype, device=device)
        out_shape, out_dtype = spec.out_spec(*self._args(batch))
        self.out_axis = b.out_axis
        if len(out_shape) <= b.out_axis or out_shape[b.out_axis] % batch:
            raise MageInputError(spec.name, "batch", f"says the output stacks requests along axis {b.out_axis}, "
                                 f"but {batch} requests give it shape {tuple(out_shape)}")
        self.out_per = out_shape[b.out_axis] // batch
        self.host_out = torch.empty(out_shape, dtype=out_dtype, pin_memory=self.pinned)
        self.events = [(torch.cuda.Event if device == "cuda" else HostEvent)(enable_timing=True) for _ in range(4)]
        self.sizes = buckets(batch) if pad else None

    def request_pool(self, n: int) -> list:
        """n requests' inputs in host memory (pinned or pageable): slices of one draw of n requests
        (concat), or a draw of its own for each (stack, join), as many as ``POOL_BYTES`` hold (at least 2)."""
        dt = self.impl.dtype
        if self.mode == "concat":
            host = self.spec.inputs(self.grow(n), seed=self.seed + 1, device="cpu", dtype=dt)
            draws = [{i: host[i].narrow(ax, r * self.per[i], self.per[i]).contiguous() for i, ax in self.axes.items()}
                     for r in range(n)]
        else:  # drawn one by one (a graph takes a while to build): kept for the next case of this shape
            key = (self.spec.name, shape_key(self.grow(1)), self.seed, dt, n)
            draws = _DRAWS.get(key) or []
            def full():
                size = sum(t.numel() * t.element_size() for t in draws[0].values() if hasattr(t, "numel"))
                return len(draws) >= max(min(n, DRAWN_POOL), 1) or (len(draws) >= 2 and len(draws) * size >= POOL_BYTES)
            while not draws or not full():
                vals = self.spec.inputs(self.grow(1), seed=self.seed + 1 + len(draws), device="cpu", dtype=dt)
                draws.append({i: vals[i] for i in self.axes})
            _DRAWS.clear()
            _DRAWS[key] = draws
        if self.mode == "join":
            return self.join(draws, self.pinned)
        return [{i: t.pin_memory() if self.pinned else t for i, t in d.items()} for d in draws]

    def _resident(self, n: int) -> dict:
        """The resident arguments of a batch of n requests, built on the device once."""
        if n not in self._resident_at:
            made = self.spec.inputs(self.grow(n), seed=self.seed, device=self.device, dtype=self.impl.dtype)
            self._resident_at[n] = {i: made[i] for i in self.resident}
        return self._resident_at[n]

    def _args(self, n: int, requests=None):
        """The arguments of a batch of n request slots (join: ``requests`` copied into the first slots)."""
        if self.mode == "join":
            reqs = [self.pool[r % len(self.pool)] for r in (requests if requests is not None else range(n))]
            got = self.join.batch(reqs, n, self.device, self.pinned)
            return [got[i] if i in self.axes else t for i, t in enumerate(self.dev)]
        res = self._resident(n) if self.resident else {}
        return [t.narrow(self.axes[i], 0, n * self.per[i]).contiguous() if i in self.axes else res.get(i, t)
                for i, t in enumerate(self.dev)]

    def warm(self, calls: int = 3) -> None:
        """Compile or capture every padded size once (``prepare``), then serve each size a few times."""
        for n in self.sizes or range(1, self.batch + 1):
            args = self._args(n)
            if self.impl.prepare:
                self.impl.prepare(*args)  # its return value is not used: requests bring new inputs
            for _ in range(calls):
                self.run(list(range(n)))

    def run(self, requests: list[int]) -> dict:
        ev, n = self.events, len(requests)
        padded = next(s for s in self.sizes if s >= n) if self.sizes else n
        ev[0].record()
        if self.mode == "join":  # the spec's own copies into its slots (and the indices' shifts)
            args = self._args(padded, requests)
        else:
            for i, ax in self.axes.items():
                buf, per = self.dev[i], self.per[i]
                for j, r in enumerate(requests):
                    buf.narrow(ax, j * per, per).copy_(self.pool[r % len(self.pool)][i], non_blocking=self.pinned)
            args = self._args(padded)  # a view of the buffers (a copy where the batch axis is not the first)
        ev[1].record()
        t0 = time.perf_counter()
        out = self.impl.fn(*args)
        call = time.perf_counter() - t0  # the host's time in the call: its checks and its launches
        ev[2].record()
        rows = n * self.out_per
        self.host_out.narrow(self.out_axis, 0, rows).copy_(out.narrow(self.out_axis, 0, rows), non_blocking=self.pinned)
        ev[3].record()
        ev[3].synchronize()
        ms = [ev[k].elapsed_time(ev[k + 1]) for k in range(3)]
        return {**{p: t * 1e-3 for p, t in zip(sv.PARTS, ms)}, sv.HOST_CALL: call}

    def verify(self, spec: Op) -> float:
        """Serve request 0 alone and compare its output in host memory with the float64 reference of
        that request's inputs and the weights; returns the relative error (raises beyond tolerance)."""
        self.run([0])
        if self.mode == "join":  # one request's own values, on the device: a batch of one
            one = self.join.batch([self.pool[0]], 1, self.device, False)
            inputs = [one[i] if i in self.axes else t for i, t in enumerate(self.dev)]
        else:
            res = self._resident(1) if self.resident else {}
            inputs = [self.pool[0][i].to(self.device) if i in self.axes else res.get(i, t)
                      for i, t in enumerate(self.dev)]
        ref = spec.reference(*inputs).cpu()
        got = self.host_out.narrow(self.out_axis, 0, self.out_per).double()
        got = got.reshape(ref.shape)  # (stack: the request's own shape, without its batch axis)
        err = float((got - ref).norm() / ref.norm().clamp_min(1e-30))
        if not err <= spec.tol(self.impl.dtype):
            raise RuntimeError(f"served output of {spec.name}/{self.impl.name}/{self.impl.dtype} is off: relative "
                               f"error {err:.3g} > {spec.tol(self.impl.dtype):.3g}")
        return err
