// tools/view_page.cpp: the data of `tidepool view`'s page (JSON) and the page around it.
#include "view_page.hpp"

#include <nlohmann/json.hpp>

#include "replay/report.hpp"

namespace tidepool::cli {

namespace {

nlohmann::json samples_json(const replay::replay_result& r) {
  nlohmann::json rows = nlohmann::json::array();
  nlohmann::json live = nlohmann::json::array();
  nlohmann::json held = nlohmann::json::array();
  nlohmann::json calls = nlohmann::json::array();
  nlohmann::json us = nlohmann::json::array();
  for (const replay::replay_sample& s : r.samples) {
    rows.push_back(s.row);
    live.push_back(s.live_bytes);
    held.push_back(s.held_bytes);
    calls.push_back(s.driver_calls);
    us.push_back(s.driver_us);
  }
  return {{"row", rows}, {"live", live}, {"held", held}, {"calls", calls}, {"us", us}};
}

// The page's data, as one JSON text safe inside a <script> element.
std::string page_data(const std::vector<view_trace>& traces, const std::string& version) {
  nlohmann::json all = nlohmann::json::array();
  for (const view_trace& t : traces) {
    nlohmann::json o;
    o["name"] = t.name;
    o["truncated"] = t.truncated;
    o["rows"] = t.summary.rows;
    o["allocations"] = t.summary.allocations;
    o["peak_live_bytes"] = t.summary.peak_live_bytes;
    o["threads"] = t.summary.threads;
    o["streams"] = t.summary.streams;
    o["passes"] = t.results.empty() ? 0 : t.results.front().passes.size();
    o["results"] = nlohmann::json::parse(replay::format_json(t.results));
    nlohmann::json samples = nlohmann::json::object();
    for (const replay::replay_result& r : t.results) samples[r.allocator] = samples_json(r);
    o["samples"] = std::move(samples);
    all.push_back(std::move(o));
  }
  const std::string text = nlohmann::json{{"version", version}, {"traces", all}}.dump();
  // "</" would end the script element early; "<\/" is the same JSON string.
  std::string safe;
  safe.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    safe.push_back(text[i]);
    if (text[i] == '<' && i + 1 < text.size() && text[i + 1] == '/') safe.push_back('\\');
  }
  return safe;
}

constexpr const char* page_head = R"HTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>tidepool view</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 28px 0 4px; border-top: 1px solid #ccc; padding-top: 16px; }
h3 { font-size: 14px; margin: 14px 0 4px; }
.note { color: #555; margin: 2px 0 8px; }
svg.chart { display: block; margin: 4px 0 12px; background: #fafafa; border: 1px solid #ddd; }
svg.chart text { font: 11px system-ui, sans-serif; fill: #333; }
table { border-collapse: collapse; margin: 6px 0 12px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f0f0f0; } td.name { text-align: left; font-weight: 600; }
#errors { color: #b00; white-space: pre-wrap; }
</style>
</head>
<body>
<h1>tidepool view</h1>
<p class="note" id="generated"></p>
<div id="errors"></div>
<div id="report"></div>
<script type="application/json" id="tidepool-data">)HTML";

constexpr const char* page_tail = R"HTML(</script>
<script>
"use strict";
(function () {
  var errors = [];
  function mark() {
    document.body.setAttribute("data-errors", String(errors.length));
    document.getElementById("errors").textContent = errors.join("\n");
  }
  window.addEventListener("error", function (e) { errors.push(String(e.message)); mark(); });

  var SVG = "http://www.w3.org/2000/svg";
  var COLORS = { tidepool: "#d62728", caching: "#1f77b4", expandable: "#2ca02c", cupy: "#9467bd",
                 async: "#ff7f0e", exact: "#8c564b" };
  var SPARE = ["#17becf", "#bcbd22", "#7f7f7f", "#e377c2"];
  function color(name, i) { return COLORS[name] || SPARE[i % SPARE.length]; }

  function fmtBytes(b) {
    if (b >= 1073741824) return (b / 1073741824).toFixed(2) + " GiB";
    if (b >= 1048576) return (b / 1048576).toFixed(2) + " MiB";
    if (b >= 1024) return (b / 1024).toFixed(1) + " KiB";
    return String(b) + " B";
  }
  function fmtUs(us) { return (us / 1000).toFixed(2) + " ms"; }
  function fmtRatio(r) { return r.toFixed(3); }
  function fmtCount(n) { return String(n); }
  function fmtNs(n) { return n.toFixed(1); }

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function svgEl(tag, attrs, text) {
    var e = document.createElementNS(SVG, tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function niceMax(v) {
    if (v <= 0) return 1;
    var p = Math.pow(10, Math.floor(Math.log10(v)));
    var steps = [1, 2, 2.5, 5, 10];
    for (var i = 0; i < steps.length; i++) if (steps[i] * p >= v) return steps[i] * p;
    return 10 * p;
  }

  // A line chart: series = [{name, color, x: [], y: [], dash}], y formatted by yfmt.
  function chart(kind, title, series, yfmt, xlabel) {
    var W = 960, H = 300, L = 90, R = 170, T = 26, B = 40;
    var svg = svgEl("svg", { "class": "chart", "data-chart": kind, width: W, height: H,
                             viewBox: "0 0 " + W + " " + H });
    var xmax = 1, ymax = 0;
    series.forEach(function (s) {
      s.x.forEach(function (v) { if (v > xmax) xmax = v; });
      s.y.forEach(function (v) { if (v > ymax) ymax = v; });
    });
    if (kind === "memory" && ymax >= 1073741824) {
      ymax = niceMax(ymax / 1073741824) * 1073741824;
    } else {
      ymax = niceMax(ymax);
    }
    function px(v) { return L + (W - L - R) * v / xmax; }
    function py(v) { return H - B - (H - T - B) * v / ymax; }
    svg.appendChild(svgEl("text", { x: L, y: 16, "font-weight": "600" }, title));
    for (var i = 0; i <= 4; i++) {
      var yv = ymax * i / 4, y = py(yv);
      svg.appendChild(svgEl("line", { x1: L, x2: W - R, y1: y, y2: y, stroke: "#ddd" }));
      svg.appendChild(svgEl("text", { x: L - 6, y: y + 4, "text-anchor": "end" }, yfmt(yv)));
      var xv = xmax * i / 4, x = px(xv);
      svg.appendChild(svgEl("text", { x: x, y: H - B + 16, "text-anchor": "middle" }, String(Math.round(xv))));
    }
    svg.appendChild(svgEl("text", { x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle" }, xlabel));
    svg.appendChild(svgEl("line", { x1: L, x2: W - R, y1: py(0), y2: py(0), stroke: "#888" }));
    svg.appendChild(svgEl("line", { x1: L, x2: L, y1: T, y2: H - B, stroke: "#888" }));
    series.forEach(function (s, k) {
      var points = s.x.map(function (xv, j) { return px(xv).toFixed(1) + "," + py(s.y[j]).toFixed(1); });
      var attrs = { fill: "none", stroke: s.color, "stroke-width": 2, points: points.join(" "),
                    "data-series": s.name };
      if (s.dash) attrs["stroke-dasharray"] = "5,3";
      svg.appendChild(svgEl("polyline", attrs));
      var ly = T + 14 + 16 * k;
      svg.appendChild(svgEl("line", { x1: W - R + 12, x2: W - R + 36, y1: ly - 4, y2: ly - 4, stroke: s.color,
                                      "stroke-width": 2, "stroke-dasharray": s.dash ? "5,3" : "none" }));
      svg.appendChild(svgEl("text", { x: W - R + 42, y: ly }, s.name));
    });
    return svg;
  }

  // A cell whose text shows `value` formatted and whose data-value is the JSON number itself.
  function cell(row, allocator, key, value, fmt) {
    var td = el("td", { "data-allocator": allocator, "data-key": key,
                        "data-value": value === null ? "null" : String(value) },
                value === null ? "-" : fmt(value));
    row.appendChild(td);
  }

  function replayTable(t) {
    var multi = t.passes > 1;
    var cols = [["peak_held_bytes", "peak held", fmtBytes], ["held_ratio", "held / live", fmtRatio],
                ["held_end_bytes", "held at end", fmtBytes],
                ["held_after_release_bytes", "after release", fmtBytes],
                ["held_after_compact_bytes", "after compact", fmtBytes],
                ["driver_calls", "drv calls", fmtCount], ["driver_us", "drv time", fmtUs],
                ["ns_per_op", "ns/op", fmtNs], ["failures", "failed", fmtCount]];
    if (multi) {
      cols = cols.concat([["first_pass.held_ratio", "first pass held / live", fmtRatio],
                          ["first_pass.driver_calls", "first pass calls", fmtCount],
                          ["steady_state.held_ratio", "steady held / live", fmtRatio],
                          ["steady_state.driver_calls", "steady calls", fmtCount],
                          ["steady_state.driver_us", "steady drv time", fmtUs]]);
    }
    var table = el("table", { "class": "replay-table", "data-trace": t.name });
    var head = el("tr");
    head.appendChild(el("th", {}, "allocator"));
    cols.forEach(function (c) { head.appendChild(el("th", {}, c[1])); });
    table.appendChild(head);
    t.results.forEach(function (r) {
      var row = el("tr", { "data-allocator": r.allocator });
      row.appendChild(el("td", { "class": "name" }, r.allocator));
      cols.forEach(function (c) {
        var parts = c[0].split("."), v = r;
        parts.forEach(function (p) { v = v === null ? null : v[p]; });
        cell(row, r.allocator, c[0], v, c[2]);
      });
      table.appendChild(row);
    });
    return table;
  }

  function passesTable(t) {
    var table = el("table", { "class": "passes-table", "data-trace": t.name });
    var head = el("tr");
    head.appendChild(el("th", {}, "allocator"));
    for (var i = 0; i < t.passes; i++) head.appendChild(el("th", {}, "pass " + (i + 1)));
    table.appendChild(head);
    t.results.forEach(function (r) {
      var row = el("tr", { "data-allocator": r.allocator });
      row.appendChild(el("td", { "class": "name" }, r.allocator));
      r.passes.forEach(function (p, i) {
        var td = el("td", { "data-allocator": r.allocator, "data-key": "passes." + i + ".held_ratio",
                            "data-value": String(p.held_ratio) },
                    fmtRatio(p.held_ratio) + " / " + p.driver_calls + " calls");
        row.appendChild(td);
      });
      table.appendChild(row);
    });
    return table;
  }

  function render() {
    var data = JSON.parse(document.getElementById("tidepool-data").textContent);
    document.getElementById("generated").textContent =
      "tidepool " + data.version + ": " + data.traces.length + " trace(s), replayed on each allocator.";
    var root = document.getElementById("report");
    data.traces.forEach(function (t) {
      var section = el("section", { "class": "trace", "data-trace": t.name });
      section.appendChild(el("h2", {}, t.name));
      section.appendChild(el("p", { "class": "note" },
        t.rows + " rows, " + t.allocations + " allocations, peak live " + fmtBytes(t.peak_live_bytes) + ", " +
        t.threads + " thread(s), " + t.streams + " stream(s)" + (t.passes > 1 ? ", " + t.passes + " passes" : "") +
        (t.truncated ? " (the file was cut short: read up to its last whole row)" : "")));
      // Live memory is the program's, the same under every allocator that served every request:
      // one dashed line, plus one for each allocator that failed some (its live differs).
      var memory = [], calls = [];
      t.results.forEach(function (r, i) {
        var s = t.samples[r.allocator];
        memory.push({ name: r.allocator + " held", color: color(r.allocator, i), x: s.row, y: s.held });
        calls.push({ name: r.allocator, color: color(r.allocator, i), x: s.row, y: s.calls });
      });
      var shown = false;
      t.results.forEach(function (r, i) {
        var s = t.samples[r.allocator];
        if (r.failures > 0) {
          memory.push({ name: r.allocator + " live", color: color(r.allocator, i), x: s.row, y: s.live, dash: true });
        } else if (!shown) {
          shown = true;
          memory.push({ name: "live", color: "#222", x: s.row, y: s.live, dash: true });
        }
      });
      var xlabel = "rows replayed" + (t.passes > 1 ? " (all passes)" : "");
      section.appendChild(chart("memory", "Held (solid) and live (dashed) memory", memory, fmtBytes, xlabel));
      section.appendChild(chart("driver", "Driver memory calls, cumulative", calls, function (v) {
        return String(Math.round(v)); }, xlabel));
      section.appendChild(el("h3", {}, "Replay"));
      section.appendChild(replayTable(t));
      if (t.passes > 1) {
        section.appendChild(el("h3", {}, "Steady state: held / live and driver calls, pass by pass"));
        section.appendChild(passesTable(t));
      }
      root.appendChild(section);
    });
  }

  try {
    render();
    document.body.setAttribute("data-rendered", "yes");
  } catch (e) {
    errors.push(String(e && e.stack ? e.stack : e));
  }
  mark();
})();
</script>
</body>
</html>
)HTML";

}  // namespace

std::string render_view_page(const std::vector<view_trace>& traces, const std::string& version) {
  return std::string(page_head) + page_data(traces, version) + page_tail;
}

}  // namespace tidepool::cli
