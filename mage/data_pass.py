"""The ``pass`` column of the tidy data (issue 16): which part of a training step a row's call ran.

``forward`` is the implementation's own call, ``backward`` the gradients alone (the forward outside the
timed region), ``both`` the two in one call (``mage.ext.training.passes``); ``step`` a whole training step of a block,
optimizer included (``mage.ext.training.train``). Every row written before the column existed measured a forward
call, so a file without the column, or a blank cell, reads as ``forward``: nothing recorded is lost,
and no old row lands in another pass's case.
"""
from __future__ import annotations

import pandas as pd

PASS_VALUES = ("forward", "backward", "both", "step")


def with_pass(df: pd.DataFrame, where: str, error=ValueError) -> pd.DataFrame:
    """``df`` with its ``pass`` column filled ('forward' where absent) and checked against PASS_VALUES."""
    if "pass" not in df.columns:
        return df.assign(**{"pass": "forward"})
    col = df["pass"].astype(object).where(df["pass"].notna() & (df["pass"].astype(str).str.strip() != ""),
                                          "forward").astype(str)
    bad = ~col.isin(PASS_VALUES)
    if bad.any():
        i = int(bad.to_numpy().argmax())
        line = int(df["_line"].iloc[i]) if "_line" in df.columns else i + 2
        raise error(f"{where}: row {line}: unknown pass {col.iloc[i]!r}; known: {list(PASS_VALUES)}")
    return df.assign(**{"pass": col})
