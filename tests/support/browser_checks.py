"""What the book's browser test checks on one page (``tests/test_book.py`` drives the browser): the page's
problems as the browser reports them, its layout, figures, toggles, controls, explorers, math and content.
Each check asserts with the page and the window size in its message."""
from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urljoin, urlparse

ROOT = Path(__file__).resolve().parents[2]
SIZES = {"desktop": dict(width=1400, height=900), "phone": dict(width=390, height=844)}


def watch(page, problems):
    page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("request", lambda r: urlparse(r.url).hostname not in ("127.0.0.1", None)
            and not r.url.startswith(("data:", "blob:")) and problems.append(f"external request: {r.url}"))
    page.on("response", lambda r: r.status >= 400 and problems.append(f"HTTP {r.status}: {r.url}"))


DRAWN = """() => [...document.querySelectorAll('.mage-figure')].every(
  f => f.querySelector('.js-plotly-plot .main-svg') && f.querySelector('.js-plotly-plot')._fullLayout)"""

STATE = """f => { const gd = f.querySelector('.js-plotly-plot'); const L = gd._fullLayout;
  const axes = Object.keys(L).filter(k => /^[xy]axis\\d*$/.test(k)).map(k => k + ':' + L[k].type);
  return JSON.stringify([gd._fullData.map(t => [t.visible, JSON.stringify(t.marker && t.marker.color)]), axes,
                         f.querySelector('.mage-title').textContent]); }"""


def check_layout(page, path, size):
    w, h = SIZES[size]["width"], SIZES[size]["height"]
    over = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert over[0] <= over[1] + 1, f"{path} at {size}: the page is {over[0]} px wide in a {over[1]} px window"
    boxes = page.evaluate("""() => [...document.querySelectorAll('.mage-button, .mage-figure input, .mage-tiles input')]
        .map(e => { const r = e.getBoundingClientRect(); return [e.textContent || e.name || e.type, r.left, r.right]; })""")
    for name, left, right in boxes:
        assert left >= -1 and right <= w + 1, f"{path} at {size}: control {name!r} lies outside the screen"
    for height, width in page.evaluate("() => [...document.querySelectorAll('.mage-figure .js-plotly-plot')]"
                                       ".map(g => [g.getBoundingClientRect().height, g.getBoundingClientRect().width])"):
        assert width <= w, f"{path} at {size}: a figure is {width} px wide"
        if size == "phone":
            assert height <= h, f"{path} at {size}: a figure is {height} px tall on a {h} px screen"


def check_controls(page, path, size):
    figs = page.locator(".mage-figure")
    for i in range(figs.count()):
        fig = figs.nth(i)
        for g in range(fig.locator(".mage-buttons").count()):
            buttons = fig.locator(".mage-buttons").nth(g).locator("button")
            order = list(range(1, buttons.count())) + [0]
            for b in order if buttons.count() > 1 else []:
                before = fig.evaluate(STATE)
                buttons.nth(b).click()
                page.wait_for_timeout(120)
                assert buttons.nth(b).get_attribute("aria-pressed") == "true", f"{path} {size}: figure {i} button {b}"
                assert fig.evaluate(STATE) != before, \
                    f"{path} at {size}: figure {i} button {buttons.nth(b).inner_text()!r} changed nothing"
        for s in range(fig.locator("input[type=range]").count()):
            rng = fig.locator("input[type=range]").nth(s)
            before = fig.evaluate(STATE)
            rng.focus()
            page.keyboard.press("End")
            page.wait_for_timeout(200)
            assert fig.evaluate(STATE) != before, f"{path} at {size}: figure {i} slider changed nothing"
    tiles = page.locator(".mage-tiles")
    for i in range(tiles.count()):
        out = tiles.nth(i).locator(".mage-tiles-out")
        assert "recorded" in out.inner_text().lower()
        ranges = tiles.nth(i).locator("input[type=range]")
        moved = 0
        for s in range(ranges.count()):
            rng = ranges.nth(s)
            if rng.get_attribute("max") == "0":
                continue
            before = out.inner_text()
            rng.focus()
            page.keyboard.press("End" if rng.input_value() == "0" else "Home")
            assert out.inner_text() != before, f"{path} at {size}: tile slider {rng.get_attribute('name')} " \
                                               "changed nothing"
            moved += 1
        assert moved, f"{path}: a tile explorer with no slider to move"


# Every text box a figure draws (tick labels, titles, legend entries, bar labels, annotations), as
# [text, left, top, right, bottom]; text made invisible (the title the page shows as HTML) is left out.
TEXTS = """f => [...f.querySelectorAll('.js-plotly-plot svg text')].filter(t => {
    if (!t.textContent.trim()) return false;
    for (let e = t; e && e instanceof SVGElement; e = e.parentElement) {
      const s = getComputedStyle(e);
      if (s.display === 'none' || s.visibility === 'hidden' || parseFloat(s.opacity) === 0) return false;
    }
    const s = getComputedStyle(t);
    if (parseFloat(s.fontSize) <= 2 || /rgba\\(.*,\\s*0\\)/.test(s.fill)) return false;
    const r = t.getBoundingClientRect();
    return r.width >= 1 && r.height >= 1;
  }).map(t => { const r = t.getBoundingClientRect();
                return [t.textContent.trim().slice(0, 40), r.left, r.top, r.right, r.bottom]; })"""

TOOLBAR = """f => [...f.querySelectorAll('.modebar')].map(m => m.getBoundingClientRect())
    .filter(r => r.width > 0 && r.height > 0).map(r => [r.left, r.top, r.right, r.bottom])"""

SLACK = 1.5  # px: text boxes that touch are not overprinted


def _overlap(a, b) -> bool:
    return min(a[2], b[2]) - max(a[0], b[0]) > SLACK and min(a[3], b[3]) - max(a[1], b[1]) > SLACK


def check_figures(page, path, size, when):
    """No two text boxes of a figure overlap, and plotly's toolbar covers none (hidden on a phone)."""
    figs = page.locator(".mage-figure")
    for i in range(figs.count()):
        texts = figs.nth(i).evaluate(TEXTS)
        hits = [(a[0], b[0]) for n, a in enumerate(texts) for b in texts[n + 1:] if _overlap(a[1:], b[1:])]
        assert not hits, f"{path} at {size} ({when}): figure {i} overprints {hits[:4]}"
        bars = figs.nth(i).evaluate(TOOLBAR)
        if size == "phone":
            assert not bars, f"{path} at {size}: figure {i} shows plotly's toolbar on a phone"
        covered = [t[0] for t in texts for r in bars if _overlap(t[1:], r)]
        assert not covered, f"{path} at {size}: figure {i}'s toolbar covers {covered[:4]}"


# A figure that draws the card's views per implementation says so (meta.per_impl); it must offer the toggle.
TOGGLED = """f => { const spec = JSON.parse(f.querySelector('script.mage-figure-json').textContent);
    const per = !!((spec.layout || {}).meta || {}).per_impl;
    const labels = [...f.querySelectorAll('.mage-buttons button')].map(b => b.textContent);
    return [per, labels.includes('GPU kernel time') && labels.includes('event span')]; }"""


# The figure functions that draw the card's views per implementation, as a page's source calls them: the
# page must show at least that many toggled figures (a figure that lost its marker is still counted).
PER_IMPL_CALLS = ("F.main(", "F.op_views(", "F.cards(")


def check_toggles(page, path):
    found = [page.locator(".mage-figure").nth(i).evaluate(TOGGLED) for i in range(page.locator(".mage-figure").count())]
    missing = [i for i, (per, toggled) in enumerate(found) if per and not toggled]
    assert not missing, f"{path}: per-implementation figure(s) {missing} without the card's toggle"
    src = ROOT / path.replace(".html", ".md")
    calls = sum(src.read_text().count(c) for c in PER_IMPL_CALLS) if src.is_file() else 0
    toggled = sum(1 for per, t in found if per and t)
    assert toggled >= calls, f"{path}: {calls} per-implementation figure(s) in the source, {toggled} with the toggle"
    return sum(1 for per, _ in found if per), toggled


def check_explorers(page, path, size):
    """Every position of every slider of every explorer shows a measurement: the static tile explorers
    (a recorded config at each step) and plotly's sliders (a readout line under the slider at each step)."""
    tiles = page.locator(".mage-tiles")
    for i in range(tiles.count()):
        out = tiles.nth(i).locator(".mage-tiles-out")
        ranges = tiles.nth(i).locator("input[type=range]")
        for s in range(ranges.count()):
            rng = ranges.nth(s)
            rng.focus()
            page.keyboard.press("Home")
            for step in range(int(rng.get_attribute("max")) + 1):
                if step:
                    page.keyboard.press("ArrowRight")
                text = out.inner_text()
                assert "Recorded on" in text and "not in the recorded" not in text, \
                    f"{path} at {size}: explorer {i} slider {rng.get_attribute('name')} position {step}: {text[:120]}"
            page.keyboard.press("Home")
    figs = page.locator(".mage-figure")
    for i in range(figs.count()):
        for s in range(figs.nth(i).locator("input[type=range]").count()):
            rng = figs.nth(i).locator("input[type=range]").nth(s)
            readout = figs.nth(i).locator(".mage-readout").nth(s)
            rng.focus()
            page.keyboard.press("Home")
            for step in range(int(rng.get_attribute("max")) + 1):
                if step:
                    page.keyboard.press("ArrowRight")
                assert readout.inner_text().strip(), f"{path} at {size}: figure {i} slider position {step}: no readout"
            page.keyboard.press("Home")  # back where the reader found it


def check_math(page, path, size):
    """Display equations fit the column or scroll sideways inside themselves, and none is cut off at the
    top or bottom."""
    if not page.locator('mjx-container[display="true"]').count():
        return
    page.wait_for_timeout(300)  # (the loader scales wide equations once MathJax has typeset them)
    bad = page.evaluate("""() => [...document.querySelectorAll('mjx-container[display="true"]')].filter(m => {
        const s = getComputedStyle(m);
        const wide = m.scrollWidth > m.clientWidth + 1 && !/auto|scroll/.test(s.overflowX);
        const cut = m.scrollHeight > m.clientHeight + 1 && !/auto|scroll|visible/.test(s.overflowY);
        return wide || cut; }).map(m => m.textContent.slice(0, 40))""")
    assert not bad, f"{path} at {size}: equations cut off: {bad[:3]}"


def check_content(page, path, size, site):
    figs = page.locator(".mage-figure")
    tables = page.evaluate("""() => [...document.querySelectorAll('.mage-figure')].map(f => {
        let e = f.nextElementSibling; while (e && !e.matches('details.mage-values') && !e.matches('.mage-figure'))
          e = e.nextElementSibling;
        return e && e.matches('details.mage-values') ? e.querySelectorAll('tbody tr').length : 0; })""")
    assert len(tables) == figs.count() and all(n > 0 for n in tables), \
        f"{path}: a figure without its table of plotted values ({tables})"
    # a table a page computes is a table, not lines of '|' text (the Markdown it displays is parsed as MyST)
    raw = page.evaluate("""() => [...document.querySelectorAll('article p')].map(p => p.innerText)
        .filter(t => /\\|\\s*(---|\u2014)\\s*\\|/.test(t)).length""")  # (--- typeset as an em dash)
    assert raw == 0, f"{path}: {raw} table(s) shown as raw Markdown"
    # and its columns are readable: no cell narrower than its longest word (a word broken across lines;
    # cells that could break anywhere once stacked their words a letter a line)
    narrow = page.evaluate("""() => { const ctx = document.createElement('canvas').getContext('2d');
        return [...document.querySelectorAll('.bd-article table th, .bd-article table td')].filter(c => {
          const s = getComputedStyle(c);
          let longest = 0;  // each text's words in its own font (code is monospace), split where lines may break
          const walk = document.createTreeWalker(c, NodeFilter.SHOW_TEXT);
          for (let t = walk.nextNode(); t; t = walk.nextNode()) {
            ctx.font = getComputedStyle(t.parentElement).font;
            for (const w of t.textContent.split(/[\\s\\-]+/).filter(w => w))
              longest = Math.max(longest, ctx.measureText(w).width);
          }
          if (!longest) return false;
          const inner = c.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight);
          return inner + 1 < longest && longest < 300;  // (a symbol longer than a phone may wrap)
        }).map(c => c.innerText.trim().slice(0, 20)); }""")
    assert not narrow, f"{path} at {size}: table cells narrower than their longest word: {narrow[:5]}"
    if page.locator(".math, script[type='math/tex']").count():
        page.wait_for_selector("mjx-container", timeout=20000)
    if page.locator("div.cell").count():  # a page with code is a notebook: it offers itself for download
        nb = page.locator("a[href$='.ipynb']")
        assert nb.count() >= 1, f"{path}: no notebook download"
        href = nb.first.get_attribute("href")
        url = urlparse(page.url)._replace(path=str(Path(urlparse(page.url).path).parent / href)).geturl()
        r = page.request.get(url)
        assert r.ok and json.loads(r.body())["cells"], f"{path}: the notebook download {href} is not a notebook"
    # The source: the packed archive (served here, so it must resolve) or a configured public repository.
    src = page.locator("a.btn-mage-source")
    assert src.count() >= 1, f"{path}: no link to the source"
    href = src.first.get_attribute("href")
    if "://" not in href:
        r = page.request.get(urljoin(page.url, href))
        assert r.ok and r.body()[:2] == b"\x1f\x8b", f"{path}: the source link {href} does not give the archive"
