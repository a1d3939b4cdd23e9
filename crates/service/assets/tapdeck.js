// The web page's behaviour: the timeline charts (from /api/v1/stats) and the query form's
// count (from /api/v1/count). The page itself is rendered by the server; without this
// script the store, the files and the download form still work.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const DAY = 86400;
  const units = (v, names, base) => {
    if (v == null) return "";
    let i = 0;
    while (Math.abs(v) >= base && i < names.length - 1) {
      v /= base;
      i++;
    }
    return (i === 0 ? String(Math.round(v)) : v.toFixed(1)) + names[i];
  };
  const count = (v) => units(v, ["", " k", " M", " G", " T"], 1000);
  const bytes = (v) => units(v, [" B", " KB", " MB", " GB", " TB", " PB"], 1000);
  const iso = (secs) => new Date(Math.round(secs) * 1000).toISOString().replace(".000Z", "Z");

  // What is on screen: [start, end) in seconds since the epoch.
  let view = null;
  const charts = [];
  window.tapdeckCharts = charts;

  function series(doc, pick) {
    // One value per step, null where the recorder reported nothing (a gap, not a zero).
    const step = doc.step_s;
    const first = Math.floor(doc.start_ns / 1e9 / step) * step;
    const n = Math.max(1, Math.ceil((doc.end_ns / 1e9 - first) / step));
    const byTime = new Map(doc.points.map((p) => [p.t, p]));
    const xs = [];
    const cols = pick.map(() => []);
    for (let i = 0; i < n; i++) {
      const t = first + i * step;
      const p = byTime.get(t);
      xs.push(t);
      pick.forEach((f, j) => cols[j].push(p ? f(p) : null));
    }
    return [xs, ...cols];
  }

  function chart(el, title, names, colors, fmt, data) {
    const opts = {
      title: title,
      width: Math.max(320, el.clientWidth || 900),
      height: 220,
      cursor: { drag: { x: true, y: false, setScale: false } },
      scales: { x: { time: true } },
      axes: [{}, { values: (u, vals) => vals.map(fmt), size: 70 }],
      series: [{}].concat(
        names.map((name, i) => ({
          label: name,
          stroke: colors[i],
          width: 1.5,
          spanGaps: false,
          // Dots where there are few values: a lone minute between gaps is no line.
          points: { show: data[i + 1].filter((v) => v != null).length <= 200, size: 5 },
          value: (u, v) => (v == null ? "–" : fmt(v)),
        })),
      ),
      hooks: {
        setSelect: [
          (u) => {
            if (u.select.width < 2) return;
            const lo = u.posToVal(u.select.left, "x");
            const hi = u.posToVal(u.select.left + u.select.width, "x");
            u.setSelect({ left: 0, width: 0, top: 0, height: 0 }, false);
            load(lo, hi);
          },
        ],
      },
    };
    el.textContent = "";
    return new uPlot(opts, data, el);
  }

  async function load(start, end) {
    const status = $("timeline-status");
    const q = new URLSearchParams({ start: iso(start), end: iso(end) });
    let doc;
    try {
      const r = await fetch("/api/v1/stats?" + q, { credentials: "same-origin" });
      doc = await r.json();
      if (!r.ok) throw new Error(doc.error || r.statusText);
    } catch (e) {
      status.textContent = "timeline: " + e.message;
      return;
    }
    view = [start, end];
    const step = doc.step_s >= 3600 ? doc.step_s / 3600 + " h" : doc.step_s / 60 + " min";
    status.textContent =
      `${iso(start)} to ${iso(end)}, per ${step}; ${doc.points.length} ` +
      `${doc.points.length === 1 ? "step" : "steps"} with data` +
      ` (drag across a chart to zoom in)`;
    const packets = series(doc, [
      (p) => p.seen,
      (p) => p.stored,
      (p) => p.dropped.kernel,
      (p) => p.dropped.staging_full,
      (p) => p.dropped.write_error,
    ]);
    const volume = series(doc, [(p) => p.wire_bytes, (p) => p.bytes_written]);
    charts.length = 0;
    charts.push(
      chart(
        $("chart-packets"),
        `Packets per ${step}`,
        ["seen", "stored", "dropped: kernel", "dropped: staging full", "dropped: write error"],
        ["#1f77b4", "#2ca02c", "#d62728", "#ff7f0e", "#9467bd"],
        count,
        packets,
      ),
      chart(
        $("chart-bytes"),
        `Bytes per ${step}`,
        ["on the wire", "written to disk"],
        ["#1f77b4", "#8c564b"],
        bytes,
        volume,
      ),
    );
    $("use-view").disabled = false;
  }

  function last(seconds) {
    const end = Math.ceil(Date.now() / 1000 / 60) * 60;
    load(end - seconds, end);
  }

  async function countMatches(ev) {
    ev.preventDefault();
    const out = $("q-result");
    const form = $("query");
    const q = new URLSearchParams();
    for (const name of ["start", "end", "filter"]) {
      const v = form.elements[name].value.trim();
      if (v) q.set(name, v);
    }
    out.textContent = "counting…";
    try {
      const r = await fetch("/api/v1/count?" + q, { credentials: "same-origin" });
      const doc = await r.json();
      if (!r.ok) throw new Error(doc.error || r.statusText);
      // Cut short by the time limit, the count is unknown (null), not a number.
      const matched =
        doc.packets === null
          ? `more than ${bytes(doc.bytes)} of packets match (counting stopped)`
          : `${doc.packets.toLocaleString("en")} packets match (${bytes(doc.bytes)} as a file)`;
      out.textContent =
        `${matched}; ` +
        `read ${doc.chunks_read} of ${doc.chunks_read + doc.chunks_skipped} chunks ` +
        `(${doc.chunks_skipped} skipped by the flow index) in ${doc.seconds.toFixed(2)} s` +
        (doc.complete ? "" : `; stopped early: ${doc.cut}`);
      out.dataset.packets = doc.packets === null ? "" : String(doc.packets);
    } catch (e) {
      out.textContent = "query: " + e.message;
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    for (const b of document.querySelectorAll("[data-last]")) {
      b.addEventListener("click", () => last(Number(b.dataset.last)));
    }
    $("use-view").addEventListener("click", () => {
      if (!view) return;
      $("q-start").value = iso(view[0]);
      $("q-end").value = iso(view[1]);
    });
    $("count").addEventListener("click", countMatches);
    last(DAY);
  });
})();
