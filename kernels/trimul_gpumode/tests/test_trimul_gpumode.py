"""The task's form of the triangle update: its float64 reference read against the equations written
as loops, the trap it shares weights' shapes with the AlphaFold form, the PyTorch columns under both
the harness's norm-wise check and the task's elementwise verdict, and bad inputs refused by name."""
import pytest
import torch

from kernels.trimul_block.spec import SPEC as AF3
from kernels.trimul_gpumode import pytorch_impl
from kernels.trimul_gpumode.spec import SPEC, contest_failures
from mage import registry
from mage.check import check
from mage.errors import MageInputError


def _loops(x, mask, nw, nb, lp, rp, lg, rg, og, onw, onb, wo):
    """The update one output pair at a time, in float64, straight from the docstring's equations."""
    B, N, _, D = x.shape
    H = lp.shape[0]
    out = torch.zeros((B, N, N, D), dtype=torch.float64)
    ln = lambda v, w, b: (v - v.mean()) / torch.sqrt(v.var(unbiased=False) + 1e-5) * w + b  # noqa: E731
    for bb in range(B):
        xn = [[ln(x[bb, i, k], nw, nb) for k in range(N)] for i in range(N)]
        for i in range(N):
            for j in range(N):
                o = torch.zeros(H, dtype=torch.float64)
                for k in range(N):
                    a = (lp @ xn[i][k]) * mask[bb, i, k] * torch.sigmoid(lg @ xn[i][k])
                    b = (rp @ xn[j][k]) * mask[bb, j, k] * torch.sigmoid(rg @ xn[j][k])
                    o += a * b
                out[bb, i, j] = wo @ (ln(o, onw, onb) * torch.sigmoid(og @ xn[i][j]))
    return out


@pytest.mark.parametrize("shape", [dict(B=2, N=3, D=4, H=5), dict(B=1, N=4, D=3, H=2, nomask=1)])
def test_the_reference_is_the_equations(shape):
    inputs = [t.double() for t in SPEC.inputs(shape, seed=1)]
    torch.testing.assert_close(SPEC.reference(*inputs), _loops(*inputs), rtol=1e-12, atol=1e-12)


def test_at_equal_widths_the_forms_take_weights_of_one_shape_and_differ():
    """Why the forms are two operations: the task's five [H, D] projections, laid into the AlphaFold
    block's [D, 4H + D] input matrix, pass its shape checks and compute another function."""
    s = dict(B=1, N=6, D=8, H=8)
    x, mask, nw, nb, lp, rp, lg, rg, og, onw, onb, wo = (t.double() for t in SPEC.inputs(s, seed=2))
    w_in = torch.cat([lg.T, lp.T, rg.T, rp.T, og.T], dim=1)  # AF3 order: gate, value, gate, value, out gate
    af3_args = (x[0], mask[0], nw, nb, w_in, torch.zeros(40, dtype=torch.float64), onw, onb, wo.T,
                torch.zeros(8, dtype=torch.float64))
    AF3.validate(*(t.float() for t in af3_args))  # accepted
    differs = (AF3.reference(*af3_args) - SPEC.reference(x, mask, nw, nb, lp, rp, lg, rg, og, onw, onb, wo)[0]).abs()
    assert differs.max() > 1e-2


@pytest.mark.parametrize("dist", ["normal", "heavy"])
def test_the_eager_column_passes_both_verdicts(dist):
    shape = dict(B=2, N=7, D=16, H=8)
    r = check(registry.get("trimul_gpumode", "pytorch", "fp32"), shape, dist=dist, device="cpu")
    assert r.passed, r
    inputs = SPEC.inputs(shape, seed=4, dist=dist)
    assert contest_failures(pytorch_impl.expression(*inputs), pytorch_impl.expression(*inputs)) == 0


def test_the_contest_verdict_is_elementwise():
    ref = torch.ones(10)
    out = ref.clone()
    out[3] = 1.05  # 0.05 off where the bound is 0.04: fails though the norm-wise error is 1.6%
    assert contest_failures(out, ref) == 1
    out[3] = float("nan")
    assert contest_failures(out, ref) == 1
    assert contest_failures(ref + 0.039, ref) == 0


def test_heavy_inputs_are_cauchy():
    x = SPEC.inputs(dict(B=1, N=64, D=32, H=4), seed=0, dist="heavy")[0]
    q1, q3 = torch.quantile(x.flatten(), torch.tensor([0.25, 0.75]))
    assert abs(q1 + 2) < 0.2 and abs(q3 - 2) < 0.2  # Cauchy(0, 2): quartiles at -2 and 2
    assert x.abs().max() > 1000  # and the tails reach far


@pytest.mark.parametrize("arg, bad, match", [
    ("left_gate", lambda t: t[:, :-1], "left_gate"), ("to_out", lambda t: t.T, "to_out"),
    ("mask", lambda t: t[:, :-1], "mask"), ("x", lambda t: t[0], "x"), ("norm_w", lambda t: t.double(), "norm_w"),
])
def test_bad_inputs_are_refused_by_name(arg, bad, match):
    inputs = list(SPEC.inputs(dict(B=1, N=4, D=6, H=3), seed=0))
    i = SPEC.args.index(arg)
    inputs[i] = bad(inputs[i])
    with pytest.raises(MageInputError, match=f"trimul_gpumode.*{match}"):
        SPEC.validate(*inputs)
