// Draws every chart from the inline specs, then writes what rendered (and any error) into
// #render-status as JSON: the browser test reads it from the dumped DOM.
(function () {
  var state = window.__cacheaudit;
  var status = document.getElementById("render-status");
  var specs = JSON.parse(document.getElementById("chart-specs").textContent);
  function measure(id) {
    var el = document.getElementById(id);
    var drawn = el ? el.querySelector("svg, canvas") : null;
    if (!drawn) return { id: id, ok: false, width: 0, height: 0 };
    var box = drawn.getBoundingClientRect();
    return { id: id, ok: true, width: Math.round(box.width), height: Math.round(box.height) };
  }
  var jobs = Object.keys(specs).map(function (id) {
    if (typeof vegaEmbed !== "function") {
      return Promise.resolve({ id: id, ok: false, error: "vegaEmbed is not loaded" });
    }
    return vegaEmbed("#" + id, specs[id], { renderer: "svg", actions: false })
      .then(function () { return measure(id); })
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
      page_height: document.documentElement.scrollHeight
    });
    status.setAttribute("data-done", "1");
  });
})();
