"""The built book in a real browser (Debian's chromium driven by playwright), at a desktop size (1400x900)
and a phone size (390x844). For every page, at both sizes:
- it loads from a local server with no console error, no page error, no response of 400 or more and no
  request leaving the machine (the browser resolves no other host);
- every figure draws; every figure button changes what is plotted and shows itself pressed; every
  figure slider and every tile-explorer slider changes what the page says;
- the page never scrolls sideways, every control lies inside the screen, and on the phone every figure
  fits the screen's height;
- every figure has its table of plotted values, math renders, the page offers its notebook (.ipynb, which
  the server has) and links the source (the packed archive resolves);
- no two text boxes of a figure overlap (before and after its controls are used), plotly's toolbar
  covers no text (on a phone it is hidden), every figure that shows the card's views per implementation
  has the toggle between them, and every position of every explorer slider shows a measurement;
- a screenshot of the top of the page is saved under _build/html/_screens/ (plus the main figure), and
  each figure's own screenshot under _screens/figures/.
And the weight: each page's HTML at most 1.5 MB, the first page's whole first load at most 8 MB, and each
further page at most 1.5 MB of new transfer, counted by the server with the browser's cache on.
Builds the book first when _build/html is missing.
"""
from __future__ import annotations

import fcntl
import functools
import http.server
import json
import shutil
import subprocess
import threading
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
import yaml
from tests.support.browser_checks import (DRAWN, SIZES, check_content, check_controls, check_explorers,
                                          check_figures, check_layout, check_math, check_toggles, watch)

pytestmark = pytest.mark.book

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
SCREENS = HTML / "_screens"
MB = 1_000_000
LIMITS = dict(page_html=1.5 * MB, first_load=8 * MB, next_page=1.5 * MB)


def _pages() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [c["file"] for c in part.get("chapters", [])]
        files += [s["file"] for c in part.get("chapters", []) for s in c.get("sections", [])]
    return [f + ".html" for f in files]


PAGES = _pages()


class _Counting(http.server.SimpleHTTPRequestHandler):
    """Serves the book like a static host (files cached for ten minutes) and counts the body bytes sent."""
    sent: list = []
    lock = threading.Lock()

    def end_headers(self):
        self.send_header("Cache-Control", "max-age=600")
        super().end_headers()

    def copyfile(self, source, outputfile):
        n = 0
        while chunk := source.read(64 * 1024):
            outputfile.write(chunk)
            n += len(chunk)
        with self.lock:
            self.sent.append((unquote(urlparse(self.path).path), n))

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site():
    with open(ROOT / ".book-build.lock", "w") as lock:  # pytest-xdist's workers: one builds, the others wait
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (HTML / PAGES[0]).exists():
            subprocess.run(["make", "book"], cwd=ROOT, check=True)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Counting, directory=str(HTML)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    SCREENS.mkdir(exist_ok=True)
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    exe = shutil.which("chromium")
    if not exe:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        # No other host resolves: a request that would leave the machine fails, and is reported below.
        b = p.chromium.launch(executable_path=exe, args=[
            "--no-sandbox", "--disable-gpu", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"])
        yield b
        b.close()



@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("path", PAGES)
def test_page(site, browser, path, size):
    ctx = browser.new_context(viewport=SIZES[size])
    page = ctx.new_page()
    problems = []
    watch(page, problems)
    assert (HTML / path).is_file(), f"{path} is in _toc.yml but was not built (make book)"
    page.goto(site + path, wait_until="load")
    page.wait_for_function(DRAWN, timeout=60000)
    page.wait_for_timeout(300)
    check_layout(page, path, size)
    stem = path.replace("/", "_").removesuffix(".html")
    page.screenshot(path=str(SCREENS / f"{size}-{stem}.png"))
    if path == PAGES[0]:  # the main figure as the reader first sees it, before any control is used
        assert page.locator(".mage-figure").count() >= 1, f"{path}: the opening page has no figure"
        page.locator(".mage-figure").first.screenshot(path=str(SCREENS / f"{size}-main.png"))
    figs = page.locator(".mage-figure")
    (SCREENS / "figures").mkdir(exist_ok=True)
    for i in range(figs.count()):
        figs.nth(i).screenshot(path=str(SCREENS / "figures" / f"{size}-{stem}-{i}.png"))
    for i in range(page.locator(".mage-tiles").count()):
        page.locator(".mage-tiles").nth(i).screenshot(path=str(SCREENS / "figures" / f"{size}-{stem}-explorer-{i}.png"))
    check_figures(page, path, size, "as drawn")
    per_impl, toggled = check_toggles(page, path)
    (SCREENS / f"toggles-{size}-{stem}.json").write_text(json.dumps(dict(figures=figs.count(), per_impl=per_impl,
                                                                         toggled=toggled)))
    check_content(page, path, size, site)
    check_math(page, path, size)
    check_explorers(page, path, size)
    check_controls(page, path, size)
    check_figures(page, path, size, "after its controls")
    check_layout(page, path, size)  # the controls did not widen the page either
    page.wait_for_timeout(200)
    assert not problems, f"{path} at {size}: " + "; ".join(problems[:6])
    ctx.close()


def test_weights(site, browser):
    """Per-page HTML, the first page's whole first load and each further page's new transfer, with the
    browser's cache on (one browsing session, pages in reading order)."""
    too_big = {p: (HTML / p).stat().st_size for p in PAGES
               if (HTML / p).is_file() and (HTML / p).stat().st_size > LIMITS["page_html"]}
    assert not too_big, f"pages over {LIMITS['page_html'] / MB} MB of HTML: {too_big}"
    ctx = browser.new_context(viewport=SIZES["desktop"])
    page = ctx.new_page()
    problems = []
    watch(page, problems)
    rows = []
    for n, path in enumerate(PAGES):
        assert (HTML / path).is_file(), f"{path} is in _toc.yml but was not built (make book)"
        with _Counting.lock:
            _Counting.sent.clear()
        page.goto(site + path, wait_until="load")
        page.wait_for_function(DRAWN, timeout=60000)
        page.wait_for_load_state("networkidle")
        with _Counting.lock:
            sent = sum(b for _, b in _Counting.sent)
        rows.append(dict(page=path, html=(HTML / path).stat().st_size, transfer=sent))
        print(f"{path:<24} HTML {rows[-1]['html'] / MB:5.2f} MB  transferred {sent / MB:5.2f} MB")
        limit = LIMITS["first_load"] if n == 0 else LIMITS["next_page"]
        assert sent <= limit, f"{path}: {sent / MB:.2f} MB transferred ({'first' if n == 0 else 'next'} page, " \
                              f"limit {limit / MB} MB)"
    (SCREENS / "weights.json").write_text(json.dumps(rows, indent=1))
    assert not problems, "; ".join(problems[:6])
    ctx.close()


def test_screenshots_saved(site, browser):
    for size in SIZES:
        shot = SCREENS / f"{size}-main.png"
        if not shot.exists():
            test_page(site, browser, PAGES[0], size)
        assert shot.stat().st_size > 10_000
