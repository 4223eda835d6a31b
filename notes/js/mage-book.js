// The book's figure loader (every page; see _config.yml). Figures arrive as plotly JSON inside
// <div class="mage-figure">; this file loads the site's single plotly.js (cached across pages, instead of
// a 4.8 MB copy inlined into each page) and draws them. Plotly's own buttons and sliders are redrawn as
// HTML controls above the plot: they wrap on a phone, where plotly's row of buttons runs off screen.
// On a narrow screen a figure also takes the layout overrides its Python side put in meta.narrow and a
// height that fits the screen. Titles are shown as HTML text so they wrap.
(function () {
  "use strict";
  var here = document.currentScript ? document.currentScript.src : "";
  var base = here.slice(0, here.lastIndexOf("/") + 1);
  var NARROW = 700;
  var TOOLBAR = 30;  // px: the height of plotly's toolbar, kept free of text above a desktop plot

  function loadPlotly(done) {
    if (window.Plotly) return done();
    var s = document.createElement("script");
    // plotly.js registers itself as an AMD module when require.js is on the page (widget pages), and
    // require.js then refuses the anonymous module: hide define while plotly.js runs.
    var define = window.define;
    window.define = undefined;
    s.src = base + "plotly.min.js";
    s.onload = function () { window.define = define; done(); };
    s.onerror = function () { window.define = define; console.error("mage: plotly.js did not load"); };
    document.head.appendChild(s);
  }

  function setPath(obj, path, value) {
    var keys = path.split(".");
    for (var i = 0; i < keys.length - 1; i++) {
      if (typeof obj[keys[i]] !== "object" || obj[keys[i]] === null) obj[keys[i]] = {};
      obj = obj[keys[i]];
    }
    obj[keys[keys.length - 1]] = value;
  }

  function titleText(layout) {
    var t = layout.title;
    return t && typeof t === "object" ? t.text || "" : t || "";
  }

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function plainText(s) {
    var d = document.createElement("div");
    d.innerHTML = String(s).replace(/<br\s*\/?>/gi, " ");
    return d.textContent;
  }

  function apply(gd, method, args) {
    args = args || [];
    if (method === "update") return Plotly.update(gd, args[0] || {}, args[1] || {}, args[2]);
    if (method === "relayout") return Plotly.relayout(gd, args[0] || {});
    if (method === "restyle") return Plotly.restyle(gd, args[0] || {}, args[1]);
    return Promise.resolve();
  }

  function draw(box) {
    var spec = JSON.parse(box.querySelector("script.mage-figure-json").textContent);
    var plot = box.querySelector(".mage-plot");
    var layout = spec.layout || {};
    var meta = layout.meta || {};
    var narrow = box.clientWidth < NARROW;
    var menus = layout.updatemenus || [];
    var sliders = layout.sliders || [];
    delete layout.updatemenus;
    delete layout.sliders;
    if (narrow) {
      Object.keys(meta.narrow || {}).forEach(function (k) { setPath(layout, k, meta.narrow[k]); });
      layout.height = Math.min(layout.height || 450, meta.narrow_height || 560, window.innerHeight - 40);
      setPath(layout, "font.size", 10);
      if (meta.narrow_font) (layout.annotations || []).forEach(function (a) { setPath(a, "font.size", meta.narrow_font); });
    }
    // The title lives in the page (it wraps); plotly keeps it only as state that controls update.
    var title = el("p", "mage-title", plainText(titleText(layout)));
    setPath(layout, "title.font.color", "rgba(0,0,0,0)");
    setPath(layout, "title.font.size", 1);
    // Plotly's toolbar sits in the top right corner of the plot. On a phone or a touch screen it is
    // hidden (it covered legends and titles there); on a desk it gets a band of its own above the plot.
    var touch = window.matchMedia && window.matchMedia("(pointer: coarse)").matches;
    var toolbar = !(narrow || touch);
    setPath(layout, "margin.t", narrow ? (meta.narrow_top || 30) : (meta.top || 40) + (toolbar ? TOOLBAR : 0));
    if (sliders.length) setPath(layout, "margin.b", meta.bottom || 60);  // plotly's slider is drawn as HTML
    layout.autosize = true;
    delete layout.width;
    box.insertBefore(title, plot);
    var controls = el("div", "mage-controls");
    box.insertBefore(controls, plot);

    menus.forEach(function (menu, m) {
      var group = el("div", "mage-buttons");
      group.setAttribute("role", "group");
      group.dataset.menu = m;
      (menu.buttons || []).forEach(function (b, i) {
        var btn = el("button", "mage-button", b.label);
        btn.type = "button";
        btn.setAttribute("aria-pressed", String(i === (menu.active || 0)));
        btn.addEventListener("click", function () {
          apply(plot, b.method, b.args).then(function () {
            group.querySelectorAll("button").forEach(function (o) { o.setAttribute("aria-pressed", String(o === btn)); });
            group.dataset.active = i;
            title.textContent = plainText(titleText(plot.layout));
          });
        });
        group.appendChild(btn);
      });
      group.dataset.active = menu.active || 0;
      controls.appendChild(group);
    });

    sliders.forEach(function (slider, s) {
      var steps = slider.steps || [];
      var wrap = el("label", "mage-slider");
      var prefix = (slider.currentvalue && slider.currentvalue.prefix) || "";
      var value = el("span", "mage-slider-value");
      var input = el("input");
      input.type = "range";
      input.min = 0;
      input.max = Math.max(0, steps.length - 1);
      input.step = 1;
      input.value = slider.active || 0;
      input.dataset.slider = s;
      var readout = el("p", "mage-readout");
      readout.setAttribute("aria-live", "polite");
      function show(i) {
        value.textContent = prefix + (steps[i] ? steps[i].label : "");
        var r = (meta.readout || [])[i];
        readout.innerHTML = r || "";
      }
      input.addEventListener("input", function () {
        var i = Number(input.value);
        show(i);
        var st = steps[i];
        if (st) apply(plot, st.method, st.args).then(function () { title.textContent = plainText(titleText(plot.layout)); });
      });
      wrap.appendChild(value);
      wrap.appendChild(input);
      controls.appendChild(wrap);
      controls.appendChild(readout);
      show(Number(input.value));
    });

    var config = { responsive: true, displaylogo: false, displayModeBar: toolbar ? "hover" : false,
                   modeBarButtonsToRemove: ["lasso2d", "select2d"] };
    return Plotly.newPlot(plot, spec.data || [], layout, config);
  }

  function start() {
    var boxes = Array.prototype.slice.call(document.querySelectorAll(".mage-figure"));
    if (!boxes.length) return;
    loadPlotly(function () {
      boxes.forEach(function (box) {
        try { draw(box); } catch (e) { console.error("mage: a figure failed to draw", e); }
      });
    });
  }

  // Display math wider than the column is scaled down to fit, to 70% at least; anything wider still
  // scrolls inside itself (mage-book.css) rather than being cut off.
  function fitMath() {
    document.querySelectorAll('mjx-container[display="true"]').forEach(function (m) {
      m.style.fontSize = "";
      var ratio = m.clientWidth / m.scrollWidth;
      if (ratio < 1) m.style.fontSize = Math.max(0.7, Math.floor(ratio * 100) / 100) * 100 + "%";
    });
  }
  window.addEventListener("load", function () {
    var mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise) mj.startup.promise.then(fitMath);
  });
  window.addEventListener("resize", fitMath);

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
