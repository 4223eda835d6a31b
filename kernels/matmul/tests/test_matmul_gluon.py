"""matmul's Gluon road (``gluon_hopper.py``) on the CPU: Gluon has no interpreter, so what can be checked here is
the compile for sm_90a (no spills, each config within a block's shared memory, and in fp32x3 the one wait a step
that leaves the small products in flight) and the host's refusals. The GPU tests (``tests/test_gpu.py``) check
its products against float64."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from kernels._triton import sm90
from kernels.matmul import gluon_hopper as G
from mage import registry
from mage.errors import MageInputError

_CASES = [(p, c) for p in G.MODES for c in G.CONFIGS[p]]


def _compiled(cases) -> list[dict]:
    # in a child process without TRITON_INTERPRET (the suite's setting), as sm90.resources does
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = ("import json, sys\nfrom kernels.matmul import gluon_hopper as G\n"
            "print(json.dumps([G.resources(p, c) for p, c in json.loads(sys.argv[1])]))")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(cases)], cwd=sm90._ROOT, env=env,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.slow
@pytest.mark.skipif(not sm90.available(), reason="Triton's wheel has no cuobjdump")
def test_every_config_compiles_for_sm90a_without_spills():
    for (precision, name), r in zip(_CASES, _compiled(_CASES)):
        where = f"{precision} {name}: {r}"
        assert r["stack"] == 0 and r["local"] == 0, where
        assert r["shared"] <= sm90.SHARED_LIMIT, where
        # the products' warps keep a raised ceiling; the loader and split warps give registers back
        assert max(r["ceilings"]) >= 200 and min(r["ceilings"]) <= G.REGS[0], where
        assert max(r["used"].values()) <= max(r["ceilings"]), where
        # fp32x3: one wait a step with two groups left in flight (only the large product is waited for); the
        # full drain only after the loop. TF32: one product in flight, as a pipelined chain has
        assert r["waits"] == (["0x2", "0x0"] if precision == "fp32x3" else ["0x1", "0x0"]), where
        # each of a step's A and B elements rounded twice (hi, and lo) by one of the 128 split threads, once: the
        # split warps' first layout repeated B's slice in every warp (four times the work)
        bk = G.CONFIGS[precision][name][0]
        want = 2 * (G.BM * bk + bk * G.BN) // 128 if precision == "fp32x3" else 0
        assert r["counts"]["cvt.rna.tf32.f32"] == want, where


def test_ieee_fp32_and_bf16_are_refused_by_name(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # CPU tensors pass the device check, so the precision is what is judged
    A, B = torch.randn(8, 8), torch.randn(8, 8)
    with pytest.raises(MageInputError, match="dtype"):
        G.matmul(A, B, dtype="fp32")
    with pytest.raises(MageInputError, match="dtype"):
        G.matmul(A.bfloat16(), B.bfloat16(), dtype="bf16")
    with pytest.raises(MageInputError, match="matmul"):
        G.matmul(A, torch.randn(9, 8))


def test_the_column_says_why_it_cannot_run_here():
    registry.load()
    for dtype in G.MODES:
        impl = registry.get("matmul", G.NAME, dtype)
        assert not impl.interpret  # Gluon has no interpreter: never a CPU column
        if not G.available():
            assert "Hopper" in impl.available()


@pytest.mark.gpu
@pytest.mark.skipif(not G.available(), reason="needs an sm_90 GPU")
@pytest.mark.parametrize("precision", G.MODES)
def test_gpu_rows_past_two_to_the_31_elements_land_where_they_belong(precision):
    # C's last rows start past 2^31 elements: 32-bit row offsets wrapped them onto earlier rows
    M, K, N = 65_536 + 64, 8, 32_768
    A, B = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    out = torch.empty(M, N, device="cuda")
    out[-128:].fill_(float("nan"))
    G.matmul(A, B, out=out, dtype=precision)
    want = A[-128:].double() @ B.double()
    err = float((out[-128:].double() - want).norm() / want.norm())
    assert err < (1e-6 if precision == "fp32x3" else 1e-2), err
