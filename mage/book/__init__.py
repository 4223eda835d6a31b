"""What the book's pages share: which dataset a build shows (one setting, MAGE_DATA), loading it once,
gluing numbers and words into the prose, showing a figure with its caption, and the live tile widget.

Pages call ``setup()`` first. Nothing here needs a GPU (the tile widget uses one when there is one),
and plotly is used only through ``mage.book.figures`` and ``mage.book.figure_page``.
"""
from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from mage import data as mdata
from mage import ops, views

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = "data/h200"  # the one place it is written: the book, ``targets`` and the scripts read it here
PUBLISHED = ROOT / "data" / "rtx4090-published"
GLUE_PREFIX = "application/papermill.record/"  # what myst-nb's glue writes; mirrored so pages run without it


class MissingData(RuntimeError):
    """The dataset the build was told to show is not there."""


def _holds_data(p: Path) -> bool:
    return p.is_dir() and any(p.glob("*.csv"))


def data_dir() -> Path:
    """The data directory this build shows: $MAGE_DATA (relative to the repository root), default data/h200."""
    p = Path(os.environ.get("MAGE_DATA") or DEFAULT_DATA)
    p = p if p.is_absolute() else ROOT / p
    if not _holds_data(p):
        raise MissingData(
            f"The book shows the measurements in {p} (set by MAGE_DATA, default {DEFAULT_DATA}), and that folder "
            "holds no data. Measure on a GPU first (make regenerate), or point MAGE_DATA at a data directory, "
            "e.g. MAGE_DATA=data/<machine> make book.")
    return p


@dataclass
class Book:
    path: Path
    df: pd.DataFrame  # every measurement row
    checks: pd.DataFrame
    ceilings: pd.DataFrame
    env: dict  # run id -> environment
    published: pd.DataFrame  # the original note's RTX 4090 figures

    @property
    def run(self) -> dict:
        """The environment of the newest measured run (the one the prose describes)."""
        measured = {k: v for k, v in self.env.items() if isinstance(v, dict) and v.get("gpu") not in (None, "none")}
        if not measured:
            return {}
        return measured[max(measured, key=lambda k: str(measured[k].get("date", "")))]

    @property
    def machine(self) -> str:
        gpu = str(self.run.get("gpu") or self.path.name)
        return gpu if gpu.lower().startswith("nvidia") or "synthetic" in gpu.lower() else f"NVIDIA {gpu}"

    @property
    def tiles(self) -> pd.DataFrame:
        return views.select(self.df, shape_set="tiles")

    def value(self, op, impl, view="kernel_time", shape_set="field", cache="warm", dtype="fp32", shape=None) -> float:
        """One case's headline value (NaN when absent), at the op's first listed shape of the set by default."""
        return views.value(self.df, op, impl, view, shape_set=shape_set, cache=cache, dtype=dtype, shape=shape)


@functools.lru_cache(maxsize=4)
def _load(path: str) -> Book:
    p = Path(path)
    pub = mdata.load(PUBLISHED) if PUBLISHED.is_dir() else pd.DataFrame(columns=mdata.REQUIRED)
    return Book(p, mdata.load(p), mdata.load_checks(p), mdata.load_ceilings(p), mdata.load_environment(p), pub)


def load() -> Book:
    return _load(str(data_dir()))


def other_machine(name: str) -> Book:
    """Another machine's data folder beside the one the book shows (data/<name>): its rows are never
    mixed with the book's; a page compares columns within it and names the machine."""
    p = data_dir().parent / name
    if not _holds_data(p):
        raise MissingData(f"A passage shows measurements from {p}, which holds no data: it sits beside the "
                          f"book's data folder ({data_dir()}).")
    return _load(str(p))


# ---------------------------------------------------------------------------------------------- glue
class Plain:
    """A glued word or formatted number, shown in the sentence exactly as written. Its plain-text form is a
    quoted literal: the book's builder reads glued text with ``ast.literal_eval`` to unquote it, which
    would turn a bare "3,000" into the tuple (3, 0) and "1.30" into 1.3."""

    def __init__(self, text):
        self.text = str(text)

    def __repr__(self):
        return repr(self.text)


def glue(name: str, value) -> None:
    """Record ``value`` for ``{glue:text}`name``` in the prose; floats as plain floats, text unquoted."""
    from IPython.core.formatters import format_display_data
    from IPython.display import display
    if isinstance(value, (bool, int)) or not isinstance(value, float) and not hasattr(value, "__float__"):
        value = Plain(value)
    elif not isinstance(value, Plain):
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"glue {name!r}: the data has no finite value for it ({value})")
    bundle, meta = format_display_data(value)
    meta["scrapbook"] = dict(name=name, mime_prefix=GLUE_PREFIX)
    display({GLUE_PREFIX + k: v for k, v in bundle.items()}, raw=True, metadata=meta)


def glue_environment(book: Book) -> None:
    """The words of the provenance admonition (notes/_provenance.md)."""
    run = book.run
    glue("env_machine", book.machine)
    glue("env_date", str(run.get("date", "unknown date"))[:10])
    glue("env_data", os.path.relpath(book.path, ROOT))
    for k in ("torch", "triton", "cuda", "driver", "python"):
        glue(f"env_{k}", run.get(k, "unknown"))
    glue("env_commit", str(run.get("git_commit", "unknown"))[:10])
    glue("env_runs", len([k for k, v in book.env.items() if isinstance(v, dict) and v.get("gpu") != "none"]))


def setup() -> Book:
    """First cell of every page: the data and the provenance words. Figures go through ``show``, which
    writes them for the book's shared plotly.js (notes/js/mage-book.js) and for a running Jupyter."""
    book = load()
    glue_environment(book)
    return book


def show(fig) -> None:
    """The figure, its caption (cache mode, shape, machine) and a collapsed table of its plotted values.
    A figure the data cannot draw (``figure_style.not_measured``) becomes one line saying what is missing:
    an empty plot with no values to tabulate is weight without content."""
    meta = fig.layout.meta if isinstance(fig.layout.meta, dict) else {}
    if meta.get("not_measured"):
        from IPython.display import Markdown, display
        title = fig.layout.title.text or "This figure"
        display(Markdown(f"*{title}: {meta.get('caption', 'not measured on this card.')}*"))
        return
    from .figure_page import show as show_figure
    show_figure(fig)


def blocks(df) -> list[str]:
    """The model blocks the data holds field-shape rows of, in figure order: a block defined here but not
    yet measured on this card stays out of the pages until a run records it, and so does one measured only
    at a set of its own (the GPU MODE task's form at its contest shapes, which its own section shows)."""
    have = set(df.loc[df["shape_set"] == "field", "op"]) if len(df) else set()
    return [n for n, s in ops.OPS.items() if s.kind == "block" and n in have]


def ratio(a: float, b: float) -> float:
    return a / b if b else math.nan


def ceiling(book: Book, name: str) -> float:
    """The newest reading of one of the card's ceilings ('copy_gbps', 'empty_span_us'), NaN if unmeasured."""
    return views.ceiling(book.ceilings, name)


# ------------------------------------------------------------------------------------ words from data
def fmt(value: float, spec: str = ".3g", unit: str = "") -> str:
    """A measured number as text, or a plain statement that it was not measured."""
    if value is None or not math.isfinite(value):
        return "(not measured)"
    text = f"{value:{spec}}"
    if "e" in text:  # a reader reads 1,520, not 1.52e+03
        text = (f"{value:,.0f}" if abs(value) >= 1 else
                f"{value:.{1 - math.floor(math.log10(abs(value)))}f}" if value else "0")
    return text + (f" {unit}" if unit else "")


def gnum(name: str, value: float, spec: str = ".3g", unit: str = "") -> None:
    """Glue a number already formatted (so a missing measurement reads as such instead of failing)."""
    glue(name, fmt(value, spec, unit))


def label(impl: str) -> str:
    from .figure_style import impl_label
    return impl_label(impl)


def _main() -> int:
    """``python -m mage.book``: check the data the build will show, before spending time on a build."""
    import sys
    try:
        b = load()
    except (MissingData, mdata.DataError) as e:
        print(f"book: {e}", file=sys.stderr)
        return 2
    print(f"book: showing {b.path} ({len(b.df)} rows, {b.df['op'].nunique()} operations, "
          f"{b.df['impl'].nunique()} implementations; {b.machine})")
    return 0


from . import cli  # noqa: E402,F401 - importing it plugs in the book's subcommands
from .widget import tile_widget  # noqa: E402,F401 - pages call it as book.tile_widget
