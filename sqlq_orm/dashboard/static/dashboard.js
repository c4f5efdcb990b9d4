// sqlq dashboard: refresh the page's content in place every data-refresh seconds.
// The server answers the X-Sqlq-Refresh header with the content block only, so the
// page never reloads and the scroll position stays. Paused while a form field has
// focus (someone is typing a filter) and while the tab is hidden.
(function () {
  "use strict";
  var seconds = Number(document.body.dataset.refresh || 0);
  if (!seconds) return;
  var content = document.getElementById("content");
  function editing() {
    var el = document.activeElement;
    return el && /^(INPUT|SELECT|TEXTAREA)$/.test(el.tagName);
  }
  function tick() {
    if (document.visibilityState !== "visible" || editing()) {
      return setTimeout(tick, seconds * 1000);
    }
    fetch(location.href, { headers: { "X-Sqlq-Refresh": "1" }, credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (html !== null && !editing()) {
          content.innerHTML = html;
          document.body.dataset.refreshed = String(Date.now());
        }
      })
      .catch(function () { /* the next tick tries again */ })
      .then(function () { setTimeout(tick, seconds * 1000); });
  }
  setTimeout(tick, seconds * 1000);
})();
