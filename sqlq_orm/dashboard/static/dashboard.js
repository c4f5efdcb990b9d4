// sqlq dashboard: keep the page's data current without taking the operator's place.
//
// Every data-refresh seconds (the operator can change the rate; the choice is kept
// in localStorage) the page asks for its own content (X-Sqlq-Refresh: the server
// answers with the content block only) and copies over the data regions only: the
// elements marked data-live, matched by id or by their data-live name. Forms,
// scroll boxes and everything else stay the very same elements, so a filter being
// typed, a table scrolled sideways, rows ticked and the scroll position survive.
//
// No update while the tab is hidden, a form field has focus, text is selected, a
// pointer is held down, or the page was used in the last INTERACTION_MS. The header
// says when the data was last updated, and says "stale" (and greys the data) when
// the server or its database does not answer.
// A list sorted by a column the screen does not show (a phone: the table scrolls
// sideways in its own box) opens with that column in view: the box is scrolled to
// it once, on load.
(function () {
  "use strict";
  var th = document.querySelector("th[aria-sort]");
  for (var box = th && th.parentNode; box && box !== document.body; box = box.parentNode) {
    if (box.scrollWidth > box.clientWidth && getComputedStyle(box).overflowX !== "visible") {
      var outer = box.getBoundingClientRect();
      var cell = th.getBoundingClientRect();
      if (cell.right > outer.right) box.scrollLeft += cell.right - outer.right;
      else if (cell.left < outer.left) box.scrollLeft -= outer.left - cell.left;
      return;
    }
  }
})();

(function () {
  "use strict";
  var INTERACTION_MS = 2000;
  var STORE = "sqlq-refresh-seconds";
  var body = document.body;
  var content = document.getElementById("content");
  var status = document.getElementById("live-status");
  var rate = document.getElementById("live-rate");
  if (!content || !status || !rate || !Number(body.dataset.refresh || 0)) return;
  status.parentNode.hidden = false;

  var seconds = Number(body.dataset.refresh);
  try {
    var kept = window.localStorage.getItem(STORE);
    if (kept !== null && rate.querySelector('option[value="' + Number(kept) + '"]')) {
      seconds = Number(kept);
    }
  } catch (e) { /* storage disabled: the server's rate */ }
  rate.value = String(seconds);

  var updatedAt = Date.now();
  var dueAt = updatedAt + seconds * 1000;
  var failure = null;       // why the last update failed, or null
  var inFlight = false;
  var lastUse = 0;
  var pointerDown = false;

  function used() { lastUse = Date.now(); }
  ["keydown", "wheel", "touchstart", "input"].forEach(function (name) {
    document.addEventListener(name, used, { capture: true, passive: true });
  });
  document.addEventListener("scroll", used, { capture: true, passive: true });
  document.addEventListener("pointerdown", function () { pointerDown = true; used(); }, true);
  ["pointerup", "pointercancel"].forEach(function (name) {
    document.addEventListener(name, function () { pointerDown = false; used(); }, true);
  });

  rate.addEventListener("change", function () {
    seconds = Number(rate.value);
    try { window.localStorage.setItem(STORE, String(seconds)); } catch (e) { /* not kept */ }
    dueAt = Date.now() + seconds * 1000;
    rate.blur();
    show();
  });

  function pausedBecause() {
    if (document.visibilityState !== "visible") return "tab hidden";
    var el = document.activeElement;
    var ticks = el && (el.type === "checkbox" || el.type === "radio");
    if (el && el !== rate && !ticks && /^(INPUT|SELECT|TEXTAREA)$/.test(el.tagName)) {
      return "typing";
    }
    var selection = window.getSelection ? window.getSelection() : null;
    if (selection && !selection.isCollapsed && String(selection).length) return "text selected";
    if (pointerDown) return "pointer held";
    if (Date.now() - lastUse < INTERACTION_MS) return "in use";
    return "";
  }

  function ago(ms) {
    var s = Math.max(0, Math.round(ms / 1000));
    return s < 60 ? s + " s ago" : Math.floor(s / 60) + " min " + (s % 60) + " s ago";
  }

  function show() {
    var since = ago(Date.now() - updatedAt);
    var text;
    if (failure) {
      text = "stale: " + failure + "; data from " + since;
    } else if (!seconds) {
      text = "updates off; data from " + since;
    } else {
      var why = pausedBecause();
      text = (why ? "paused (" + why + "), " : "live, ") + "updated " + since;
    }
    status.textContent = text;
    body.classList.toggle("stale", failure !== null);
  }

  function keyOf(el) { return el.id || el.getAttribute("data-live"); }

  function apply(html) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    var fresh = {};
    doc.querySelectorAll("[data-live]").forEach(function (el) { fresh[keyOf(el)] = el; });
    content.querySelectorAll("[data-live]").forEach(function (el) {
      var next = fresh[keyOf(el)];
      if (!next) return;
      // Rows ticked for a bulk action stay ticked (when they are still listed).
      var ticked = {};
      el.querySelectorAll("input[type=checkbox]:checked").forEach(function (box) {
        ticked[box.name + "=" + box.value] = true;
      });
      if (el.innerHTML !== next.innerHTML) el.innerHTML = next.innerHTML;
      el.querySelectorAll("input[type=checkbox]").forEach(function (box) {
        if (ticked[box.name + "=" + box.value]) box.checked = true;
      });
      var cls = next.getAttribute("class");
      if (cls !== el.getAttribute("class")) {
        if (cls === null) el.removeAttribute("class"); else el.setAttribute("class", cls);
      }
    });
  }

  function update() {
    inFlight = true;
    fetch(location.href, { headers: { "X-Sqlq-Refresh": "1" }, credentials: "same-origin" })
      .then(function (response) {
        if (!response.ok) throw new Error("the server answered " + response.status);
        return response.text();
      })
      .then(function (html) {
        if (pausedBecause()) return;   // the operator started something meanwhile
        apply(html);
        failure = null;
        updatedAt = Date.now();
        body.dataset.refreshed = String(updatedAt);
      })
      .catch(function (error) {
        failure = error && /answered/.test(error.message) ? error.message : "the server does not answer";
      })
      .then(function () {
        inFlight = false;
        dueAt = Date.now() + seconds * 1000;
        show();
      });
  }

  setInterval(function () {
    if (seconds && !inFlight && Date.now() >= dueAt && !pausedBecause()) update();
    show();
  }, 1000);
  document.addEventListener("visibilitychange", show);
  show();
})();
