"""The Rust kernel tables: each ``kernels/<op>/rust_table.py`` lists its op's PTX kernels, and everything
else is derived from them: the PTX entry points and ptxas's launch bounds (``gen.py``, run by build.sh),
the host library's checks, geometry and generic launch (generated Rust), the Python argument
marshalling (``kernels._rust``) and rust_native (which launches by name through the same library).

A kernel's entry, as plain data (no imports, so the build reads it without the project installed):

  name           the PTX entry point
  call           the Rust function of the op's rust.rs that the entry runs ("triangle::<32>")
  params         "NAME: TYPE" in order; TYPE one of PARAM_TYPES. The kernel's own argument is the name in
                 lower case; the name is what error messages say ("A is a null pointer", "M = -1 ...")
  threads        the largest block it is launched with (ptxas .maxntid; a larger block is refused)
  blocks_per_sm  blocks an SM should hold (ptxas .minnctapersm, which sets the register budget)
  lengths        per pointer, the elements it must hold (Rust over the sizes as u64): not null when > 0
  work           Rust over the sizes as u64: nothing is launched when it is 0
  require        [condition, message] pairs: a call where the condition is false is refused
  geometry       Rust over the sizes as u32 giving launch::Checked<Geometry> (the host's launch.rs)
"""
from __future__ import annotations

import re
import runpy
from dataclasses import dataclass
from pathlib import Path

KERNELS_DIR = Path(__file__).resolve().parent.parent
# type -> (kind, ctypes-free packing): pointers travel as u64 addresses, sizes as i64, f32 as its bits;
# u16 pointers are bf16 storage (the bits of each value)
PARAM_TYPES = ("*const f32", "*mut f32", "*const u16", "*mut u16", "*const i32", "*mut u32", "u32", "f32")
_FIELDS = ("name", "call", "params", "threads", "blocks_per_sm", "lengths", "work", "require", "geometry")


@dataclass(frozen=True)
class Param:
    name: str
    ty: str

    @property
    def ident(self) -> str:
        return self.name.lower()

    @property
    def pointer(self) -> bool:
        return self.ty.startswith("*")

    @property
    def output(self) -> bool:
        return self.ty.startswith("*mut")


@dataclass(frozen=True)
class Kernel:
    op: str
    name: str
    call: str
    params: tuple
    threads: int
    blocks_per_sm: int
    lengths: dict
    work: str
    require: tuple
    geometry: str


def _parse(op: str, entry: dict, where: str) -> Kernel:
    missing = [f for f in _FIELDS if f not in entry]
    extra = [f for f in entry if f not in _FIELDS]
    if missing or extra:
        raise ValueError(f"{where}: kernel {entry.get('name')!r}: missing {missing}, unknown {extra}")
    params = []
    for p in entry["params"]:
        m = re.fullmatch(r"\s*(\w+)\s*:\s*(.+?)\s*", p)
        if not m or m.group(2) not in PARAM_TYPES:
            raise ValueError(f"{where}: parameter {p!r} of {entry['name']} is not 'NAME: TYPE' with TYPE in "
                             f"{PARAM_TYPES}")
        params.append(Param(m.group(1), m.group(2)))
    idents = [p.ident for p in params]
    if len(set(idents)) != len(idents):
        raise ValueError(f"{where}: {entry['name']} has two parameters with one lower-case name")
    pointers = {p.name for p in params if p.pointer}
    if not set(entry["lengths"]) <= pointers:
        raise ValueError(f"{where}: {entry['name']}: lengths for {set(entry['lengths']) - pointers}, not pointers")
    if not (0 < entry["threads"] <= 1024 and entry["blocks_per_sm"] >= 1):
        raise ValueError(f"{where}: {entry['name']}: threads must be in 1..1024 and blocks_per_sm >= 1")
    return Kernel(op, entry["name"], entry["call"], tuple(params), entry["threads"], entry["blocks_per_sm"],
                  dict(entry["lengths"]), entry["work"], tuple(tuple(r) for r in entry["require"]),
                  entry["geometry"])


def load(root: Path = KERNELS_DIR) -> dict[str, Kernel]:
    """Every kernel of every op folder under ``root``, by name, in op-folder then table order."""
    out: dict[str, Kernel] = {}
    for path in sorted(root.glob("*/rust_table.py")):
        op = path.parent.name
        if op.startswith("_"):
            continue
        if not (path.parent / "rust.rs").exists():
            raise ValueError(f"{path}: the op folder has no rust.rs for its kernels")
        for entry in runpy.run_path(str(path))["KERNELS"]:
            k = _parse(op, entry, str(path))
            if k.name in out:
                raise ValueError(f"{path}: kernel {k.name} is also in {out[k.name].op}")
            out[k.name] = k
    return out
