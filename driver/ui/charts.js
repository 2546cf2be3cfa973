// Sluice UI charts: the per-query charts over progress records, drawn by
// uPlot. Each chart keeps at most MAX_POINTS batches; `update` redraws
// from the records the page holds. A y-axis is as wide as its widest tick
// label, so that 1,500,000 rows/s shows in full.
"use strict";

const SluiceCharts = (() => {
  const MAX_POINTS = 1000;
  const PHASES = ["latest_offset", "wal_commit", "execution", "sink_commit", "commit"];
  const PHASE_COLORS = ["#8e6bd8", "#e39b2d", "#2a6fdb", "#2aa876", "#d9534f"];

  // The chart's size inside its box (less the box's padding and border).
  function size(el) {
    const box = el.getBoundingClientRect().width || 600;
    return { width: Math.max(320, Math.floor(box) - 20), height: 220 };
  }

  // The least width of a y-axis: uPlot's default, kept for small numbers.
  const MIN_AXIS = 50;
  // Labels are measured on a canvas of their own: uPlot keeps track of the
  // font it last set on the chart's canvas.
  const measure = document.createElement("canvas").getContext("2d");

  // An axis `size`: its tick, its gap and its widest label, in CSS pixels
  // (uPlot passes no labels before the first layout).
  function fitLabels(u, values, axisIdx) {
    const axis = u.axes[axisIdx];
    measure.font = axis.font[0];
    const labels = (values || []).filter((v) => v != null);
    const widest = Math.max(0, ...labels.map((v) => measure.measureText(String(v)).width));
    const ticks = axis.ticks.show ? axis.ticks.size : 0;
    return Math.max(MIN_AXIS, Math.ceil(ticks + axis.gap + widest / uPlot.pxRatio));
  }

  const yAxis = () => ({ size: fitLabels });

  function lineSeries(label, color) {
    return { label, stroke: color, width: 2, points: { show: false } };
  }

  // A time-axis line chart of `columns(records)`.
  function lines(el, title, series, columns) {
    const opts = Object.assign(size(el), {
      title,
      series: [{}].concat(series),
      scales: { y: { range: (u, min, max) => [Math.min(0, min), Math.max(1, max)] } },
      axes: [{}, yAxis()],
      legend: { live: true },
    });
    const u = new uPlot(opts, [[], ...series.map(() => [])], el);
    return {
      plot: u,
      update(records) {
        const xs = records.map((r) => r.timestamp_ms / 1000);
        u.setData([xs, ...columns(records)]);
      },
    };
  }

  // Batch duration stacked by phase: each series is the running sum of the
  // phases below it, with a band filling between neighbours; the legend
  // shows each phase's own milliseconds.
  function phases(el) {
    let raw = PHASES.map(() => []);
    const bars = uPlot.paths.bars({ size: [0.8, 24] });
    const bands = PHASES.slice(1).map((_, k) => ({ series: [k + 2, k + 1] }));
    const opts = Object.assign(size(el), {
      title: "Batch duration by phase (ms)",
      scales: { x: { time: false }, y: { range: (u, min, max) => [0, Math.max(1, max)] } },
      axes: [{ label: "batch" }, yAxis()],
      bands,
      series: [{ label: "batch" }].concat(PHASES.map((p, k) => ({
        label: p,
        stroke: PHASE_COLORS[k],
        fill: PHASE_COLORS[k] + "cc",
        paths: bars,
        points: { show: false },
        value: (u, v, si, i) => (i == null || raw[si - 1][i] == null ? "--" : raw[si - 1][i]),
      }))),
    });
    const u = new uPlot(opts, [[], ...PHASES.map(() => [])], el);
    return {
      plot: u,
      update(records) {
        raw = PHASES.map((p) => records.map((r) => r.duration_ms[p]));
        const acc = records.map(() => 0);
        const stacked = raw.map((col) => col.map((v, i) => (acc[i] += v)));
        u.setData([records.map((r) => r.batch_id), ...stacked]);
      },
    };
  }

  function create(kind, el) {
    switch (kind) {
      case "rates":
        return lines(el, "Rows per second",
          [lineSeries("input rows/s", "#2a6fdb"), lineSeries("processed rows/s", "#2aa876")],
          (rs) => [rs.map((r) => r.input_rows_per_second), rs.map((r) => r.processed_rows_per_second)]);
      case "phases":
        return phases(el);
      case "state":
        return lines(el, "State rows", [lineSeries("state rows", "#8e6bd8")],
          (rs) => [rs.map((r) => r.state_rows_total)]);
      case "watermark":
        return lines(el, "Watermark lag (s)", [lineSeries("lag s", "#d9534f")],
          // No lag for the batch that ends the input (its watermark is past any date).
          (rs) => [rs.map((r) => (r.watermark_ms == null || r.watermark_ms >= 8.64e15 ? null : (r.timestamp_ms - r.watermark_ms) / 1000))]);
      default:
        throw new Error("unknown chart " + kind);
    }
  }

  return { create, size, MAX_POINTS };
})();
