// Draws each <div class="chart" data-rates="URL"> as a uPlot line chart of put and get
// messages per second, refreshed every sample interval. No build step: plain browser JS.
(function () {
  "use strict";
  function fmt(v) {
    if (v == null) return "-";
    return v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2);
  }
  function hms(v) { return new Date(v * 1e3).toISOString().slice(11, 19); }
  function draw(el) {
    var url = el.getAttribute("data-rates");
    var every = parseFloat(el.getAttribute("data-interval") || "5") * 1000;
    var plot = null;
    function refresh() {
      fetch(url, {credentials: "same-origin"}).then(function (r) { return r.json(); }).then(function (s) {
        if (s.t.length < 2) {
          // one point alone is no line: say so rather than draw a dot in a corner
          el.innerHTML = '<p class="empty">Collecting samples: one every ' + s.interval_s +
            ' s, the chart starts with the second.</p>';
          plot = null;
          return;
        }
        var data = [s.t, s.put, s.get];
        if (plot) { plot.setData(data); return; }
        el.innerHTML = "";
        plot = new uPlot({
          width: chartWidth(), height: 240,
          scales: {x: {time: true}, y: {range: function (u, min, max) { return [0, Math.max(1, max * 1.1)]; }}},
          axes: [{space: 80, incrs: [5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600],
                   values: function (u, vals) { return vals.map(hms); }}, {label: "msg/s", values: function (u, vals) { return vals.map(fmt); }}],
          series: [
            {value: function (u, v) { return v == null ? "-" : new Date(v * 1e3).toISOString().replace("T", " ").slice(0, 19); }},
            {label: "put", stroke: "#1f5fb4", width: 2, fill: "rgba(31,95,180,0.08)", value: function (u, v) { return fmt(v); }},
            {label: "get", stroke: "#d9822b", width: 2, value: function (u, v) { return fmt(v); }}
          ]
        }, data, el);
      }).catch(function () { /* the next refresh tries again */ });
    }
    function chartWidth() { return Math.max(260, el.clientWidth - 20); }
    // the width is fixed when the chart is drawn: follow the window (a narrower one would
    // otherwise scroll sideways, a wider one leave the chart short)
    window.addEventListener("resize", function () {
      if (plot) plot.setSize({width: chartWidth(), height: 240});
    });
    refresh();
    setInterval(refresh, every);
  }
  document.querySelectorAll(".chart[data-rates]").forEach(draw);
})();
