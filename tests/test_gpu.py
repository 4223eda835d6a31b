"""On a GPU: every registered implementation at 30+ random shapes, the expected launch counts, and the
cost of an empty launch. Skipped without CUDA."""
import pytest
import torch

from mage import ops, registry
from mage.profile import profile
from tests.support.kernel_checks import gpu_failures, usable

pytestmark = pytest.mark.gpu


def random_shapes(op: str, n: int = 30, seed: int = 0):
    """The spec's random shapes (sizes that are multiples of nothing) plus the field-note and large shapes."""
    spec = ops.get(op)
    return spec.random_shapes(n, seed) + spec.shapes["field"] + spec.shapes["large"]


CASES = [(i.op, i.name, i.dtype) for i in registry.impls() if i.callable]


@pytest.mark.parametrize("op,name,dtype", [(i.op, i.name, i.dtype) for i in registry.impls()])
def test_every_registered_impl_runs_here(op, name, dtype):
    usable(registry.get(op, name, dtype))


@pytest.mark.parametrize("op,name,dtype", CASES)
def test_impl_passes_at_random_shapes(op, name, dtype):
    impl = registry.get(op, name, dtype)
    usable(impl)
    # torch.compile specialises on shape (dynamic=False) and compiles each one anew: seconds apiece, so
    # its cases are slow; they still take all 30 shapes, as every other implementation does.
    failures = gpu_failures(impl, random_shapes(op, 30))
    assert not failures, failures[:5]


def _launches(op, name, shape):
    spec, impl = ops.get(op), registry.get(op, name)
    inputs = spec.inputs(shape, seed=0, device="cuda")
    args = impl.prepare(*inputs) if impl.prepare else inputs
    return profile(lambda: impl.fn(*args), iters=20).launches


@pytest.mark.parametrize("op,name,want", [
    ("bias_gelu", "pytorch", 2), ("bias_gelu", "torch_compile", 1), ("neighbor_agg", "pytorch", 4),
    ("layernorm", "pytorch", 1), ("matmul", "pytorch", 1),
])
def test_launch_counts(op, name, want):
    assert _launches(op, name, ops.get(op).shapes["field"][0]) == want


def test_empty_kernel_is_cheap_inside_the_gpu():
    p = profile(lambda: torch.cuda._sleep(0), iters=100)
    assert p.launches == 1 and p.kernel_us < 5.0


def test_profile_sees_kernels_launched_outside_pytorch():
    cupy = pytest.importorskip("cupy")
    kernel = cupy.RawKernel(r'extern "C" __global__ void twice(float* x, int n) {'
                            r' int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2.0f; }', "twice")
    x = cupy.ones(1 << 20, dtype=cupy.float32)
    p = profile(lambda: kernel(((x.size + 255) // 256,), (256,), (x, cupy.int32(x.size))), iters=50)
    assert p.launches == 1 and p.kernel_names == ["twice"]
