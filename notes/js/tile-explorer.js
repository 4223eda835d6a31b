// The tile explorer in a page without a kernel (inlined by mage.book.figure_tiles.tile_explorer_html, once per
// explorer): one slider per tile parameter; each move looks up the chosen combination in the table the
// page carries (the reuse count from the operation's spec, and the recorded measurement when the sweep
// ran that combination) and writes it out. No kernel runs here.
(function (root) {
  "use strict";
  var spec = JSON.parse(root.querySelector("script.mage-tiles-json").textContent);
  var out = root.querySelector(".mage-tiles-out");
  var current = Object.assign({}, spec.start);

  function fmt(v) {
    v = Number(v);
    if (Math.abs(v) >= 1000) return Math.round(v).toLocaleString("en");
    var s = v.toPrecision(3);
    return s.indexOf(".") >= 0 ? s.replace(/0+$/, "").replace(/\.$/, "") : s;
  }

  function render() {
    var key = spec.keys.map(function (k) { return current[k]; }).join("|");
    var hit = spec.combos[key] || {};
    var cfg = spec.keys.map(function (k) { return k + "=" + current[k]; }).join(", ");
    var lines = ["<b>" + spec.label + "</b> at " + spec.shape + ", config <code>" + cfg + "</code>"];
    var r = hit.reuse;
    if (r) {
      lines.push("Per K step one program loads " + r.loads.toLocaleString("en") + " values for " +
                 r.fmas.toLocaleString("en") + " multiply-adds: <b>" + fmt(r.fmas_per_load) +
                 "</b> multiply-adds per loaded value.");
    }
    var rec = hit.rec;
    if (rec) {
      lines.push("<b>Recorded</b> on " + spec.machine + ": kernel " + fmt(rec.kernel_us) + " µs, span " +
                 fmt(rec.span_us) + " µs, " + Math.round(rec.gbps) + " GB/s.");
    } else {
      lines.push("This combination is not in the recorded sweep (move another slider).");
    }
    lines.push("<i>Recorded measurements, looked up in the page: " + spec.why + ".</i>");
    out.innerHTML = lines.join("<br>");
    root.dataset.config = key;
  }

  spec.keys.forEach(function (k) {
    var opts = spec.options[k];
    var label = document.createElement("label");
    var name = document.createElement("span");
    var input = document.createElement("input");
    input.type = "range";
    input.min = 0;
    input.max = opts.length - 1;
    input.step = 1;
    input.value = Math.max(0, opts.indexOf(current[k]));
    input.name = k;
    input.setAttribute("aria-label", k);
    function setName() { name.textContent = k + " = " + current[k]; }
    input.addEventListener("input", function () {
      current[k] = opts[Number(input.value)];
      setName();
      render();
    });
    setName();
    label.appendChild(name);
    label.appendChild(input);
    root.insertBefore(label, out);
  });
  render();
})(document.currentScript.parentElement);
