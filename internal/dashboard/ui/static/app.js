// The dashboard keeps itself current from one server-sent event stream:
// "sections" replaces the parts of the page that changed, "event" adds a
// row to the event table. Nothing else is fetched and the page never
// reloads.
"use strict";

(function () {
  const maxEvents = 500;
  const live = document.getElementById("live");
  const events = document.getElementById("events");
  const filter = document.getElementById("event-app");

  function setLive(on, text) {
    live.textContent = text;
    live.className = "live " + (on ? "on" : "off");
  }

  function applyFilter(row) {
    const app = filter.value;
    row.hidden = app !== "" && row.dataset.app !== app;
  }

  // The filter offers every app on the page, and keeps what was chosen.
  function syncFilter() {
    const names = Array.from(document.querySelectorAll("#apps article.app"), (a) => a.dataset.app);
    const have = Array.from(filter.options, (o) => o.value).slice(1);
    if (names.join("\n") === have.join("\n")) return;
    const chosen = filter.value;
    filter.length = 1;
    for (const n of names) filter.add(new Option(n, n));
    filter.value = names.includes(chosen) ? chosen : "";
  }

  filter.addEventListener("change", () => {
    for (const row of events.rows) applyFilter(row);
  });

  const after = document.body.dataset.after || "0";
  const span = document.body.dataset.span || "";
  const es = new EventSource("/stream?after=" + encodeURIComponent(after) + "&span=" + encodeURIComponent(span));
  es.onopen = () => setLive(true, "live");
  es.onerror = () => setLive(false, "reconnecting");
  es.addEventListener("sections", (e) => {
    const parts = JSON.parse(e.data);
    for (const id of Object.keys(parts)) {
      if (id.startsWith("app:")) {
        const el = document.querySelector('#apps article.app[data-app="' + CSS.escape(id.slice(4)) + '"]');
        if (el) el.outerHTML = parts[id];
        continue;
      }
      const el = document.getElementById(id);
      if (el) el.innerHTML = parts[id];
    }
    syncFilter();
  });
  es.addEventListener("event", (e) => {
    const ev = JSON.parse(e.data);
    events.insertAdjacentHTML("afterbegin", ev.html);
    applyFilter(events.rows[0]);
    while (events.rows.length > maxEvents) events.deleteRow(-1);
  });
})();
