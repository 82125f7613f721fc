// memfs web view: live pages. One EventSource per page on /ui/events; when a change
// lands in a store this page shows, the page's #live part is fetched again and
// swapped in place (no reload). Nothing else runs here.
(function () {
  "use strict";
  var store = document.body.getAttribute("data-live-store");
  var status = document.getElementById("live-status");
  if (!store || !window.EventSource || !window.fetch) {
    return;
  }
  var timer = null;
  var busy = false;
  var again = false;

  function show(state) {
    if (status) {
      status.className = "live-status " + state;
      status.textContent = state === "on" ? "live" : state;
    }
  }

  function refresh() {
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (response.redirected && response.url.indexOf("/ui/login") !== -1) {
          window.location.assign(response.url);
          return null;
        }
        return response.ok ? response.text() : null;
      })
      .then(function (html) {
        if (!html) {
          return;
        }
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("live");
        var current = document.getElementById("live");
        if (fresh && current) {
          current.replaceWith(document.importNode(fresh, true));
          document.body.setAttribute("data-live-updated", String(Date.now()));
        }
      })
      .catch(function () { show("offline"); })
      .then(function () {
        busy = false;
        if (again) {
          again = false;
          schedule();
        }
      });
  }

  function schedule() {
    if (timer === null) {
      timer = window.setTimeout(function () { timer = null; refresh(); }, 250);
    }
  }

  var source = new EventSource("/ui/events");
  source.addEventListener("hello", function () { show("on"); });
  source.addEventListener("commit", function (event) {
    var data = {};
    try { data = JSON.parse(event.data); } catch (e) { return; }
    if (store === "*" || data.store === store) {
      schedule();
    }
  });
  source.addEventListener("resync", schedule);
  source.addEventListener("end", function () {
    source.close();
    show("stopped");
  });
  source.onerror = function () {
    show(source.readyState === EventSource.CLOSED ? "stopped" : "reconnecting");
  };
  source.onopen = function () { show("on"); };
  window.addEventListener("pagehide", function () { source.close(); });
}());
