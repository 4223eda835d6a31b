"""Execute the book's pages (MyST Markdown notebooks, in _toc.yml order) with nbclient and save each as an
executed .ipynb: the regeneration path on a machine that has a GPU but no Jupyter Book.

    MAGE_DATA=data/h200 python3 notes/execute.py --out executed/ [--pages matmul layernorm]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from mage.book import DEFAULT_DATA

NOTES = Path(__file__).resolve().parent
ROOT = NOTES.parent


def pages() -> list[Path]:
    """The pages in reading order, read from _toc.yml without needing a YAML parser."""
    names = re.findall(r"^\s*(?:root|-\s*file)\s*:\s*(\S+)", (ROOT / "_toc.yml").read_text(), re.M)
    return [ROOT / f"{n}.md" for n in names]


def execute(path: Path, out: Path, timeout: int) -> dict:
    nb = jupytext.read(path)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=False,
                            resources={"metadata": {"path": str(path.parent)}})
    t0 = time.perf_counter()
    error = ""
    try:
        client.execute()
    except CellExecutionError as e:
        error = str(e).splitlines()[-1] if str(e) else type(e).__name__
    seconds = time.perf_counter() - t0
    nbformat.write(nb, out / f"{path.stem}.ipynb")
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    glued = sum(1 for o in outputs if "scrapbook" in o.get("metadata", {}))
    figures = sum(1 for o in outputs if "plotly-graph-div" in str(o.get("data", {}).get("text/html", "")))
    widgets = sum(1 for o in outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {}))
    return dict(page=path.stem, seconds=round(seconds, 1), ok=not error, error=error, glued=glued,
                figures=figures, widgets=widgets)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for the executed notebooks")
    ap.add_argument("--pages", nargs="*", help="page names (default: every page of _toc.yml)")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    todo = [p for p in pages() if not a.pages or p.stem in a.pages]
    print(f"executing {len(todo)} pages against MAGE_DATA={os.environ.get('MAGE_DATA', f'(default {DEFAULT_DATA})')}",
          flush=True)
    results = []
    for p in todo:
        r = execute(p, out, a.timeout)
        results.append(r)
        print(f"  {r['page']:<12} {'ok' if r['ok'] else 'FAILED'} {r['seconds']:6.1f} s  {r['figures']} figures, "
              f"{r['glued']} glued values, {r['widgets']} widgets {r['error']}", flush=True)
    (out / "executed.json").write_text(json.dumps(
        {"data": os.environ.get("MAGE_DATA", DEFAULT_DATA), "pages": results}, indent=1))
    failed = [r["page"] for r in results if not r["ok"]]
    print(f"wrote {out}/ ({len(results) - len(failed)} of {len(results)} pages ran cleanly)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
