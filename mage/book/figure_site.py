"""The built site around the figures: a Sphinx extension (named in _config.yml) and the page weights
that `make book` prints.

The extension
- drops sphinx-thebe's inline configuration and script: the book launches no live kernels (thebe is
  off), and that extension's handler runs twice per build, declaring ``const THEBE_JS_URL`` twice,
  which logs a console error on every page;
- offers each page's executed notebook (.ipynb) for download: the theme only copies it when a launch
  service is configured, and this book has none;
- links the source from every page's header: the public repository when _config.yml's ``repository.url``
  is set, otherwise an archive of the committed source (``git archive HEAD``, data included) packed into
  the built site, so the link works wherever the HTML is served; no link when neither exists.

    python -m mage.book.figure_site _build/html     # each page's HTML and first-load weight
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path


def _drop_thebe(app, pagename, templatename, context, doctree):
    def keep(asset):
        name = str(getattr(asset, "filename", asset) or "")
        body = str(getattr(asset, "attributes", {}).get("body", ""))
        return "thebe" not in name and "THEBE_JS_URL" not in body
    for key in ("script_files", "css_files"):
        if key in context:
            context[key] = [a for a in context[key] if keep(a)]


def _offer_notebook(app, pagename, templatename, context, doctree):
    src = Path(app.outdir).parent / "jupyter_execute" / f"{pagename}.ipynb"
    if doctree is None or not src.is_file():
        return
    dst = Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)
    context["ipynb_source"] = f"{pagename}.ipynb"


SOURCE_ARCHIVE = "_static/source/mage-field-notes.tar.gz"


def _pack_source(app):
    """Where the header's source link points: the configured repository, else the packed archive."""
    url = str((app.config.html_theme_options or {}).get("repository_url") or "").strip()
    app.mage_source = None
    if url:
        app.mage_source = ("url", url)
        return
    root = Path(app.srcdir)
    dst = Path(app.outdir) / SOURCE_ARCHIVE
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, check=True,
                                capture_output=True, text=True).stdout.strip()
        subprocess.run(["git", "archive", "--format=tar.gz", "--prefix=mage-field-notes/", "-o", str(dst), "HEAD"],
                       cwd=root, check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return  # not a git checkout (an unpacked archive, say): no link rather than a dead one
    app.mage_source = ("archive", commit)


def _source_link(app, pagename, templatename, context, doctree):
    found = getattr(app, "mage_source", None)
    if not found or "header_buttons" not in context:
        return
    kind, what = found
    if kind == "url":
        url, tip, icon = what, "The source: the repository", "fab fa-github" if "github.com" in what else "fas fa-code"
    else:
        url = context["pathto"](SOURCE_ARCHIVE, 1)
        tip, icon = f"The source: the repository at commit {what} (.tar.gz)", "fas fa-file-zipper"
    context["header_buttons"].append(dict(type="link", url=url, tooltip=tip, icon=icon, label="mage-source"))


def setup(app):
    # Before the theme builds its header buttons (default priority 500) and writes the script tags.
    app.connect("html-page-context", _offer_notebook, priority=400)
    app.connect("html-page-context", _drop_thebe, priority=900)
    # After the theme's own header buttons, so the source link sits at the end of the row.
    app.connect("builder-inited", _pack_source)
    app.connect("html-page-context", _source_link, priority=600)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


# ------------------------------------------------------------------------------------------- weights
_REF = re.compile(r'<(?:script|link)\b[^>]*?(?:src|href)="([^"#]+)"', re.I)


def _local(page: Path, ref: str, root: Path):
    if "://" in ref or ref.startswith(("data:", "mailto:", "//")):
        return None
    p = (page.parent / ref.split("?")[0]).resolve()
    return p if p.is_file() and root.resolve() in p.parents else None


def weights(html_dir: Path) -> list[dict]:
    """Per page: its HTML size and an estimate of its first load (HTML, the scripts and styles it names,
    plotly.js when it has figures, MathJax when it has math). Fonts and images loaded from CSS are not
    counted here; the browser test measures the real transfer."""
    html_dir = Path(html_dir)
    plotly = html_dir / "_static" / "offline" / "plotly.min.js"
    mathjax = html_dir / "_static" / "offline" / "mathjax" / "tex-chtml.js"
    out = []
    pages = sorted(p for p in html_dir.rglob("*.html") if not any(part.startswith("_") for part in
                                                                 p.relative_to(html_dir).parts))
    for page in pages:
        text = page.read_text(errors="replace")
        assets = {p for p in (_local(page, r, html_dir) for r in _REF.findall(text)) if p is not None}
        if 'class="mage-figure"' in text and plotly.is_file():
            assets.add(plotly)
        if "math" in text and mathjax.is_file() and any("mathjax" in str(a) for a in assets):
            assets.add(mathjax)
        size = page.stat().st_size
        out.append(dict(page=str(page.relative_to(html_dir)), html=size,
                        first_load=size + sum(a.stat().st_size for a in assets)))
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    html_dir = Path(argv[0] if argv else "_build/html")
    if not html_dir.is_dir():
        print(f"page weights: no built book at {html_dir}", file=sys.stderr)
        return 2
    rows = weights(html_dir)
    print(f"{'page':<28} {'HTML':>9} {'first load':>11}")
    for r in rows:
        print(f"{r['page']:<28} {r['html'] / 1e6:8.2f}M {r['first_load'] / 1e6:10.2f}M")
    print("HTML is each page's own file; first load adds the scripts and styles it names (shared and cached "
          "after the first page). The browser test (make book-test) measures the real transfer.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
