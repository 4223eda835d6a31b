"""The facet tables and the split they keep: every operation folder declares, beside its spec, the facets
the book and the experiments read; a spec is its mathematics and imports no implementation (so no
spec <-> launcher import circle can come back); every column says how it is shown; the tables refuse an
unknown operation, column or facet by name."""
import ast
from pathlib import Path

import pytest

from mage import facets, ops
from mage.errors import MageInputError

KERNELS = Path(__file__).resolve().parent.parent / "kernels"
FOLDERS = sorted(p.parent for p in KERNELS.glob("*/spec.py") if not p.parent.name.startswith("_"))

# what the book reads of every operation (names, figure order, markers, what the size sweep plots against)
BOOK = {"label", "short", "order", "marker", "work"}
# what the experiments read of a block: its parts (Amdahl) and how its requests batch (service)
BLOCK = {"parts", "batch"}
# what the training experiment reads of an operation: its backward's cost
OPERATION = {"grad_flops", "grad_bytes"}
# what a kind needs beyond the book's: a model's part (measured inside its model, no backward) nothing
NEEDS = {"operation": OPERATION, "block": BLOCK, "part": set()}


def test_every_folder_declares_the_facets_its_readers_need():
    assert [f.name for f in FOLDERS] == sorted(ops.OPS)
    for folder in FOLDERS:
        assert (folder / "facets.py").exists(), f"{folder.name} has no facets.py"
        spec, have = ops.OPS[folder.name], set(facets.of(folder.name).keys())
        need = BOOK | NEEDS[spec.kind]  # an unknown kind fails here: say what it needs first
        assert need <= have, (folder.name, sorted(need - have))
        assert facets.get(folder.name, "work") in ("bytes", "flops")
    for name in ops.OPS:
        for part in facets.get(name, "parts", ()):  # every measured part names a discovered operation
            assert part.shapes is None or part.op in ops.OPS, (name, part.op)


def _imports(path: Path, package: str = "") -> list[str]:
    """Every module ``path`` imports, at the top or inside a function, relative ones made absolute
    (``package``: the one it belongs to, by default from where it lies)."""
    package = package or ".".join(path.relative_to(KERNELS.parent).with_suffix("").parts[:-1])
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            out += [f"{base}.{a.name}" for a in node.names] + [base]
    return out


def _implementation(module: str, seen=None) -> bool:
    """Whether ``module`` (under kernels/) is, or reaches, code that runs kernels or registers columns:
    anything importing Triton, the registry or the shared launcher packages, and every facets module."""
    seen = set() if seen is None else seen
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in ("_triton", "_rust", "_pytorch"):
        return True
    path = KERNELS.parent.joinpath(*parts).with_suffix(".py")
    if module in seen or not path.exists():
        return False  # already followed, or a name imported from a module, or a package
    seen.add(module)
    if path.stem == "facets":
        return True
    for m in _imports(path):
        if m.split(".")[0] == "triton" or m.startswith("mage.registry"):
            return True
        if m.startswith("kernels.") and _implementation(m, seen):
            return True
    return False


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: f.name)
def test_a_spec_imports_no_implementation(folder):
    """spec.py holds the mathematics: it may import other specs and the helpers that build its inputs
    (a graph type, a point cloud), never a launcher or a facets module, at the top or in a function."""
    bad = [m for m in _imports(folder / "spec.py") if m.startswith("kernels.") and _implementation(m)]
    assert not bad, f"{folder.name}/spec.py imports {bad}"


def test_the_import_check_sees_a_launcher_imported_inside_a_function(tmp_path):
    """The check above must find the import the three blocks' specs made inside a function before their
    facets moved out (checked: it fails on them at 687db0f)."""
    spec = tmp_path / "spec.py"
    spec.write_text("def tiles(dtype):\n    from .triton_block import DEFAULTS\n    return DEFAULTS\n")
    assert [m for m in _imports(spec, "kernels.mlp_block") if _implementation(m)] == ["kernels.mlp_block.triton_block"]
    spec.write_text("from kernels.neighbor_agg.graph import CSRGraph\nfrom . import _radius\n")
    assert not [m for m in _imports(spec, "kernels.mp_block") if _implementation(m)]


def test_an_unknown_operation_or_facet_is_refused_by_name():
    with pytest.raises(MageInputError) as e:
        facets.of("no_such_op")
    assert "no_such_op" in str(e.value) and e.value.arg == "op"
    with pytest.raises(MageInputError) as e:
        facets.of("matmul").batch  # an operation is not served
    assert e.value.op == "matmul" and e.value.arg == "batch" and "label" in str(e.value)
    assert facets.get("matmul", "batch", None) is None  # a reader with a default gets it instead


def test_the_figure_order_is_the_order_facet():
    assert list(ops.OPS) == sorted(ops.OPS, key=lambda n: (facets.get(n, "order"), n))


def test_every_registered_column_declares_how_it_is_shown():
    """Figures name, colour and order the columns from the implementation facets, by name."""
    from mage import registry
    registry.load()
    for name in registry.impl_names():
        look = facets.column(name)
        assert look.label and look.color.startswith("#") and isinstance(look.order, int), name
    with pytest.raises(MageInputError) as e:
        facets.column("no_such_column")
    assert "no_such_column" in str(e.value) and e.value.arg == "impl"
