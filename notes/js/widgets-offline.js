// Loaded just before the widget manager on pages with widgets (see _config.yml, nb_ipywidgets_js).
// 1. The manager finds its icon fonts relative to its require.js module id; map that id into the book.
// 2. Widget labels are typeset through the MathJax 2 call MathJax.Hub.Queue; the book serves MathJax 3,
//    so that call is forwarded to MathJax 3's typesetPromise.
(function () {
  var here = document.currentScript.src;
  var dir = here.slice(0, here.lastIndexOf("/") + 1) + "html-manager";
  window.__jupyter_widgets_assets_path__ = dir + "/";
  if (window.require && window.require.config) {
    window.require.config({ paths: { "@jupyter-widgets/html-manager/dist": dir } });
  }
  function shim() {
    var mj = window.MathJax;
    if (mj && !mj.Hub) {
      mj.Hub = {
        Queue: function (job) {
          var el = job && job[2];
          if (mj.typesetPromise) mj.typesetPromise(el ? [el] : undefined).catch(function () {});
        },
      };
    }
  }
  window.addEventListener("DOMContentLoaded", shim);
  window.addEventListener("load", shim);
})();
