"""The mapping of the block's weights onto cuEquivariance's keywords, checked without the library: the
update written from the library's documented parameters (Linear layouts, values and gates each stacked
left then right, the output gate after the output projection) must equal the block's float64
reference. On a GPU with the library installed, the column itself is checked like every column."""
import pytest
import torch
import torch.nn.functional as F

from kernels.layernorm.spec import EPS
from kernels.trimul_block import cuequivariance_impl as CQ
from kernels.trimul_block.spec import SPEC


def documented_update(x, mask, norm_in_weight, norm_in_bias, p_in_weight, p_in_bias, g_in_weight, g_in_bias,
                      norm_out_weight, norm_out_bias, p_out_weight, p_out_bias, g_out_weight, g_out_bias, eps):
    """The library's outgoing update as its parameters describe it, in float64."""
    xn = F.layer_norm(x, x.shape[-1:], norm_in_weight, norm_in_bias, eps)
    h = F.linear(xn, p_in_weight, p_in_bias) * torch.sigmoid(F.linear(xn, g_in_weight, g_in_bias))
    a, b = (h * mask[..., None]).chunk(2, dim=-1)
    o = torch.einsum("bikd,bjkd->bijd", a, b)
    o = F.layer_norm(o, o.shape[-1:], norm_out_weight, norm_out_bias, eps)
    return F.linear(o, p_out_weight, p_out_bias) * torch.sigmoid(F.linear(xn, g_out_weight, g_out_bias))


@pytest.mark.parametrize("shape", [dict(N=9, C=8, H=4), dict(N=5, C=3, H=6, B=2)])
def test_the_library_keywords_compute_the_blocks_update(shape):
    s = {k: v for k, v in shape.items() if k != "B"}
    sets = [SPEC.inputs(s, seed=i) for i in range(shape.get("B", 1))]
    inputs = [t.double() for t in sets[0]]
    if "B" in shape:  # a batch of complexes: z and mask stacked, the weights shared
        inputs[0] = torch.stack([s_[0].double() for s_ in sets])
        inputs[1] = torch.stack([s_[1].double() for s_ in sets])
    kw = CQ.library_arguments(*inputs)
    got = documented_update(**kw)
    want = SPEC.reference(*inputs)
    torch.testing.assert_close(got if "B" in shape else got[0], want, rtol=1e-12, atol=1e-12)
    assert kw["eps"] == EPS


def test_a_swapped_pair_of_weights_is_caught():
    """The guard of the test above: the values stacked right-then-left compute another function."""
    inputs = [t.double() for t in SPEC.inputs(dict(N=7, C=8, H=4), seed=3)]
    kw = CQ.library_arguments(*inputs)
    H = inputs[6].shape[0]
    kw["p_in_weight"] = torch.cat([kw["p_in_weight"][H:], kw["p_in_weight"][:H]])
    assert (documented_update(**kw)[0] - SPEC.reference(*inputs)).abs().max() > 1e-3


def test_a_pair_width_the_library_does_not_take_is_refused_by_name():
    """Its projection GEMM asserts C % TILE_K == 0: on an H100 every library column failed the random-shape test at
    N = 168, C = 57, H = 96 with a bare AssertionError. Refused naming z, and left out of checks and timings."""
    from mage import registry
    from mage.errors import MageInputError
    inputs = SPEC.inputs(dict(N=3, C=57, H=32), seed=0)
    with pytest.raises(MageInputError, match="trimul_block.*'z'.*pair widths.*C = 57"):
        CQ._Column(None).prepare(*inputs)
    for impl in (i for i in registry.impls("trimul_block") if i.name.startswith("cuequivariance")):
        assert impl.outside_limits(dict(N=168, C=57, H=96)) and not impl.outside_limits(dict(N=168, C=96, H=96))


def test_the_ieee_column_refuses_unequal_widths_by_name():
    """0.13 raises a ValueError for Precision.IEEE where C != H (an H100 run's random shapes: C = 32, H = 128)."""
    from mage import registry
    from mage.errors import MageInputError
    inputs = SPEC.inputs(dict(N=3, C=32, H=64), seed=0)
    with pytest.raises(MageInputError, match="trimul_block.*'z'.*IEEE.*C = 32, H = 64"):
        CQ._Column("IEEE").prepare(*inputs)
    CQ._Column(None).prepare(*inputs)  # the default precision takes them
    ieee = registry.get("trimul_block", "cuequivariance_ieee", "fp32")
    assert ieee.outside_limits(dict(N=162, C=32, H=128)) and not ieee.outside_limits(dict(N=162, C=128, H=128))


def test_a_hidden_width_the_library_does_not_take_is_refused_and_never_checked():
    """cuEquivariance 0.13 documents hidden widths in multiples of 32 (the H200's random-shape test failed
    its columns at widths like 41): the column refuses such a call with the reason, and the harness
    neither checks nor times it there, while the AlphaFold 3 widths (128) stay in."""
    import dataclasses

    from mage import registry
    from mage.check import check, check_all
    from mage.errors import MageInputError
    from mage.ops import shape_key
    inputs = SPEC.inputs(dict(N=3, C=8, H=41), seed=0)
    with pytest.raises(MageInputError, match="trimul_block.*gamma_out.*cuEquivariance.*multiples of 32"):
        CQ._Column(None).prepare(*inputs)
    for impl in (i for i in registry.impls("trimul_block") if i.name.startswith("cuequivariance")):
        assert impl.outside_limits(dict(N=3, C=8, H=41)) and not impl.outside_limits(dict(N=3, C=128, H=128))
        here = dataclasses.replace(impl, available=lambda: None, needs_cuda=False)  # as if installed
        result = check(here, dict(N=3, C=8, H=41), trials=1, device="cpu")
        assert not result.ran and "multiples of 32" in result.reason, result.reason
        # ``mage check`` (check_all) leaves such shapes out rather than counting them as failures
        rows = check_all([here], shapes_for=lambda spec: [dict(N=3, C=8, H=41), dict(N=2, C=32, H=32)], trials=1,
                         device="cpu")
        assert list(rows["shape"]) == [shape_key(dict(N=2, C=32, H=32))]
