"""The book's live tile widget: sliders over a recorded tile sweep. On a GPU each move builds, checks and
times the chosen variant; anywhere else (the published page) the sliders run in the page and show the
recorded numbers."""
from __future__ import annotations

import json

from mage import ops

from . import Book


def _recorded(book: Book, op: str, config: dict, tile_of="field"):
    from .figure_tiles import tile_table
    t = tile_table(book.tiles, op, tile_of)
    if t.empty:
        return None
    want = json.dumps(config, sort_keys=True)
    hit = t[t["config"].map(lambda c: json.dumps(json.loads(c), sort_keys=True)) == want]
    return hit.iloc[0] if len(hit) else None


def tile_widget(book: Book, op: str, tile_of: str = "field"):
    """Sliders over the recorded sweep's values of each tile parameter, and what the chosen tile means.
    In a running kernel on a GPU (ipywidgets) each change builds the swept implementation's variant
    (``Impl.variant``), checks it and times it. Anywhere else, the published page included, the
    sliders run in the page: each move shows the tile's reuse count (from the op's reuse facet) and the
    recorded measurement for it, and says that no kernel ran."""
    from IPython.display import HTML, Markdown, display
    from .figure_tiles import tile_explorer_html, tile_table
    t = tile_table(book.tiles, op, tile_of)
    if t.empty:
        display(Markdown(f"*The data in {book.path.name} records no tile sweep for {op}, so there is nothing to "
                         "explore here.*"))
        return
    impl = str(t["impl"].iloc[0])
    live = _live_reason(op, impl)
    if live is not None:
        display(HTML(tile_explorer_html(book.tiles, op, book.machine, live, tile_of)))
        return
    _live_widget(book, op, impl, t, tile_of)


def _live_widget(book: Book, op: str, impl: str, t, tile_of: str):
    """The GPU path: ipywidgets sliders whose changes run, check and time the chosen variant."""
    import ipywidgets as w
    from IPython.display import display
    from .figure_tiles import reuse, slider_keys
    keys = slider_keys(t)
    shape = ops.parse_shape(t["shape"].iloc[0])
    sliders = {k: w.SelectionSlider(options=sorted(set(int(v) for v in t[k].dropna())), value=int(t[k].iloc[0]),
                                    description=k, continuous_update=False,
                                    style={"description_width": "110px"}, layout=w.Layout(width="100%"))
               for k in keys}
    out = w.HTML()

    def update(*_):
        cfg = {k: s.value for k, s in sliders.items()}
        ru = reuse(op, cfg)
        lines = [f"<b>{op}</b> at {ops.shape_key(shape)}, config <code>{json.dumps(cfg)}</code>"]
        if ru:
            lines.append(f"Per K step one program loads {ru['loads']:,} values for {ru['fmas']:,} multiply-adds: "
                         f"<b>{ru['fmas_per_load']:.3g}</b> multiply-adds per loaded value.")
        try:
            from mage import registry
            from mage.session import quick
            r = quick(registry.get(op, impl).variant(**cfg), shape)
            status = "passed" if r["passed"] else f"FAILED ({r.get('reason', '')})"
            lines.append(f"<b>Live on this GPU</b>: check {status}, error {r['error']:.2g}; kernel "
                         f"{r['kernel_us']:.3g} µs, span {r['span_us']:.3g} µs.")
        except Exception as e:  # noqa: BLE001 - a config that fails to compile is a result to show
            lines.append(f"<b>Live run failed</b>: {type(e).__name__}: {str(e)[:300]}")
        rec = _recorded(book, op, cfg, tile_of)
        if rec is not None:
            lines.append(f"<b>Recorded</b> on {book.machine}: kernel {rec['kernel_us']:.3g} µs, "
                         f"span {rec['span_us']:.3g} µs, {rec['gbps']:.0f} GB/s.")
        out.value = "<br>".join(lines)

    for s in sliders.values():
        s.observe(update, names="value")
    update()
    display(w.VBox(list(sliders.values()) + [out]))


def _live_reason(op: str, impl: str):
    """None when the widget can run the swept implementation here, else why it shows recorded numbers."""
    try:
        import torch
    except ImportError:
        return "no kernel runs while you read"
    if not torch.cuda.is_available():  # the published page: say what the reader sees, not the build's state
        return "no kernel runs while you read"
    try:
        from mage import registry
        from mage.session import quick  # noqa: F401
        found = registry.get(op, impl)
    except Exception as e:  # noqa: BLE001
        return f"this implementation cannot be loaded here ({type(e).__name__})"
    if found.variant is None:
        return "this implementation builds no tile variants"
    return found.runs_on("cuda")
