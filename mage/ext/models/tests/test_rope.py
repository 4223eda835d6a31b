"""V-JEPA 2's rotary embedding in one launch (the operator ``mage::vjepa2_rope3`` of ``kernels/rope3``,
which ``rope`` swaps in) computes the model's own rotation: against the model's method in float64 at the
published head size, at awkward token counts, on the transposed views the model hands it, in bf16; the
rope3 spec's float64 reference is the model's method too; where the call is not the encoder's (position
masks) the model's code runs."""
import copy
import os

import pytest
import torch

pytest.importorskip("transformers")

from mage import ops, registry  # noqa: E402
from mage.errors import MageInputError  # noqa: E402
from mage.ext.models import parts as P  # noqa: E402
from mage.ext.models import rope, vjepa2  # noqa: E402

needs_kernels = pytest.mark.skipif(not (torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1"),
                                   reason="the Triton kernels need CUDA or TRITON_INTERPRET=1")


def _attention(head: int, grid: int):
    """A rotary attention of the model's class with the published head size's axis widths."""
    attn = copy.copy(vjepa2.rope_attention(vjepa2.build(vjepa2.TINY)))
    attn.attention_head_size = head
    attn.d_dim = attn.h_dim = attn.w_dim = 2 * ((head // 3) // 2)
    attn.grid_size = grid
    return attn


def _ids(attn, n: int):
    return attn.get_position_ids(torch.empty(1, n, 1))


def rope3(x, grid, seg):
    """The operator the swapped attentions call (the registry's discovery imports its folder)."""
    registry.load()
    return torch.ops.mage.vjepa2_rope3(x, grid, seg)


@needs_kernels
@pytest.mark.parametrize("n,head", [(2048, 64), (37, 64), (1, 64), (50, 63)])
def test_the_rotation_is_the_models_in_float64(n, head):
    # ViT-L/16: 16 heads of 64 channels, 20 an axis, 4 passed through; an odd head size, whose last
    # channel's partner would lie past the row, passes 3 through
    attn = _attention(head, 16)
    x = torch.randn(1, n, 3, head).transpose(1, 2)  # [B, H, N, D] as a view, the model's layout
    want = type(attn).apply_rotary_embeddings(attn, x.double(), _ids(attn, n))
    got = rope3(x, 16, attn.d_dim)
    assert got.shape == want.shape and got.is_contiguous()
    assert x.shape[-1] != 63 or attn.d_dim == 20
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    bf = rope3(x.bfloat16(), 16, attn.d_dim)
    assert bf.dtype == torch.bfloat16
    assert float((bf.double() - want).norm() / want.norm()) < 4e-3  # one bf16 rounding of the output


@pytest.mark.parametrize("n,head,grid", [(2048, 64, 16), (50, 63, 16), (40, 6, 2), (30, 7, 3)])
def test_the_spec_reference_is_the_models_method(n, head, grid):
    """kernels/rope3's float64 reference, written from the equations, against the model's own code."""
    attn = _attention(head, grid)
    assert attn.d_dim == 2 * ((head // 3) // 2)
    x = torch.randn(2, n, 3, head, dtype=torch.float64).transpose(1, 2)
    want = type(attn).apply_rotary_embeddings(attn, x, _ids(attn, n))
    torch.testing.assert_close(ops.get("rope3").reference(x, grid), want, rtol=1e-12, atol=1e-12)


@needs_kernels
def test_other_calls_take_the_models_own_code():
    """With position masks (the predictor's case) the ids are per head, and the model's method runs."""
    m = vjepa2.build(vjepa2.TINY)
    assert rope.swap_rope(m) == vjepa2.TINY["num_hidden_layers"] + vjepa2.TINY["pred_num_hidden_layers"]
    attn = vjepa2.rope_attention(m)
    x = torch.randn(1, 4, 8, attn.attention_head_size)
    masked = attn.get_position_ids(torch.empty(1, 8, 1), masks=torch.arange(8)[None])
    calls = []
    real = attn.rope.forward
    attn.rope.forward = lambda qk: calls.append(1) or real(qk)
    torch.testing.assert_close(attn.apply_rotary_embeddings(x, masked),
                               type(attn).apply_rotary_embeddings(attn, x, masked))
    assert not calls
    plain = attn.get_position_ids(torch.empty(1, 8, 1))
    attn.apply_rotary_embeddings(x, plain)
    assert calls == [1]
    # precisions the kernel does not store, and a call autograd records (the operator has no backward)
    for y in (x.double(), x.half(), x.clone().requires_grad_()):
        torch.testing.assert_close(attn.apply_rotary_embeddings(y, plain),
                                   type(attn).apply_rotary_embeddings(attn, y, plain))
    assert calls == [1]


@needs_kernels
def test_the_calls_amdahl_times_agree():
    attn = _attention(64, 16)
    got = []
    for ours in (True, False):
        torch.manual_seed(0)
        got.append(P._rope_call((1, 2, 300, 64), (16, attn.d_dim), torch.float32, ours, attn, device="cpu")())
    torch.testing.assert_close(got[0], got[1], rtol=1e-4, atol=1e-4)


def test_bad_calls_are_refused_by_name():
    with pytest.raises(MageInputError, match="rope3.*x"):
        rope3(torch.randn(4, 64), 16, 20)
    with pytest.raises(MageInputError, match="rope3.*x"):
        rope3(torch.randn(1, 2, 3, 64, dtype=torch.float64), 16, 20)
    with pytest.raises(MageInputError, match="rope3.*seg"):
        rope3(torch.randn(1, 2, 3, 64), 16, 22)
    with pytest.raises(MageInputError, match="rope3.*grid"):
        rope3(torch.randn(1, 2, 3, 64), 0, 20)
