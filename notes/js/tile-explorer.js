// The tile explorer in a page without a kernel (inlined by mage.book.figure_tiles.tile_explorer_html, once per
// explorer): one slider per tile parameter the sweep varied, stepping only through values a recorded
// config has. Moving one slider picks the recorded config nearest to the current one that has the chosen
// value (the other sliders follow, and the readout says which moved), so every position is a measurement.
// The readout shows the reuse count (from the operation's reuse facet) and the recorded times. No kernel runs.
(function (root) {
  "use strict";
  var spec = JSON.parse(root.querySelector("script.mage-tiles-json").textContent);
  var out = root.querySelector(".mage-tiles-out");
  var current = Object.assign({}, spec.start);
  var recorded = Object.keys(spec.combos).map(function (key) {
    var values = key.split("|").map(Number);
    var c = {};
    spec.keys.forEach(function (k, i) { c[k] = values[i]; });
    return c;
  });
  var inputs = {};
  var moved = [];

  function fmt(v) {
    v = Number(v);
    if (Math.abs(v) >= 1000) return Math.round(v).toLocaleString("en");
    var s = v.toPrecision(3);
    return s.indexOf(".") >= 0 ? s.replace(/0+$/, "").replace(/\.$/, "") : s;
  }

  function keyOf(c) { return spec.keys.map(function (k) { return c[k]; }).join("|"); }

  // The recorded config with k = value that changes the fewest other parameters, then the smallest steps.
  function nearest(k, value) {
    var best = null, bestCost = Infinity;
    recorded.forEach(function (c) {
      if (c[k] !== value) return;
      var changed = 0, steps = 0;
      spec.keys.forEach(function (o) {
        if (o === k || c[o] === current[o]) return;
        changed += 1;
        steps += Math.abs(spec.options[o].indexOf(c[o]) - spec.options[o].indexOf(current[o]));
      });
      var cost = changed * 1000 + steps;
      if (cost < bestCost) { best = c; bestCost = cost; }
    });
    return best;
  }

  function render() {
    var hit = spec.combos[keyOf(current)] || {};
    var cfg = spec.keys.map(function (k) { return k + "=" + current[k]; }).join(", ");
    var lines = [spec.label + " at " + spec.shape + ", config <code>" + cfg + "</code>"];
    if (moved.length) lines.push("To reach a recorded config, " + moved.join(" and ") + ".");
    var rec = hit.rec;
    if (rec) {
      lines.push("Recorded on " + spec.machine + ": kernel " + fmt(rec.kernel_us) + " µs, span " +
                 fmt(rec.span_us) + " µs, " + Math.round(rec.gbps).toLocaleString("en") + " GB/s.");
    }
    var r = hit.reuse;
    if (r) {
      lines.push("Per K step one program loads " + r.loads.toLocaleString("en") + " values for " +
                 r.fmas.toLocaleString("en") + " multiply-adds: " + fmt(r.fmas_per_load) +
                 " multiply-adds per loaded value.");
    }
    lines.push("<i>" + recorded.length + " configs recorded; the sliders step only through them. The numbers " +
               "are looked up in the page: no kernel runs here.</i>");
    out.innerHTML = lines.join("<br>");
    root.dataset.config = keyOf(current);
  }

  function sync() {
    spec.keys.forEach(function (k) {
      var e = inputs[k];
      if (!e) return;
      e.input.value = spec.options[k].indexOf(current[k]);
      e.name.textContent = k + " = " + current[k];
    });
  }

  spec.keys.forEach(function (k) {
    var opts = spec.options[k];
    var label = document.createElement("label");
    var name = document.createElement("span");
    if (opts.length < 2) {  // a parameter the sweep never varied is a fact, not a control
      name.textContent = k + " = " + opts[0] + " (the only value recorded)";
      label.appendChild(name);
      root.insertBefore(label, out);
      return;
    }
    var input = document.createElement("input");
    input.type = "range";
    input.min = 0;
    input.max = opts.length - 1;
    input.step = 1;
    input.name = k;
    input.setAttribute("aria-label", k);
    input.addEventListener("input", function () {
      var c = nearest(k, opts[Number(input.value)]);
      if (!c) return;
      moved = spec.keys.filter(function (o) { return o !== k && c[o] !== current[o]; })
        .map(function (o) { return o + " moved from " + current[o] + " to " + c[o]; });
      current = Object.assign({}, c);
      sync();
      render();
    });
    inputs[k] = { input: input, name: name };
    label.appendChild(name);
    label.appendChild(input);
    root.insertBefore(label, out);
  });
  sync();
  render();
})(document.currentScript.parentElement);
