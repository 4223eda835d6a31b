"""The built book in a real browser (Debian's chromium driven by playwright): every page loads offline,
every plotly figure renders, view buttons and the tile slider change what is plotted, widgets and math
render, and no page logs a console error. Builds the book first when _build/html is missing.
"""
from __future__ import annotations

import functools
import http.server
import shutil
import subprocess
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

pytestmark = pytest.mark.book

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
# Every Jupyter Book 1 page logs this (the theme and sphinx-thebe both declare it); harmless.
KNOWN = ("Identifier 'THEBE_JS_URL' has already been declared",)


def _pages() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [c["file"] for c in part.get("chapters", [])]
    return [f + ".html" for f in files]


PAGES = _pages()


@pytest.fixture(scope="module")
def site():
    if not (HTML / PAGES[0]).exists():
        subprocess.run(["make", "book"], cwd=ROOT, check=True)
    handler = functools.partial(_Quiet, directory=str(HTML))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def browser():
    exe = shutil.which("chromium")
    if not exe:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


def _open(browser, url):
    """A page with console errors, page errors and any request leaving 127.0.0.1 recorded (and refused)."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    problems = []
    page.on("console", lambda m: m.type == "error" and not any(k in m.text for k in KNOWN)
            and problems.append(f"console: {m.text}"))
    page.on("pageerror", lambda e: not any(k in str(e) for k in KNOWN) and problems.append(f"page error: {e}"))

    def route(r):
        host = urlparse(r.request.url).hostname
        if r.request.url.startswith("data:") or host in ("127.0.0.1", None):
            return r.continue_()
        problems.append(f"external request: {r.request.url}")
        return r.abort()

    page.route("**/*", route)
    page.on("response", lambda r: r.status >= 400 and problems.append(f"HTTP {r.status}: {r.url}"))
    page.goto(url, wait_until="load")
    return page, problems


RENDERED = """() => {
  const gds = [...document.querySelectorAll('.js-plotly-plot')];
  return gds.length > 0 && gds.every(gd => gd._fullLayout && gd.querySelector('.main-svg'));
}"""


def _figures(page):
    page.wait_for_function(RENDERED, timeout=30000)
    return page.locator(".js-plotly-plot")


def _visible(page, i):
    return page.evaluate("i => [...document.querySelectorAll('.js-plotly-plot')][i]._fullData"
                         ".map(t => t.visible === true || t.visible === undefined)", i)


@pytest.mark.parametrize("path", PAGES)
def test_page(site, browser, path):
    page, problems = _open(browser, site + path)
    figs = _figures(page)
    n = figs.count()
    assert n >= 1, f"{path}: no plotly figure"
    if path == PAGES[0]:  # the main figure as the reader first sees it, before any button is clicked
        (HTML / "_screens").mkdir(exist_ok=True)
        figs.first.scroll_into_view_if_needed()
        figs.first.screenshot(path=str(HTML / "_screens" / "main.png"))
    for i in range(n):
        traces = page.evaluate("i => { const gd = [...document.querySelectorAll('.js-plotly-plot')][i];"
                               " return [gd.data.length, gd.querySelectorAll('.trace').length]; }", i)
        assert traces[0] > 0 and traces[1] > 0, f"{path}: figure {i} has no drawn traces ({traces})"
        buttons = figs.nth(i).locator("g.updatemenu-button")
        for b in range(buttons.count()):
            before = _visible(page, i)
            buttons.nth(b).click()
            page.wait_for_timeout(150)
            active = page.evaluate("i => [...document.querySelectorAll('.js-plotly-plot')][i]"
                                   ".layout.updatemenus[0].active", i)
            assert active == b, f"{path}: figure {i} button {b} did not become active ({active})"
            if b > 0:
                assert _visible(page, i) != before, f"{path}: figure {i} button {b} changed no trace"
        rail = figs.nth(i).locator(".slider-rail-rect")
        if rail.count():
            _move_slider(page, i, rail.first, path)
    if page.locator("script[type='math/tex'], .math").count():
        page.wait_for_selector("mjx-container", timeout=15000)
    page.wait_for_timeout(300)
    assert not problems, f"{path}: " + "; ".join(problems[:5])
    page.close()


def _move_slider(page, i, rail, path):
    get = ("i => { const gd = [...document.querySelectorAll('.js-plotly-plot')][i];"
           " return [gd.layout.sliders[0].active, JSON.stringify(gd._fullData[0].marker.color)]; }")
    before = page.evaluate(get, i)
    rail.scroll_into_view_if_needed()
    box = rail.bounding_box()
    page.mouse.click(box["x"] + box["width"] * 0.8, box["y"] + box["height"] / 2)
    page.wait_for_timeout(300)
    after = page.evaluate(get, i)
    assert after[0] != before[0], f"{path}: figure {i} slider did not move ({before[0]} -> {after[0]})"
    assert after[1] != before[1], f"{path}: figure {i} slider moved but the highlighted config did not change"


def test_widgets_render(site, browser):
    """The static tile widget (saved ipywidgets state) renders through the book's own widget manager."""
    path = next(p for p in PAGES if p.endswith("matmul.html"))
    if "application/vnd.jupyter.widget-state+json" not in (HTML / path).read_text():
        pytest.skip("the data this book was built from records no tile sweep, so the page has no widget")
    page, problems = _open(browser, site + path)
    page.wait_for_selector(".widget-slider", timeout=30000)
    assert page.locator(".widget-slider").count() >= 3
    assert "recorded" in page.locator(".widget-html-content").first.inner_text().lower()
    assert not problems, "; ".join(problems[:5])
    page.close()


def test_screenshot_saved(site, browser):
    shot = HTML / "_screens" / "main.png"
    if not shot.exists():
        test_page(site, browser, PAGES[0])
    assert shot.stat().st_size > 10_000
