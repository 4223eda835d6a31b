"""The book's reader text: the word counter and the workshop-word scan on small pages (fast), and, over
the built site (marked book; builds it when _build/html is missing), the length limits, no workshop words
on any page, the opening page's answer before its first figure in at most five sentences, and each
chapter's finding in at most three."""
from __future__ import annotations

import fcntl
import re
import subprocess
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from mage.book import words as W

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
CHAPTERS = [p for p in W.pages() if p not in W.BACK_MATTER]

PAGE = """<html><body><nav>Contents Home</nav><article class="bd-article">
<h1>Title here<a class="headerlink">#</a></h1>
<p>Triton took <span class="pasted-text">2.72</span> µs, a tie.</p>
<div class="highlight"><pre>for i in range(10): pass</pre></div>
<div class="math">\\[ C_{ij} = \\sum_k A_{ik} B_{kj} \\]</div>
<table><tr><td>kernel time</td><td>1.52e+03</td></tr></table>
<div class="cell_output">figure caption words</div>
<ul><li>one two three</li></ul>
</article></body></html>"""


def test_prose_counts_only_what_a_reader_reads_as_text():
    text = W.prose(PAGE)
    assert text == "Title here Triton took 2.72 µs, a tie. one two three"
    assert W.words(text) == 11
    assert W.words("a - b — 3") == 3


def test_workshop_words_are_found_and_plain_words_pass():
    bad = {
        "a repository path": "as kernels/NOTES.md shows",
        "a source file": "see reduce.py for it",
        "a code name with underscores": "the rust_ptx_py column",
        "a raw kernel symbol": "void at::native::elementwise_kernel<128, 2, x>",
        "a project target": "outside the 10% target",
        "nan in a table or sentence": "error nan",
        "e-notation": "took 1.52e+03 µs",
        "the build machine's state": "no GPU here",
        "a plural after one": "makes 1 launches per call",
        "the data folder": "data data/h200",
    }
    for kind, text in bad.items():
        assert kind in {k for k, _ in W.workshop(text)}, kind
    plain = ("The Rust compiler's own PTX target. Each input read once, which a kernel cannot avoid moving. "
             "An output filled with not-a-number markers took 2.72 µs at M=1024,K=1024,N=1024; torch.compile.")
    assert W.workshop(plain) == []


def test_reader_text_keeps_tables_and_drops_code_and_math():
    text = W.reader_text(PAGE)
    assert "1.52e+03" in text and "range(10)" not in text and "sum_k" not in text


def _sentences(text: str) -> int:
    return len([s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z(`])", text.strip()) if s])


def test_sentence_counter():
    assert _sentences("Triton took 2.7 µs, against 6.5 µs. The views disagree for 4 of 5. All passed.") == 3


# ---------------------------------------------------------------------------------- the built site
@pytest.fixture(scope="module")
def site() -> Path:
    with open(ROOT / ".book-build.lock", "w") as lock:  # pytest-xdist's workers: one builds, the others wait
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (HTML / (W.pages()[0] + ".html")).exists():
            subprocess.run(["make", "book"], cwd=ROOT, check=True)
    return HTML


def _page(site: Path, page: str) -> str:
    return (site / f"{page}.html").read_text(encoding="utf-8")


@pytest.mark.book
def test_length_limits(site):
    counts = W.counts(site)
    totals = W.totals(counts)
    assert totals["chapters"] <= W.LIMITS["chapters"], counts
    assert totals["book"] <= W.LIMITS["book"], counts


@pytest.mark.book
@pytest.mark.parametrize("page", W.pages())
def test_no_workshop_words(site, page):
    hits = W.workshop(W.reader_text(_page(site, page)))
    assert not hits, "\n".join(f"{k}: ...{ctx}..." for k, ctx in hits)


@pytest.mark.parametrize("text", ["3,000", "1.30", "(a)", "0.97", "NVIDIA H100 80GB HBM3", "it's"])
def test_glued_text_reaches_the_page_as_written(text):
    """The builder unquotes glued text with a literal evaluation: "3,000" once reached a page as (3, 0)."""
    from myst_nb.core.variables import format_plain_text
    from mage.book import Plain
    assert format_plain_text(repr(Plain(text)), "") == text


@pytest.mark.book
@pytest.mark.parametrize("page", W.pages())
def test_no_glued_value_reads_as_a_tuple(site, page):
    glued = BeautifulSoup(_page(site, page), "html.parser").select("span.pasted-text")
    assert not [g.text for g in glued if re.fullmatch(r"\(.*,.*\)", g.text)]


@pytest.mark.book
@pytest.mark.parametrize("page", CHAPTERS)
def test_each_page_opens_with_its_finding(site, page):
    """The first paragraph after the title states the finding, in at most three sentences (five on the
    opening page, where it stands before the main figure); it is prose, not a table or a figure."""
    art = BeautifulSoup(_page(site, page), "html.parser").select_one("article.bd-article")
    first = next(el for el in art.find_all(["p", "table", "div"]) if
                 el.name == "table" or el.name == "p" or "mage-figure" in (el.get("class") or []))
    assert first.name == "p", f"{page} opens with a {first.name}"
    limit = 5 if page == W.pages()[0] else 3
    assert _sentences(first.get_text(" ")) <= limit, first.get_text(" ")
    if page == W.pages()[0]:
        figure = art.select_one("div.mage-figure")
        assert figure is not None and first.sourceline < figure.sourceline
