"""Two records of the same cases side by side: did a second run reproduce the first? Kernel time is
the stable view (the host's speed moves spans between runs on a shared machine), so it is the one
compared by default; every row of the first record is matched or reported missing."""
from __future__ import annotations

import pandas as pd

KEY = ["op", "impl", "dtype", "shape_set", "shape", "cache"]


def headline(df: pd.DataFrame, view: str) -> pd.Series:
    """One value per case: the overall mean (round 0) of ``view``."""
    d = df[(df["view"] == view) & (df["round"] == 0) & (df["stat"] == "mean")
           & df["shape_set"].isin(["field", "large", "sweep"])]
    return d.groupby(KEY)["value"].agg(lambda v: v.iloc[-1])  # the latest row of a case, if several


def compare(old: pd.DataFrame, new: pd.DataFrame, view: str = "kernel_time", tol: float = 0.03) -> pd.DataFrame:
    """Per case of ``old`` present in ``new``: both values and new/old; ``within`` says |ratio - 1| <= tol."""
    a, b = headline(old, view), headline(new, view)
    both = pd.concat({"old": a, "new": b}, axis=1, join="inner").reset_index()
    both["ratio"] = both["new"] / both["old"]
    both["within"] = (both["ratio"] - 1).abs() <= tol
    return both


def summary(old: pd.DataFrame, new: pd.DataFrame, view: str = "kernel_time", tol: float = 0.03) -> str:
    c = compare(old, new, view, tol)
    missing = sorted(set(headline(new, view).index) - set(map(tuple, c[KEY].values)))
    lines = [f"{view}: {int(c['within'].sum())} of {len(c)} cases within {tol:.0%} "
             f"(ratio new/old from {c['ratio'].min():.3f} to {c['ratio'].max():.3f}, median {c['ratio'].median():.3f})"]
    out = c[~c["within"]].sort_values("ratio")
    if len(out):
        lines.append(out.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if missing:
        lines.append(f"{len(missing)} cases of the new record are not in the old one: {missing[:8]}")
    return "\n".join(lines)


def spread(df: pd.DataFrame, view: str = "event_span") -> pd.DataFrame:
    """Across the runs recorded in ``df``: per case, how far the runs' headline values lie apart
    ((max - min) / median), and how many runs hold it."""
    d = df[(df["view"] == view) & (df["round"] == 0) & (df["stat"] == "mean")]
    g = d.groupby(KEY)["value"]
    out = pd.DataFrame({"runs": g.size(), "median": g.median(), "spread": (g.max() - g.min()) / g.median()})
    return out.reset_index()
