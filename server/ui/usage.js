// The usage page: the team's metered use per day as bar charts (inline
// SVG): sandbox cost, CPU used, and the agent runs' model tokens; the
// totals (sandboxes' and models'), and the use per sandbox.

import {api, q} from './api.js';
import {busy, fmtBytes, fmtNum, fmtUSD, h, s, showError} from './dom.js';

const day = 86400000;
const isoDay = (d) => d.toISOString().slice(0, 10);

export async function usageView(ctx) {
  const {main, signal} = ctx;
  const today = new Date(Date.now());
  const from = h('input', {type: 'date', id: 'usage-from', value: isoDay(new Date(today - 13 * day)), required: true});
  const to = h('input', {type: 'date', id: 'usage-to', value: isoDay(today), required: true});
  const show = h('button', {type: 'submit', class: 'primary'}, 'Show');
  const out = h('div', {id: 'usage-out'});
  const form = h('form', {class: 'card row-form', 'aria-label': 'Period'},
    h('div', {class: 'field'}, h('label', {for: 'usage-from'}, 'From'), from),
    h('div', {class: 'field'}, h('label', {for: 'usage-to'}, 'To (included)'), to),
    h('div', {class: 'field end'}, show));
  main.append(h('h1', {}, 'Usage'), form, out);

  const load = async () => {
    const f = new Date(`${from.value}T00:00:00Z`);
    const t = new Date(Date.parse(`${to.value}T00:00:00Z`) + day);
    if (Number.isNaN(f.getTime()) || Number.isNaN(t.getTime()) || t <= f) {
      showError(new Error('pick a start day on or before the end day'), 'Usage');
      return;
    }
    try {
      const rep = await api('GET', `/v1/usage${q({from: f.toISOString(), to: t.toISOString(), by: 'day'})}`, {signal});
      out.replaceChildren(report(rep));
    } catch (e) {
      showError(e, 'Reading usage');
    }
  };
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    busy(show, 'Loading…', load);
  });
  await load();
}

const noModels = {runs: 0, requests: 0, input_tokens: 0, output_tokens: 0, cost_usd: 0};
const tokens = (m) => (m || noModels).input_tokens + (m || noModels).output_tokens;

function report(rep) {
  const t = rep.total;
  const days = rep.days || [];
  const m = rep.models || noModels;
  return h('div', {},
    h('dl', {class: 'totals', id: 'usage-totals'},
      total('Sandbox cost', fmtUSD(t.cost_usd)),
      total('CPU-seconds used', fmtNum(t.cpu_seconds, 1)),
      total('Memory GiB-seconds', fmtNum(t.memory_gib_secs, 0)),
      total('Disk GiB-hours', fmtNum(t.disk_gib_hours, 2)),
      total('Egress', fmtBytes(t.bytes_out)),
      total('Ingress', fmtBytes(t.bytes_in))),
    h('h2', {}, 'Agent runs’ models'),
    h('dl', {class: 'totals', id: 'usage-models'},
      total('Model cost', m.unpriced_runs ? `${fmtUSD(m.cost_usd)} + ${m.unpriced_runs} unpriced` : fmtUSD(m.cost_usd)),
      total('Runs', fmtNum(m.runs, 0)),
      total('Requests', fmtNum(m.requests, 0)),
      total('Input tokens', fmtNum(m.input_tokens, 0)),
      total('Output tokens', fmtNum(m.output_tokens, 0))),
    h('div', {class: 'charts'},
      chart('Sandbox cost per day (USD)', days, (d) => d.cost_usd, fmtUSD, 'chart-cost'),
      chart('CPU-seconds used per day', days, (d) => d.cpu_seconds, (x) => fmtNum(x, 1), 'chart-cpu', (x) => fmtNum(x, 2)),
      chart('Model tokens per day', days, (d) => tokens(d.models), (x) => fmtNum(x, 0), 'chart-tokens'),
      chart('Model cost per day (USD)', days, (d) => (d.models || noModels).cost_usd, fmtUSD, 'chart-model-cost')),
    h('details', {class: 'card'}, h('summary', {}, 'The days as a table'),
      h('div', {class: 'table-wrap'}, h('table', {class: 'list'},
        h('thead', {}, h('tr', {}, ['Day', 'Sandbox cost', 'CPU-seconds', 'Memory GiB-s', 'Disk GiB-h', 'Egress', 'Model tokens', 'Model cost'].map((x) => h('th', {scope: 'col'}, x)))),
        h('tbody', {}, days.map((d) => h('tr', {}, h('td', {}, d.date), h('td', {}, fmtUSD(d.cost_usd)), h('td', {}, fmtNum(d.cpu_seconds, 1)),
          h('td', {}, fmtNum(d.memory_gib_secs, 0)), h('td', {}, fmtNum(d.disk_gib_hours, 2)), h('td', {}, fmtBytes(d.bytes_out)),
          h('td', {}, fmtNum(tokens(d.models), 0)), h('td', {}, fmtUSD((d.models || noModels).cost_usd)))))))),
    h('h2', {}, 'Per sandbox'),
    rep.sandboxes.length === 0 ? h('p', {class: 'muted'}, 'No use in this period.') :
      h('div', {class: 'table-wrap'}, h('table', {class: 'list', id: 'usage-sandboxes'},
        h('thead', {}, h('tr', {}, ['Sandbox', 'Cost', 'CPU-seconds', 'Memory GiB-s', 'Disk GiB-h', 'Egress'].map((x) => h('th', {scope: 'col'}, x)))),
        h('tbody', {}, rep.sandboxes.slice().sort((a, b) => b.cost_usd - a.cost_usd).map((u) => h('tr', {},
          h('td', {}, h('a', {href: `#/sandboxes/${encodeURIComponent(u.sandbox_id)}`}, u.sandbox_id)),
          h('td', {}, fmtUSD(u.cost_usd)), h('td', {}, fmtNum(u.cpu_seconds, 1)), h('td', {}, fmtNum(u.memory_gib_secs, 0)),
          h('td', {}, fmtNum(u.disk_gib_hours, 2)), h('td', {}, fmtBytes(u.bytes_out))))))));
}

function total(name, value) {
  return h('div', {}, h('dt', {}, name), h('dd', {}, value));
}

// niceMax rounds a chart's top up to 1, 2 or 5 times a power of ten.
function niceMax(x) {
  if (!(x > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(x));
  for (const m of [1, 2, 5, 10]) if (m * p >= x) return m * p;
  return 10 * p;
}

// chart is a bar chart of one figure per day, drawn as SVG.
function chart(title, days, value, fmt, id, axisFmt = fmt) {
  const W = 640;
  const H = 220;
  const pad = {l: 64, r: 12, t: 12, b: 36};
  const iw = W - pad.l - pad.r;
  const ih = H - pad.t - pad.b;
  const max = niceMax(Math.max(0, ...days.map(value)));
  const bw = days.length ? iw / days.length : iw;
  const y = (v) => pad.t + ih - (v / max) * ih;
  const grid = [0, 0.5, 1].map((f) => [
    s('line', {x1: pad.l, x2: W - pad.r, y1: y(max * f), y2: y(max * f), class: 'grid'}),
    s('text', {x: pad.l - 6, y: y(max * f) + 4, 'text-anchor': 'end', class: 'axis'}, axisFmt(max * f)),
  ]);
  const every = Math.ceil(days.length / 10);
  const bars = days.map((d, i) => {
    const v = value(d);
    const x = pad.l + i * bw;
    return s('g', {},
      s('rect', {x: x + bw * 0.15, width: Math.max(1, bw * 0.7), y: y(v), height: Math.max(0, pad.t + ih - y(v)), class: 'bar'},
        s('title', {}, `${d.date}: ${fmt(v)}`)),
      i % every === 0 ? s('text', {x: x + bw / 2, y: H - pad.b + 16, 'text-anchor': 'middle', class: 'axis'}, d.date.slice(5)) : null);
  });
  const sum = days.reduce((a, d) => a + value(d), 0);
  return h('figure', {class: 'card chart', id},
    h('figcaption', {}, title),
    s('svg', {viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': `${title}: ${days.length} days, ${fmt(sum)} in all, at most ${fmt(Math.max(0, ...days.map(value)))} a day`},
      grid, bars, s('line', {x1: pad.l, x2: W - pad.r, y1: pad.t + ih, y2: pad.t + ih, class: 'baseline'})));
}
