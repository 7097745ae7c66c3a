// Runs before anything else: records script errors, console errors and blocked network
// attempts so a headless browser test can read them back from #render-status.
window.__cacheaudit = { errors: [], blocked: [] };
window.addEventListener("error", function (e) {
  window.__cacheaudit.errors.push(String(e.message || e));
});
window.addEventListener("unhandledrejection", function (e) {
  window.__cacheaudit.errors.push("unhandled rejection: " + String(e.reason));
});
document.addEventListener("securitypolicyviolation", function (e) {
  window.__cacheaudit.blocked.push(e.blockedURI + " (" + e.violatedDirective + ")");
});
// A report never calls alert(); if injected markup ever did, the test sees it as an error.
window.alert = function (message) {
  window.__cacheaudit.errors.push("alert called: " + String(message));
};
(function () {
  var original = console.error;
  console.error = function () {
    window.__cacheaudit.errors.push(Array.prototype.join.call(arguments, " "));
    return original.apply(console, arguments);
  };
})();
