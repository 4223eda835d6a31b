"""The CUDA-graph wrapper (kernels/_triton/graphed.py): its logic on the CPU with a fake capture whose
replay calls the block again on the static buffers (so a result is right only if the inputs really
were copied in), and on a GPU with real graphs: replay equals the plain call bit for bit, one graph
launch a call, a second input set of the same signature gives its own answer."""
from __future__ import annotations

import pytest
import torch

from kernels._triton.graphed import CallAgain, CaptureError, CudaCapture, Graphed, NestedCaptureError
from tests.support.kernel_checks import gpu
from mage.errors import MageInputError
from mage.op_inputs import check_out


class Toy:
    """A spec-like block: y = x * w + 1 (w one value a column), with its own checks."""
    name, args = "toy", ("x", "w")

    @staticmethod
    def validate(x, w):
        if x.dim() != 2:
            raise MageInputError("toy", "x", "must be 2-D")
        if tuple(w.shape) != (x.shape[1],):
            raise MageInputError("toy", "w", f"must have shape ({x.shape[1]},)")

    @staticmethod
    def validate_out(inputs, out):
        check_out("toy", out, tuple(inputs[0].shape), inputs[0].dtype, inputs[0].device)


def toy(x, w, out=None):
    y = x * w + 1
    return y if out is None else out.copy_(y)


class FakeCapture(CallAgain):
    """The wrapper's own CPU stand-in, able to fail its capture."""

    def __init__(self, fail=False):
        super().__init__()
        self.fail = fail

    def capture(self, call, device):
        if self.fail:
            self.captures += 1
            raise RuntimeError("operation not permitted when stream is capturing")
        return super().capture(call, device)


def made(maxsize=4, **kw):
    cap = FakeCapture(**{k: kw.pop(k) for k in ("fail",) if k in kw})
    return Graphed(Toy, toy, maxsize=maxsize, capture=cap, **kw), cap


def pair(rows=3, cols=5, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, cols, generator=g).to(dtype), torch.randn(cols, generator=g).to(dtype)


def test_same_signature_reuses_the_graph_and_copies_the_new_inputs_in():
    g, cap = made()
    a, b = pair(seed=1), pair(seed=2)
    ya = g(*a).clone()
    yb = g(*b)
    assert cap.captures == 1 and g.captures == 1 and len(g.cache) == 1
    assert torch.equal(ya, toy(*a)) and torch.equal(yb, toy(*b))  # b's values, not a's: copied in
    assert torch.equal(g(*a), toy(*a))


def test_returned_output_is_the_graphs_own_and_the_next_call_overwrites_it():
    g, _ = made()
    a, b = pair(seed=1), pair(seed=2)
    ya = g(*a)
    g(*b)
    assert torch.equal(ya, toy(*b))  # documented: keep a result by copying it, or pass out=


@pytest.mark.parametrize("other", ["shape", "dtype", "strides"])
def test_a_new_shape_dtype_or_strides_recaptures(other):
    g, cap = made()
    x, w = pair(4, 4)
    g(x, w)
    if other == "shape":
        x2, w2 = pair(5, 4)
    elif other == "dtype":
        x2, w2 = x.double(), w.double()
    else:
        x2, w2 = x.t(), w  # same shape, transposed strides
    y = g(x2, w2)
    assert cap.captures == 2 and len(g.cache) == 2
    assert torch.equal(y, toy(x2, w2)) and y.stride() == x2.stride()  # the static buffer keeps the layout
    g(x, w)
    assert cap.captures == 2  # the first signature is still cached


def test_out_gets_the_result_and_is_returned():
    g, _ = made()
    a = pair()
    out = torch.full_like(a[0], float("nan"))
    assert g(*a, out=out) is out and torch.equal(out, toy(*a))
    out2 = torch.full_like(a[0], float("nan"))
    assert g(*pair(seed=4), out=out2) is out2 and torch.equal(out2, toy(*pair(seed=4)))


@pytest.mark.parametrize("bad", [lambda x: torch.empty(x.shape[0] + 1, x.shape[1]), lambda x: x.double().clone(),
                                 lambda x: torch.empty(x.shape[1], x.shape[0]).t()], ids=["shape", "dtype", "strided"])
def test_bad_out_is_refused_before_any_capture_and_on_a_hit(bad):
    g, cap = made()
    a = pair()
    with pytest.raises(MageInputError) as e:
        g(*a, out=bad(a[0]))
    assert e.value.op == "toy" and e.value.arg == "out"
    assert cap.warms == cap.captures == 0 and not g.cache
    g(*a)
    with pytest.raises(MageInputError, match="'out'"):
        g(*a, out=bad(a[0]))


def test_bad_inputs_are_refused_by_the_spec_before_any_capture():
    g, cap = made()
    x, w = pair(3, 5)
    with pytest.raises(MageInputError) as e:
        g(x, w[:4])
    assert (e.value.op, e.value.arg) == ("toy", "w")
    with pytest.raises(MageInputError, match="takes 2 inputs"):
        g(x)
    with pytest.raises(MageInputError) as e:
        g(x, [1.0] * 5)  # unhashable: no signature
    assert e.value.arg == "w"
    assert cap.warms == cap.captures == 0 and not g.cache


def test_cpu_tensors_are_refused_by_the_real_capture_naming_the_argument():
    g = Graphed(Toy, toy)
    assert isinstance(g.capture, CudaCapture)
    with pytest.raises(MageInputError) as e:
        g(*pair())
    assert (e.value.op, e.value.arg) == ("toy", "x") and "CUDA graph" in str(e.value)
    assert not g.cache and g.captures == 0


def test_the_cache_is_bounded_least_recently_used_first_out():
    g, cap = made(maxsize=2)
    s1, s2, s3 = pair(1, 3), pair(2, 3), pair(3, 3)
    g(*s1), g(*s2), g(*s1), g(*s3)  # s2 is the least recently used when s3 arrives
    assert len(g.cache) == 2 and cap.captures == 3 and len(cap.released) == 1
    g(*s1)
    assert cap.captures == 3
    assert torch.equal(g(*s2), toy(*s2)) and cap.captures == 4
    with pytest.raises(MageInputError, match="maxsize"):
        Graphed(Toy, toy, maxsize=0)


def test_out_of_memory_in_a_capture_frees_the_other_graphs_and_tries_once_more():
    class Tight(FakeCapture):
        def capture(self, call, device):
            if self.captures == 1 and not self.released:  # the second capture finds memory held
                self.captures += 1
                raise torch.cuda.OutOfMemoryError("out of memory")
            return super().capture(call, device)

    g = Graphed(Toy, toy, capture=Tight())
    s1, s2 = pair(1, 3), pair(2, 3)
    g(*s1)
    assert torch.equal(g(*s2), toy(*s2)) and len(g.cache) == 1 and len(g.capture.released) == 1
    g.clear()
    assert not g.cache


def test_a_call_during_a_capture_is_refused():
    g, cap = made()
    cap.in_capture = True
    with pytest.raises(NestedCaptureError, match="toy"):
        g(*pair())
    assert cap.warms == 0


def test_a_failed_capture_names_the_block_and_caches_nothing():
    g, cap = made(fail=True)
    with pytest.raises(CaptureError, match="toy"):
        g(*pair())
    assert not g.cache and g.captures == 0


def test_an_empty_output_runs_the_plain_call_without_a_graph():
    g, cap = made()
    x, w = pair(0, 5)
    out = torch.empty(0, 5)
    assert g(x, w, out=out) is out and cap.captures == 0
    assert g(x, w).shape == (0, 5) and cap.captures == 0 and len(g.cache) == 1


class Table:
    """A held object: read in place by the block, never copied; its tensor's version is its state."""

    def __init__(self, t):
        self.t = t

    @property
    def device(self):
        return self.t.device


class HeldToy(Toy):
    name, args = "held_toy", ("table", "x")

    @staticmethod
    def validate(table, x):
        if not isinstance(table, Table):
            raise MageInputError("held_toy", "table", "must be a Table")

    @staticmethod
    def validate_out(inputs, out):
        check_out("held_toy", out, tuple(inputs[1].shape), inputs[1].dtype, inputs[1].device)


def held_toy(table, x, out=None):
    return toy(x, table.t, out)


def test_a_held_object_is_keyed_by_identity_and_version_and_read_in_place():
    cap = FakeCapture()
    kept = []
    g = Graphed(HeldToy, held_toy, hold={"table": lambda tb: (tb.t._version,)}, capture=cap,
                keep=lambda table, x: kept.append(table) or "plan")
    x, w = pair()
    tb = Table(w.clone())
    assert torch.equal(g(tb, x), toy(x, tb.t)) and cap.captures == 1
    assert kept == [tb]  # keep() saw the held object itself, not a copy
    g(tb, x * 2)
    assert cap.captures == 1
    tb.t.mul_(3)  # an in-place write moves the version: validated and captured again
    assert torch.equal(g(tb, x), toy(x, tb.t)) and cap.captures == 2
    g(Table(tb.t.clone()), x)  # another object of the same shapes: its own signature
    assert cap.captures == 3
    with pytest.raises(MageInputError) as e:
        g("not a table", x)
    assert e.value.arg == "table"


# ---- GPU: real graphs --------------------------------------------------------------------------------
@gpu
def test_gpu_replay_equals_the_plain_call_and_copies_inputs_in():
    g = Graphed(Toy, toy)
    a = [t.cuda() for t in pair(64, 33, seed=1)]
    b = [t.cuda() for t in pair(64, 33, seed=2)]
    assert torch.equal(g(*a), toy(*a))
    assert torch.equal(g(*b), toy(*b)) and g.captures == 1
    out = torch.full_like(a[0], float("nan"))
    assert g(*a, out=out) is out and torch.equal(out, toy(*a))


@gpu
def test_gpu_one_graph_launch_a_call():
    from mage.profile import profile
    g = Graphed(Toy, toy)
    a = [t.cuda() for t in pair(64, 33)]
    g(*a)
    p = profile(lambda: g(*a), iters=20)
    assert set(p.per_iter_launches) == {1}, p.per_iter_launches  # cudaGraphLaunch; the copies are memcpys


@gpu
def test_gpu_call_inside_a_capture_is_refused():
    g = Graphed(Toy, toy)
    a = [t.cuda() for t in pair(8, 8)]
    g(*a)
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(NestedCaptureError):
        with torch.cuda.graph(graph):
            g(*a)
    torch.cuda.synchronize()
