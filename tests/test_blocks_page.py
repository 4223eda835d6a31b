"""The model blocks' part of the book on synthetic data: its figures (every one draws, its buttons toggle
between cases, and one without rows says so), and both pages executed from a data folder with the
attribution and the service rows and from one without them: a page stops only on a guarded sentence."""
import os
from pathlib import Path

import pandas as pd
import pytest

from tests.support.synthetic import RUN, make

from mage import facets, ops
from mage.book import figure_blocks as FB
from mage.data import load, merge_csv, save_csv
from mage.ext.amdahl import attribution as amdahl
from mage.ext.service.stats import base_row, sweep_rows

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = [n for n, s in ops.OPS.items() if s.kind == "block"]
IMPLS = ("pytorch", "torch_compile_graphs", "triton")


def _attribution(out: Path) -> None:
    """Every block at its field shape in both precisions, a made-up eager profile and a custom column
    a little faster; bf16 without the operations' custom columns (no prediction)."""
    rows = []
    for name in BLOCKS:
        spec = ops.OPS[name]
        shape = spec.shapes["field"][0]
        for dtype in ("fp32", "bf16"):
            names = {f"{p.op}_kernel_{i}": 10.0 * (i + 1) for i, p in enumerate(facets.get(name, "parts"))}
            names["unclaimed"] = 3.0
            # kernel names the block's own patterns claim: one per part
            prof = {}
            for p, (k, us) in zip(facets.get(name, "parts"), names.items()):
                prof[_claimed(p, facets.get(name, "parts")) or k] = us
            custom = {k: 0.8 * v for k, v in prof.items()}
            op_us = {}
            for p in facets.get(name, "parts"):
                if p.shapes is not None and dtype == "fp32":
                    op_us[(p.op, "pytorch")] = 10.0
                    mine = p.column(dtype, "triton")[0]
                    op_us[(p.op, mine)] = 10.0 if mine == "pytorch" else 7.0
            rows += amdahl.rows_for_case(name, dtype, ops.shape_key(shape), "field", RUN, facets.get(name, "parts"), "pytorch",
                                         "triton", {"pytorch": prof, "triton": custom}, op_us)
    merge_csv(pd.DataFrame(rows, columns=amdahl.COLUMNS), out / amdahl.FILE, amdahl.KEY)


def _claimed(part, parts) -> str:
    """A kernel name that this part's patterns claim before any earlier part's."""
    for cand in ("vectorized_layer_norm_kernel", "_bias_gelu_kernel", "ampere_sgemm_128x64_tn", "_gate_kernel",
                 "_batched_gemm_kernel", "_neighbor_agg_kernel", "vectorized_elementwise_kernel_add"):
        if amdahl.classify(cand, parts) == part.op:
            return cand
    return ""


def _service(out: Path) -> None:
    """Closed loop, batch sweep and open loop rows for every block and three columns, in the schema the
    service harness writes."""
    rows = []
    for name in BLOCKS:
        shape = ops.shape_key(ops.OPS[name].shapes["field"][0])
        for k, impl in enumerate(IMPLS):
            for host in ("pinned", "pageable"):
                base = base_row(name, impl, "fp32", shape, RUN, host, family="pytorch" if k < 2 else "triton")
                lat = {"p50": 100 + 10 * k, "p90": 110 + 10 * k, "p99": 130 + 10 * k, "p999": 200, "max": 400}
                b = dict(base, loop="closed")
                rows += [dict(b, view="latency", stat=s, value=float(v), unit="us") for s, v in lat.items()]
                for stage, share in (("h2d", 0.2), ("compute", 0.6), ("d2h", 0.1), ("other", 0.1)):
                    rows.append(dict(b, view="latency_share", stat="mean", value=share, unit="fraction", stage=stage))
                sweep = [dict(batch=bb, fits=True, requests_per_s=1e4 * bb / (1 + bb / 64), seconds=1e-4 * (1 + bb / 64),
                              parts={"h2d": 2e-5, "compute": 6e-5, "d2h": 1e-5, "other": 1e-5}) for bb in (1, 4, 16, 64)]
                rows += sweep_rows(sweep, base, items=128)
                for load_ in (0.1, 0.5, 0.9):
                    o = dict(base, loop="open", batch=16, wait_us=200.0, load=load_, rate=1e4 * load_)
                    rows.append(dict(o, view="latency", stat="p99", value=150 / (1 - load_), unit="us"))
                    for stage, share in (("queue", load_), ("compute", 1 - load_)):
                        rows.append(dict(o, view="latency_share", stat="mean", value=share, unit="fraction",
                                         stage=stage))
    save_csv(pd.DataFrame(rows), out / "service.csv")


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    d = make(tmp_path_factory.mktemp("blocks"), sets=("field",))
    _attribution(d)
    _service(d)
    return d


@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    return make(tmp_path_factory.mktemp("bare"), sets=("field",))


def _buttons_toggle(fig):
    menus = fig.layout.updatemenus
    assert menus, "a figure with several cases offers buttons"
    shown = [tuple(b.args[0]["visible"]) for b in menus[0].buttons]
    assert len(set(shown)) == len(shown) and all(any(v) for v in shown)


def test_amdahl_figures_draw_and_toggle_precisions(full):
    t = amdahl.table(amdahl.load(full))
    assert set(t["dtype"]) == {"fp32", "bf16"} and set(t["block"]) == set(BLOCKS)
    for fig in (FB.amdahl_bars(t, "X"), FB.amdahl_shares(t, "X")):
        assert fig.data and fig.layout.meta["caption"]
        _buttons_toggle(fig)
    fp32 = t[t["dtype"] == "fp32"]
    assert fp32["predicted"].notna().all() and fp32["measured"].notna().all()
    assert t[t["dtype"] == "bf16"]["predicted"].isna().all()  # no operation columns at bf16 here


@pytest.mark.parametrize("make_fig", [FB.throughput, FB.latency, FB.open_loop, FB.latency_parts])
def test_service_figures_draw_and_toggle_cases(full, make_fig):
    fig = make_fig(load(full), "X")
    assert len(fig.data) >= len(BLOCKS) * 2 and fig.layout.meta["caption"]
    _buttons_toggle(fig)


@pytest.mark.parametrize("make_fig", [FB.throughput, FB.latency, FB.open_loop, FB.latency_parts])
def test_figures_without_rows_say_not_measured(bare, make_fig):
    fig = make_fig(load(bare), "X")
    assert "not measured" in fig.layout.meta["caption"]
    assert "not measured" in FB.amdahl_bars(amdahl.table(amdahl.load(bare)), "X").layout.meta["caption"]


def _execute(page: str, data: Path) -> str:
    """Run one page as a notebook against ``data``: 'ran', or the error that stopped it."""
    jupytext = pytest.importorskip("jupytext")
    nbclient = pytest.importorskip("nbclient")
    nb = jupytext.read(ROOT / "notes" / f"{page}.md")
    os.environ["MAGE_DATA"] = str(data)
    try:
        nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                resources={"metadata": {"path": str(ROOT / "notes")}}).execute()
    except nbclient.exceptions.CellExecutionError as e:
        return str(e)
    finally:
        os.environ.pop("MAGE_DATA", None)
    return "ran"


@pytest.mark.book  # executes whole pages (10-15 s each): the book's tier
@pytest.mark.parametrize("page", ["blocks", "blocks_service"])
def test_pages_run_or_refuse_data_that_does_not_hold_their_sentences(full, bare, page):
    """The pages' sentences are written for the recorded data and guarded: on other data a page runs
    only where every guarded sentence still holds, and otherwise stops on the guard, never elsewhere."""
    got = _execute(page, full)
    assert got == "ran" or "ClaimFailed" in got, got[-2000:]
    got = _execute(page, bare)
    assert "ClaimFailed" in got, got[-2000:]
