"""The layers of the code, read from its imports (ast, nothing imported): no import circles in mage/ or
kernels/, the core imports no extension, kernels import no extension, nothing outside tools/ imports it.

Layers, bottom up: the core (mage/*.py), the kernels (kernels/), the extensions (mage/ext/) and the
book's glue (mage/book/). An import inside a function runs late, so it cannot fail on a half-imported
module; it is still an arrow, so every rule holds for it too. Package __init__ files importing their own
modules are not counted as circles with them (importing ``a.b`` runs ``a`` first by design).
``python tests/test_layers.py`` prints the counts.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("mage", "kernels")
# where the command line is assembled: the one core module that loads the list of extensions
COMPOSITION_ROOT = {"mage.__main__": {"mage.ext"}}
# Circles through a lazy import still to close: none (the blocks' spec <-> Triton block circles closed when
# their labels, batching and parts moved to facets modules). This list only shrinks.
LAZY_CIRCLES_TO_CLOSE: list = []


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(tops=PACKAGES + ("tools", "tests")) -> dict[str, Path]:
    found = {}
    for top in tops:
        for p in sorted((ROOT / top).rglob("*.py")):
            if "build" not in p.parts and ".venv" not in p.parts:
                found[_name(p)] = p
    return found


def _is_test(name: str) -> bool:
    leaf = name.rsplit(".", 1)[-1]
    return name.startswith("tests") or leaf.startswith("test_") or ".tests." in name or leaf.endswith("testing")


def imports(name: str, path: Path, known) -> list[tuple[str, bool]]:
    """(imported module, at module level?) for every import in the file, resolved to a known module
    where one matches (``from pkg import mod`` is pkg.mod), else the name as written."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []

    def resolve(mod: str) -> str:
        while mod and mod not in known and "." in mod:
            mod = mod.rpartition(".")[0]
        return mod

    def visit(node, top: bool):
        for child in ast.iter_child_nodes(node):
            inner = top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                out.extend((resolve(a.name), top) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - child.level + 1]
                    base = ".".join(parts + ([child.module] if child.module else []))
                for a in child.names:
                    full = f"{base}.{a.name}"
                    out.append((full if full in known else resolve(base), top))
            visit(child, inner)

    visit(tree, True)
    return out


def graph(module_level_only: bool) -> dict[str, set]:
    known = modules()
    g = {}
    for name, path in known.items():
        if name.split(".")[0] not in PACKAGES:
            continue
        g[name] = {m for m, top in imports(name, path, known) if (top or not module_level_only)
                   and m in known and m.split(".")[0] in PACKAGES and m != name
                   and not name.startswith(m + ".")}  # a module's own package's __init__: not a circle
    return g


def circles(g: dict[str, set]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(g):
        if v not in index:
            strong(v)
    return out


def _is_facets(name: str) -> bool:
    """An operation's facets (``kernels/<op>/facets.py``, and ``kernels/_targets.py``, the targets several
    share): what the extensions know of the operation, kept in its folder so one folder holds all of it.
    They may import the extensions' types (a Part, a Batching, a Target); no kernel module imports them."""
    return name.rsplit(".", 1)[-1] == "facets" and name.startswith("kernels.") or name == "kernels._targets"


def layer(name: str) -> str:
    if name.startswith("mage.ext"):
        return "ext"
    if name.startswith("mage.book"):
        return "book"
    if name.startswith("mage"):
        return "core"
    if name.startswith("kernels"):
        return "kernels"
    return name.split(".")[0]


def wrong_way() -> list[str]:
    """Arrows back up: core -> ext/book, kernel code -> ext/book or a facets module, anything but tools ->
    tools."""
    known = modules()
    bad = []
    for name, path in known.items():
        for m, _ in imports(name, path, known):
            to, frm = layer(m), layer(name)
            if m in COMPOSITION_ROOT.get(name, ()):
                continue
            if frm == "core" and to in ("ext", "book"):
                bad.append(f"{name} -> {m}")
            elif frm == "kernels" and to in ("ext", "book") and not _is_test(name) and not _is_facets(name):
                bad.append(f"{name} -> {m}")
            elif frm == "kernels" and _is_facets(m) and not _is_facets(name) and not _is_test(name):
                bad.append(f"{name} -> {m}")  # kernels read facets through mage.facets, never by import
            elif to == "tools" and frm != "tools":
                bad.append(f"{name} -> {m}")
    return sorted(set(bad))


def test_no_import_circles():
    assert circles(graph(module_level_only=True)) == []
    assert [c for c in circles(graph(module_level_only=False)) if c not in LAZY_CIRCLES_TO_CLOSE] == []


def test_no_arrow_back_up():
    assert wrong_way() == []


def test_the_checker_sees_a_circle_and_an_arrow_back_up(tmp_path, monkeypatch):
    # a planted circle (a <-> b, one of the two lazy) and a core module importing an extension
    assert circles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert layer("mage.ext.training.passes") == "ext" and layer("mage.measure") == "core"
    known = {"mage.measure": None, "mage.ext.training": None, "mage.ext.training.passes": None}
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from mage.ext.training import passes\n")
    assert imports("mage.measure", f, known) == [("mage.ext.training.passes", False)]


if __name__ == "__main__":
    for level, only in (("module-level", True), ("all, lazy included", False)):
        found = circles(graph(module_level_only=only))
        print(f"import circles ({level}): {len(found)}")
        for c in found:
            print("   ", " <-> ".join(c))
    arrows = wrong_way()
    print(f"arrows back up: {len(arrows)}")
    for a in arrows:
        print("   ", a)
