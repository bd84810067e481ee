// Taskmaster dashboard: live regions. An element with data-live="<ms>" is
// refreshed by fetching the current address with the X-UI-Fragment header:
// the server answers with the region's HTML only. Pages work without it.
(function () {
  "use strict";
  function refresh(el) {
    if (document.hidden) return Promise.resolve();
    return fetch(location.href, { headers: { "X-UI-Fragment": el.id }, credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        if (r.status === 200) return r.text();
        if (r.redirected || r.status === 401 || r.status === 403) location.reload();
        return null;
      })
      .then(function (html) { if (html !== null && html !== undefined) el.innerHTML = html; })
      .catch(function () {});
  }
  function start(el) {
    var every = parseInt(el.getAttribute("data-live"), 10) || 2000;
    (function loop() {
      setTimeout(function () { refresh(el).then(loop); }, every);
    })();
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-live][id]").forEach(start);
  });
})();
