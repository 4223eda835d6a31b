"""The runner a hardware profiler wraps (mage.ext.launch_path.hw_profile): one implementation at one recorded shape,
on the CPU here; a selection that is not exactly one shape, or a bad count, is refused naming the op."""
import pytest

from mage.errors import MageInputError
from mage.ext.launch_path import hw_profile as hp


def test_runs_one_implementation_at_one_recorded_shape(capsys):
    assert hp.main(["neighbor_agg", "pytorch", "--shape-set", "field", "--where", "dist=skewed", "--calls", "2",
                    "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "neighbor_agg/pytorch/fp32" in out and "dist=skewed" in out and "2 calls" in out


@pytest.mark.parametrize("where, calls, arg", [({}, 1, "where"), ({"dist": "none"}, 1, "where"), ({"dist": "uniform"}, 0, "calls")])
def test_refuses_a_selection_that_is_not_one_shape(where, calls, arg):
    with pytest.raises(MageInputError) as e:
        hp.run("neighbor_agg", "pytorch", "field", where, calls=calls, device="cpu")
    assert e.value.op == "neighbor_agg" and e.value.arg == arg


def test_a_bad_command_is_one_line(capsys):
    assert hp.main(["layernorm", "pytorch", "--shape-set", "nope", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "shape_set" in err
