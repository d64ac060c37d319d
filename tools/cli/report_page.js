// Draws the charts of a `vramspill report` page (tools/cli/report_html.h) with Chart.js 3, from
// the JSON in #report-data (tools/cli/report_json.h). Per device, those of its charts that have
// something to show: memory by tier over time, stacked, with the budget as a line (saying when it
// is downsampled); bytes moved between device and host per time bucket; and requests over the
// budget and spills per bucket. Sets the body's data-charts-drawn to their count when done.
(function () {
  'use strict';

  const data = JSON.parse(document.getElementById('report-data').textContent);

  const tierColors = {
    'device': '#3b6fb6',
    'tiered-device': '#2a9d8f',
    'tiered-host': '#e9a23b',
    'spill-host': '#d1495b',
    'spill-vmm-host': '#8e5ea2',
    'spill-managed': '#8c6d46',
  };
  const timeAxisTitle = 'time since the job started (s)';

  // The binary unit that suits a largest value, as [bytes per unit, name].
  function unitFor(largest) {
    for (const unit of [[2 ** 30, 'GiB'], [2 ** 20, 'MiB'], [2 ** 10, 'KiB']]) {
      if (largest >= unit[0]) return unit;
    }
    return [2 ** 20, 'MiB'];
  }

  // Decimals that tell buckets `step` seconds apart from each other.
  function decimalsFor(step) {
    return step >= 1 ? 0 : Math.min(6, Math.ceil(-Math.log10(step)));
  }

  function title(text) {
    return {
      display: true, text: text, color: '#1f2328', font: { size: 16, weight: '600' },
      padding: { bottom: 4 },
    };
  }

  function subtitle(text) {
    return { display: text !== '', text: text, color: '#59636e', padding: { bottom: 8 } };
  }

  function axisTitle(text) {
    return { display: true, text: text, font: { size: 13 } };
  }

  function bytesChart(device) {
    const times = device.times;
    let largest = device.limit;
    for (let i = 0; i < times.length; ++i) {
      let total = 0;
      for (const tier of device.tiers) total += tier.values[i];
      largest = Math.max(largest, total);
    }
    const [scale, unit] = unitFor(largest);
    const datasets = device.tiers.map((tier, index) => ({
      label: tier.label,
      data: tier.values.map((value, i) => ({ x: times[i], y: value / scale })),
      borderColor: tierColors[tier.id],
      backgroundColor: tierColors[tier.id] + 'b0',
      borderWidth: 1,
      fill: index === 0 ? 'origin' : '-1',
      stepped: 'before',
      pointRadius: 0,
      stack: 'tiers',
    }));
    if (device.limit > 0) {
      datasets.push({
        label: 'device budget',
        data: [{ x: 0, y: device.limit / scale }, { x: data.end_s, y: device.limit / scale }],
        borderColor: '#1f2328',
        backgroundColor: 'transparent',
        borderDash: [6, 4],
        borderWidth: 2,
        fill: false,
        pointRadius: 0,
        stack: 'budget',
      });
    }
    return new Chart(document.getElementById('bytes-' + device.device), {
      type: 'line',
      data: { datasets: datasets },
      options: {
        interaction: { mode: 'nearest', axis: 'x', intersect: false },
        scales: {
          x: { type: 'linear', min: 0, max: data.end_s, title: axisTitle(timeAxisTitle) },
          y: { stacked: true, beginAtZero: true, title: axisTitle('memory (' + unit + ')') },
        },
        plugins: {
          title: title('Device ' + device.device + ': memory by tier over time'),
          subtitle: subtitle(device.samples > times.length
            ? 'downsampled: ' + (times.length - 1) + ' points of ' + device.samples +
              ', each the instant of its bucket when all tiers together held the most'
            : ''),
          tooltip: {
            callbacks: {
              title: (items) => items.length ? items[0].parsed.x.toFixed(3) + ' s' : '',
              label: (item) => item.dataset.label + ': ' + item.parsed.y.toFixed(1) + ' ' + unit,
            },
          },
        },
      },
    });
  }

  // A bar chart of per-bucket figures: `series` is [[label, values, colour]...], each value
  // divided by `scale`; `counts` for whole numbers.
  function bucketChart(device, id, chartTitle, yTitle, series, { scale, note, counts }) {
    const activity = device.activity;
    const decimals = decimalsFor(device.bucket_s);
    return new Chart(document.getElementById(id + '-' + device.device), {
      type: 'bar',
      data: {
        labels: activity.start.map((start) => start.toFixed(decimals)),
        datasets: series.map(([label, values, color]) => ({
          label: label,
          data: values.map((value) => value / scale),
          backgroundColor: color,
        })),
      },
      options: {
        scales: {
          x: { title: axisTitle(timeAxisTitle + ', buckets of ' +
                                device.bucket_s.toPrecision(3) + ' s') },
          y: { beginAtZero: true, title: axisTitle(yTitle), ticks: counts ? { precision: 0 } : {} },
        },
        plugins: { title: title(chartTitle), subtitle: subtitle(note) },
      },
    });
  }

  function movedChart(device) {
    const activity = device.activity;
    const [scale, unit] = unitFor(Math.max(...activity.evicted, ...activity.promoted));
    return bucketChart(device, 'moved', 'Device ' + device.device +
                       ': tiered bytes moved between device and host', 'moved (' + unit + ')', [
      ['evicted to the host', activity.evicted, tierColors['tiered-host']],
      ['promoted to the device', activity.promoted, tierColors['tiered-device']],
    ], { scale: scale, note: '' });
  }

  function eventsChart(device) {
    const activity = device.activity;
    return bucketChart(device, 'events', 'Device ' + device.device +
                              ': requests over the budget and spills', 'count per bucket', [
      ['requests over the budget', activity.refusals, '#59636e'],
      ['spills (allocations placed on the host)', activity.spills, tierColors['spill-host']],
    ], { scale: 1, note: '', counts: true });
  }

  Chart.defaults.animation = false;
  Chart.defaults.responsive = true;
  Chart.defaults.maintainAspectRatio = false;
  Chart.defaults.font.size = 13;
  Chart.defaults.plugins.legend.position = 'bottom';

  // The charts the page has a canvas for: those with something to show (report_json.h).
  const drawers = { bytes: bytesChart, moved: movedChart, events: eventsChart };
  let drawn = 0;
  for (const device of data.devices) {
    for (const chart of device.charts) {
      drawers[chart](device);
      ++drawn;
    }
  }
  document.body.dataset.chartsDrawn = String(drawn);
})();
