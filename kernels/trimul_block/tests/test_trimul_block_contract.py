"""The triangle update's FP32 contraction on the tensor cores (config key CONTRACT): chosen from N = 256,
refused by name where the split has nothing to split."""
import pytest
import torch

from kernels.trimul_block import triton_block as tb
from kernels.trimul_block.spec import SPEC
from mage.errors import MageInputError


def test_af3_class_sizes_contract_on_the_tensor_cores_and_bf16_refuses_the_split():
    """From N = 256 the FP32 column's contraction runs tf32x3 (three TF32 products, FP32 accuracy); the
    split is for FP32 operands only, so a bf16 call asking for it is refused by name."""
    assert tb.TILES["fp32"].choose(dict(N=256, C=128, H=128))["CONTRACT"] == "tf32x3"
    assert tb.TILES["fp32"].choose(dict(N=255, C=128, H=128))["CONTRACT"] == "ieee"
    assert tb.TILES["bf16"].choose(dict(N=1024, C=128, H=128))["CONTRACT"] == "ieee"
    args = SPEC.inputs(dict(N=3, C=4, H=2), dtype="bf16")
    with pytest.raises(MageInputError, match="CONTRACT"):
        tb.trimul_block(*args, CONTRACT="tf32x3")
    with pytest.raises(MageInputError, match="CONTRACT"):
        tb.trimul_block(*SPEC.inputs(dict(N=3, C=4, H=2)), CONTRACT="tf32")
    assert torch.isfinite(tb.trimul_block(*SPEC.inputs(dict(N=3, C=4, H=2)), CONTRACT="tf32x3")).all()
