"""Hand-made measurement rows for the tests of the book's sentences (the claims and the guards): a mean per
implementation, optionally with three round means around it, in the data's tidy schema."""
import pandas as pd

from mage import views as V
from mage.ops import OPS

OP = next(iter(OPS))  # any operation with listed shapes; the claims and guards name none of their own


def shape(op=OP, shape_set="field"):
    return V.shapes_of(op, shape_set)[0]


def rows(values: dict, view="kernel_time", op=OP, shape_set="field", spread=None, config="", dtype="fp32"):
    """Round-0 means (and, with ``spread``, three round means) for each impl -> value."""
    out = []
    for impl, v in values.items():
        base = dict(op=op, impl=impl, dtype=dtype, shape=shape(op, "field" if shape_set == "tiles" else shape_set),
                    shape_set=shape_set, cache="warm", view=view, stat="mean", run="r1", config=config,
                    tile_of="", flags="", kernel_names="")
        out.append(dict(base, round=0, value=v))
        if spread is not None:
            out += [dict(base, round=k, value=v * f) for k, f in ((1, 1 - spread), (2, 1.0), (3, 1 + spread))]
    return out


def frame(*parts):
    return pd.DataFrame([r for p in parts for r in p])
