// Live updates of the dashboard's tables: every few seconds, read the page's JSON (the same
// numbers the page was rendered from) and write it into the cells.  Only textContent is set,
// never HTML, so a queue name or a worker id cannot become markup.  The Content-Security-Policy
// allows this file (script-src 'self') and nothing inline.
"use strict";

const PERIOD_MS = 5000;

function formatted(field, value) {
  if (value === null || value === undefined) return "-";
  if (field === "oldest_pending_seconds") return value.toFixed(1) + "s";
  if (field === "seen_ago") return value.toFixed(0) + "s ago";
  if (field === "queues" && Array.isArray(value)) return value.join(", ");
  if (field === "started_at" || field === "progress.updated_at") {
    return String(value).slice(0, 19).replace("T", " ");
  }
  if (field === "progress.fraction") return (value * 100).toFixed(0) + "%";
  return String(value);
}

// A row's value of "a" or "a.b" (undefined when "a" is null: a job that reported nothing).
function fieldOf(row, field) {
  return field.split(".").reduce((value, name) => (value == null ? undefined : value[name]), row);
}

// Each live table: data-live="<JSON address>" (a list of rows, or one object: a job's page),
// data-key="<the field naming a row>"; each row data-row="<its key>"; each live cell
// data-field="<field>", or "<field>.<field>" for a field of an object (a job's progress).
// The next read comes PERIOD_MS after this one ends, or 10 times as long as it took if that is
// longer: on a table of a million jobs /api/queues takes seconds (bench/README.md, "Dashboard
// page times"), and an open tab must not keep a database session busy all the time.
function refresh(table, status) {
  const started = performance.now();
  const again = () => {
    const took = performance.now() - started;
    setTimeout(() => refresh(table, status), Math.max(PERIOD_MS, 10 * took));
  };
  fetch(table.dataset.live, { credentials: "same-origin", cache: "no-store" })
    .then((response) => {
      if (!response.ok) throw new Error("HTTP " + response.status);
      return response.json();
    })
    .then((data) => {
      const rows = Array.isArray(data) ? data : [data];
      const byKey = new Map(rows.map((row) => [String(row[table.dataset.key]), row]));
      let changed = false;
      for (const tr of table.querySelectorAll("tr[data-row]")) {
        const row = byKey.get(tr.dataset.row);
        tr.classList.toggle("gone", row === undefined);
        if (row === undefined) { changed = true; continue; }
        byKey.delete(tr.dataset.row);
        for (const td of tr.querySelectorAll("[data-field]")) {
          const text = formatted(td.dataset.field, fieldOf(row, td.dataset.field));
          if (td.textContent !== text) td.textContent = text;
        }
      }
      if (byKey.size) changed = true;
      status.textContent = "Updated " + new Date().toLocaleTimeString() +
        (changed ? " · rows came or went: reload for them" : "");
    })
    .catch((error) => { status.textContent = "Live update failed (" + error.message + ")"; })
    .finally(again);
}

for (const table of document.querySelectorAll("table[data-live]")) {
  const status = document.getElementById(table.dataset.status);
  setTimeout(() => refresh(table, status), PERIOD_MS);
}
