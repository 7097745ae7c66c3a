// Draws every chart from the inline specs, then writes what rendered (and any error) into
// #render-status as JSON: the browser test reads it from the dumped DOM.
(function () {
  var state = window.__cacheaudit;
  var status = document.getElementById("render-status");
  var specs = JSON.parse(document.getElementById("chart-specs").textContent);
  function round(v) { return typeof v === "number" ? Math.round(v * 10) / 10 : null; }
  // What was drawn, from Vega's scenegraph: every data mark's items (position and size in the
  // plot's pixels, and whether a line point is drawn) and the axis labels, so the browser test
  // checks where bars, points, gaps and ticks landed, not only the spec
  function marks(view) {
    var out = [];
    function walk(mark, dx, dy) {
      if (!mark || !mark.items) return;
      var role = mark.role || "";
      var kept = role === "mark" || role === "axis-label";
      var items = [];
      mark.items.forEach(function (item) {
        if (kept) {
          items.push({
            x: round(dx + (item.x || 0)), y: round(dy + (item.y || 0)),
            width: round(item.width), height: round(item.height),
            defined: item.defined !== false, text: item.text == null ? null : String(item.text)
          });
        }
        (item.items || []).forEach(function (child) {
          walk(child, dx + (item.x || 0), dy + (item.y || 0));
        });
      });
      if (kept) out.push({ type: mark.marktype, role: role, name: mark.name || "", items: items });
    }
    walk(view.scenegraph().root, 0, 0);
    return out;
  }
  function measure(id, view) {
    var el = document.getElementById(id);
    var drawn = el ? el.querySelector("svg, canvas") : null;
    if (!drawn) return { id: id, ok: false, width: 0, height: 0 };
    var box = drawn.getBoundingClientRect();
    return { id: id, ok: true, width: Math.round(box.width), height: Math.round(box.height),
             marks: view ? marks(view) : [] };
  }
  var jobs = Object.keys(specs).map(function (id) {
    if (typeof vegaEmbed !== "function") {
      return Promise.resolve({ id: id, ok: false, error: "vegaEmbed is not loaded" });
    }
    return vegaEmbed("#" + id, specs[id], { renderer: "svg", actions: false })
      .then(function (result) { return measure(id, result.view); })
      .catch(function (err) {
        console.error("chart " + id + " failed: " + err);
        return { id: id, ok: false, error: String(err) };
      });
  });
  Promise.all(jobs).then(function (charts) {
    status.textContent = JSON.stringify({
      charts: charts,
      errors: state.errors,
      blocked: state.blocked,
      resources: performance.getEntriesByType("resource").length,
      page_height: document.documentElement.scrollHeight,
      page_width: document.documentElement.scrollWidth
    });
    status.setAttribute("data-done", "1");
  });
})();
