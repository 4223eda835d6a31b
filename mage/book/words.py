"""What a reader of the built book reads: the prose words of each page (headings, paragraphs, lists,
admonitions; not code, math, tables or figure output) against the book's length limits, and the
workshop words (paths, function names, e-notation, the build machine's state) that must not show.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml
from bs4 import BeautifulSoup

ROOT = Path(__file__).resolve().parents[2]
BACK_MATTER = {"notes/appendix", "notes/glossary", "notes/references", "notes/runs"}
LIMITS = {"chapters": 3600, "book": 6000}  # prose words: the opening page and chapters; everything

# Not prose: code, math, tables, figures and computed output; the theme's navigation and permalinks.
NOT_PROSE = ["script", "style", "pre", "table", "nav", "div.highlight", "div.math", "span.math", "mjx-container",
             "div.cell_output", "a.headerlink", "div.prev-next-area", "div.tab-set", "div.sd-tab-set"]
# The parts of a figure its module writes (plot, caption, values table); the figures' own tests read them.
FIGURE_PARTS = ["div.mage-figure", "p.mage-caption", "details.mage-values", "div.mage-tiles"]
# Reader text is everything the article shows except code listings, math and the figures' own parts.
NOT_READER = ["script", "style", "pre", "div.highlight", "a.headerlink", "div.math", "span.math", "mjx-container",
              *FIGURE_PARTS]

WORKSHOP = {
    "a repository path": r"\b(?:kernels|mage|tests|data|notes)/[\w./-]+",
    "a source file": r"\b\w+\.(?:py|rs|csv|json)\b",
    "a code name with underscores": r"\b[A-Za-z]+(?:_[A-Za-z0-9]+)+_?\b",
    "a raw kernel symbol": r"\bat::|\bvoid \w|<\d+, \d+",
    "a project target": r"(?<!PTX )(?<!GPU )(?<!cuda )\btargets?\b",
    "nan in a table or sentence": r"\bnan\b",
    "e-notation": r"\b\d+(?:\.\d+)?e[+-]?\d+\b",
    "the build machine's state": r"no GPU here|build machine|not measured on this card yet",
    "a plural after one": r"\b1 launches\b",
    "the data folder": r"\bdata data\b|data/h200",
}


def pages(root: Path = ROOT) -> list[str]:
    """The book's pages in reading order, as in the table of contents (without the .html)."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        for c in part.get("chapters", []):
            files += [c["file"]] + [s["file"] for s in c.get("sections", [])]
    return files


def _article(html: str, drop) -> BeautifulSoup:
    soup = BeautifulSoup(html, "html.parser")
    art = soup.select_one("article.bd-article") or soup.body or soup
    for sel in drop:
        for el in art.select(sel):
            el.decompose()
    return art


def prose(html: str) -> str:
    """A page's prose as one string of words."""
    return " ".join(_article(html, NOT_PROSE).get_text(" ").split())


def words(text: str) -> int:
    """Words: runs of non-space characters holding a letter or a digit (a lone dash or symbol is not one)."""
    return sum(1 for t in text.split() if re.search(r"\w", t))


def reader_text(html: str) -> str:
    """Everything a reader sees in a page's article: prose, tables, captions and values tables."""
    return " ".join(_article(html, NOT_READER).get_text(" ").split())


def workshop(text: str) -> list[tuple[str, str]]:
    """(kind, the words around it) for every workshop word in ``text``."""
    hits = []
    for kind, pattern in WORKSHOP.items():
        for m in re.finditer(pattern, text):
            hits.append((kind, text[max(0, m.start() - 40):m.end() + 40]))
    return hits


def counts(html_dir: Path, root: Path = ROOT) -> dict[str, int]:
    """Prose words per page of a built site (``_build/html``)."""
    out = {}
    for p in pages(root):
        f = html_dir / ("index.html" if p == pages(root)[0] and not (html_dir / f"{p}.html").exists() else f"{p}.html")
        out[p] = words(prose(f.read_text(encoding="utf-8")))
    return out


def totals(c: dict[str, int]) -> dict[str, int]:
    """The two sums the limits apply to."""
    return {"chapters": sum(v for k, v in c.items() if k not in BACK_MATTER), "book": sum(c.values())}


def _main(argv) -> int:
    html = Path(argv[1] if len(argv) > 1 else ROOT / "_build" / "html")
    c = counts(html)
    for p, n in c.items():
        print(f"{p:28s} {n:6d}")
    for k, n in totals(c).items():
        print(f"{k:28s} {n:6d}  (limit {LIMITS[k]})")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv))
