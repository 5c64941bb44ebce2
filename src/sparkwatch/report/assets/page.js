/* sparkwatch run report: the window table, the figures, and the hooks a reader (or a test) uses:
   window.sparkwatchReport = {ready, view, xDomain(), zoomTo(a, b), resetZoom()}. No network: every byte the
   page needs is in this file. */
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("report-data").textContent);
  var report = { ready: null, view: null, xDomain: null, zoomTo: null, resetZoom: null };
  window.sparkwatchReport = report;

  function rows(cols) {
    var keys = Object.keys(cols);
    var n = keys.length ? cols[keys[0]].length : 0;
    var out = new Array(n);
    for (var i = 0; i < n; i++) {
      var r = {};
      for (var k = 0; k < keys.length; k++) r[keys[k]] = cols[keys[k]][i];
      out[i] = r;
    }
    return out;
  }

  function fmt(v, digits) {
    if (v === null || v === undefined) return "n/a";
    var x = Number(v);
    if (digits === 1) x = Math.sign(x) * Math.round(Math.abs(x) * 10) / 10;  // half away from zero, as lmx
    return x.toFixed(digits);
  }

  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c];
    });
  }

  /* ---- the window table ---- */
  var w = data.windows;
  var n = w.id.length;
  function sumKnown(list) {
    var s = 0;
    for (var i = 0; i < list.length; i++) { if (list[i] === null) return null; s += list[i]; }
    return list.length ? s : null;
  }
  var columns = [
    { title: "window", key: function (i) { return w.id[i]; }, text: function (i) { return esc(w.id[i]); } },
    { title: "phase", key: function (i) { return w.phase[i]; }, text: function (i) { return esc(w.phase[i]) + (w.in_scope[i] ? "" : " (not measured)"); } },
    { title: "start s", num: true, key: function (i) { return w.t_start_s[i]; }, text: function (i) { return fmt(w.t_start_s[i], 3); } },
    { title: "duration s", num: true, key: function (i) { return w.duration_s[i]; }, text: function (i) { return fmt(w.duration_s[i], 3); } },
    { title: "tokens", num: true, key: function (i) { return w.tokens[i]; }, text: function (i) { return fmt(w.tokens[i], 0); } }
  ];
  w.nodes.forEach(function (name, k) {  /* per node: gated W and GPU energy J (sorted by W) */
    columns.push({ title: esc(name) + " W · J", num: true, key: function (i) { return w.power_w[i][k]; }, text: function (i) { return fmt(w.power_w[i][k], 1) + " · " + fmt(w.energy_j[i][k], 1); } });
  });
  columns.push(
    { title: "GPU energy J (sum)", num: true, key: function (i) { return sumKnown(w.energy_j[i]); }, text: function (i) { return fmt(sumKnown(w.energy_j[i]), 1); } },
    { title: "coverage", num: true, key: function (i) { return w.coverage[i]; }, text: function (i) { return fmt(w.coverage[i], 4); } },
    { title: "verdict", key: function (i) { return w.verdict[i]; }, text: function (i) { return '<span class="verdict ' + esc(w.verdict[i]) + '">' + esc(w.verdict[i]) + "</span>"; } },
    { title: "reasons", key: function (i) { return w.reasons[i]; }, text: function (i) { return esc(w.reasons[i]); } }
  );
  /* A grid of rows in chunks the browser skips while they are scrolled out of view (content-visibility):
     10 000 windows stay in the page, searchable, without laying out 10 000 table rows. */
  var ROWS_PER_CHUNK = 100;
  var table = document.getElementById("window-table");
  table.classList.toggle("many", n > 5 * ROWS_PER_CHUNK);  /* a short table is simply drawn */
  var widths = columns.map(function (c, k) { return k === columns.length - 1 ? "minmax(16em, 1fr)" : (k === 0 ? "11em" : (k === 1 ? "10em" : (k >= 5 && k < 5 + w.nodes.length ? "9em" : "7em"))); });
  table.style.setProperty("--columns", widths.join(" "));
  var head = document.createElement("div");
  head.className = "head";
  head.setAttribute("role", "row");
  columns.forEach(function (c, k) {
    var th = document.createElement("span");
    th.setAttribute("role", "columnheader");
    th.innerHTML = c.title;
    th.dataset.column = String(k);
    th.title = "sort by " + th.textContent;
    if (c.num) th.className = "num";
    head.appendChild(th);
  });
  var body = document.createElement("div");
  body.className = "rows";
  table.appendChild(head);
  table.appendChild(body);
  var order = [];
  for (var i = 0; i < n; i++) order.push(i);
  function fill() {
    var html = [];
    for (var j = 0; j < n; j++) {
      if (j % ROWS_PER_CHUNK === 0) html.push(j ? '</div><div class="chunk">' : '<div class="chunk">');
      var r = order[j];
      var cells = "";
      for (var k = 0; k < columns.length; k++) cells += (columns[k].num ? '<span role="cell" class="num">' : '<span role="cell">') + columns[k].text(r) + "</span>";
      html.push('<div class="row" role="row" data-window-id="' + esc(w.id[r]) + '" data-row="' + r + '">' + cells + "</div>");
    }
    if (n) html.push("</div>");
    body.innerHTML = html.join("");
  }
  var sorted = { column: -1, dir: 1 };
  head.addEventListener("click", function (ev) {
    var th = ev.target.closest("[data-column]");
    if (!th) return;
    var k = Number(th.dataset.column);
    sorted.dir = sorted.column === k ? -sorted.dir : 1;
    sorted.column = k;
    var key = columns[k].key;
    order.sort(function (a, b) {
      var x = key(a), y = key(b);
      if (x === y) return a - b;
      if (x === null || x === undefined) return 1;  /* unknowns last, either way */
      if (y === null || y === undefined) return -1;
      return (x < y ? -1 : 1) * sorted.dir;
    });
    head.querySelectorAll("[data-column]").forEach(function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", sorted.dir > 0 ? "ascending" : "descending");
    fill();
  });
  body.addEventListener("click", function (ev) {
    var row = ev.target.closest(".row");
    if (!row || !report.view) return;
    var r = Number(row.dataset.row);
    var a = w.t_start_s[r], b = w.t_end_s[r];
    var pad = Math.max(0.15 * (b - a), 2 * data.interval_s);
    body.querySelectorAll(".row.selected").forEach(function (s) { s.classList.remove("selected"); });
    row.classList.add("selected");
    report.zoomTo(a - pad, b + pad);
    document.getElementById("plots").scrollIntoView({ behavior: "instant", block: "start" });
  });
  fill();

  /* ---- the figures ---- */
  report.xDomain = function () {
    var z = report.view ? report.view.signal("zoom_t") : null;
    return z ? [z[0], z[1]] : [0, data.duration_s];
  };
  report.zoomTo = function (a, b) {
    return report.view.signal("zoom_t", [a, b]).runAsync().then(function () { return report.xDomain(); });
  };
  report.resetZoom = function () {
    return report.view.signal("zoom_t", null).runAsync().then(function () { return report.xDomain(); });
  };
  document.getElementById("reset-zoom").addEventListener("click", function () { if (report.view) report.resetZoom(); });
  if (data.spec) {
    var spec = Object.assign({}, data.spec, { datasets: {} });
    Object.keys(data.columns).forEach(function (name) { spec.datasets[name] = rows(data.columns[name]); });
    var note = document.getElementById("resolution-note");
    report.ready = vegaEmbed("#vis", spec, { actions: false, renderer: "canvas" }).then(function (result) {
      report.view = result.view;
      report.view.addSignalListener("zoom_t", function () {
        var d = report.xDomain();
        note.hidden = d[1] - d[0] >= 20 * data.bucket_s;  /* fewer than 20 buckets across the plot */
      });
      document.body.dataset.ready = "1";
    });
  } else {
    report.ready = Promise.resolve();
    document.body.dataset.ready = "1";
  }
  report.ready.catch(function (err) {
    document.body.dataset.ready = "error";
    console.error("sparkwatch report: the figures did not render: " + err);
  });
})();
