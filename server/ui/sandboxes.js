// The sandboxes list and the sandbox page (console, terminal, files).

import {api, q, sizes} from './api.js';
import {busy, confirmButton, fmtAge, fmtBytes, fmtDuration, fmtNum, fmtUSD, h, showError, showNotice} from './dom.js';
import {consolePanel} from './console.js';
import {terminalPanel} from './terminal.js';
import {filesPanel} from './files.js';

const path = (id) => `/v1/sandboxes/${encodeURIComponent(id)}`;

export function sizeText(sb) {
  return `${fmtNum(sb.cpus, 2)} CPU · ${fmtBytes(sb.memory_bytes)} · ${fmtBytes(sb.disk_bytes)} disk`;
}

// ttlLeft says how long a running sandbox has before it expires.
export function ttlLeft(sb) {
  if (sb.state !== 'running') return '—';
  if (!sb.deadline) return 'no TTL';
  const ms = Date.parse(sb.deadline) - Date.now();
  if (ms <= 0) return 'expiring';
  return fmtDuration(ms).replace(/ \d+ s$/, '');
}

// stateBadge shows a sandbox's state; a stopped one that kept its
// memory is paused.
function stateBadge(sb) {
  const state = sb.paused ? 'paused' : sb.state;
  return h('span', {class: `badge state-${state}`}, state);
}

// tierText is a sandbox's isolation tier.
const tierText = (sb) => sb.isolation || 'native';

// lifecycleButton POSTs op (stop, resume) to the sandbox; done gets the
// new record.
function lifecycleButton(sb, op, label, doing, done, attrs) {
  const b = h('button', {type: 'button', ...attrs}, label);
  b.addEventListener('click', () => busy(b, `${doing}…`, async () => {
    try {
      done(await api('POST', `${path(sb.id)}/${op}`));
    } catch (e) {
      showError(e, `${doing} ${sb.id}`);
    }
  }));
  return b;
}

// sandboxActions are the stop/resume/delete buttons; done runs after a
// change with the new record (null when deleted).
function sandboxActions(sb, done) {
  const del = confirmButton('Delete', async () => {
    try {
      await api('DELETE', path(sb.id));
      showNotice(`Deleted ${sb.id}.`);
      done(null);
    } catch (e) {
      showError(e, `Deleting ${sb.id}`);
    }
  }, {class: 'danger', 'aria-label': `Delete ${sb.id}`});
  // Pause keeps a gvisor sandbox's processes and memory; on native it
  // would be Stop, which is offered already.
  const pause = sb.state === 'running' && sb.isolation === 'gvisor'
    ? [lifecycleButton(sb, 'pause', 'Pause', 'Pausing', done, {'aria-label': `Pause ${sb.id}`, title: 'Stop it keeping its processes and memory'})]
    : [];
  return h('span', {class: 'actions'},
    ...pause,
    sb.state === 'running'
      ? lifecycleButton(sb, 'stop', 'Stop', 'Stopping', done, {'aria-label': `Stop ${sb.id}`})
      : lifecycleButton(sb, 'resume', 'Resume', 'Resuming', done, {'aria-label': `Resume ${sb.id}`}),
    del);
}

// ---- the list ----

export async function sandboxesView(ctx) {
  const {main, signal} = ctx;
  const templates = h('datalist', {id: 'new-template-list'});
  const template = h('input', {id: 'new-template', name: 'template', list: 'new-template-list', placeholder: 'host (the default)', autocomplete: 'off'});
  const size = h('select', {id: 'new-size', name: 'size'},
    Object.entries(sizes).map(([name, z]) => h('option', {value: name}, `${name} — ${z.cpus} CPU, ${fmtBytes(z.memory)}, ${fmtBytes(z.disk)} disk`)));
  const ttl = h('select', {id: 'new-ttl', name: 'ttl'},
    [['', 'server default'], [1800, '30 minutes'], [3600, '1 hour'], [4 * 3600, '4 hours'], [86400, '1 day'], [7 * 86400, '7 days']]
      .map(([v, label]) => h('option', {value: v}, label)));
  const isolation = h('select', {id: 'new-isolation', name: 'isolation'},
    h('option', {value: ''}, 'native — the host’s kernel (fastest)'),
    h('option', {value: 'gvisor'}, 'gvisor — gVisor’s kernel; pause keeps memory'));
  const create = h('button', {type: 'submit', class: 'primary', id: 'create'}, 'Create sandbox');
  const form = h('form', {class: 'card row-form', id: 'create-form', 'aria-label': 'Create a sandbox'},
    h('div', {class: 'field'}, h('label', {for: 'new-template'}, 'Template'), template, templates),
    h('div', {class: 'field'}, h('label', {for: 'new-size'}, 'Size'), size),
    h('div', {class: 'field'}, h('label', {for: 'new-ttl'}, 'Stops after'), ttl),
    h('div', {class: 'field'}, h('label', {for: 'new-isolation'}, 'Isolation'), isolation),
    h('div', {class: 'field end'}, create));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    busy(create, 'Creating…', async () => {
      try {
        const body = {size: size.value};
        if (template.value.trim()) body.template = template.value.trim();
        if (ttl.value) body.ttl_seconds = Number(ttl.value);
        if (isolation.value) body.isolation = isolation.value;
        const sb = await api('POST', '/v1/sandboxes', {body});
        location.hash = `#/sandboxes/${encodeURIComponent(sb.id)}`;
      } catch (err) {
        showError(err, 'Creating a sandbox');
      }
    });
  });

  const refresh = h('button', {type: 'button'}, 'Refresh');
  const tbody = h('tbody');
  const table = h('table', {class: 'list', id: 'sandboxes'},
    h('caption', {class: 'sr-only'}, 'Your team’s sandboxes'),
    h('thead', {}, h('tr', {}, ['Sandbox', 'State', 'Tier', 'Template', 'Size', 'Age', 'TTL left', 'Usage this month', 'Actions'].map((t) => h('th', {scope: 'col'}, t)))),
    tbody);
  const empty = h('p', {class: 'muted', hidden: true}, 'No sandboxes yet: create one above.');
  const more = h('button', {type: 'button', hidden: true}, 'Load more');
  main.append(
    h('div', {class: 'title-row'}, h('h1', {}, 'Sandboxes'), refresh),
    form, h('div', {class: 'table-wrap'}, table), empty, more);

  let rows = [];
  let usage = {};
  let cursor = '';

  const row = (sb) => {
    const u = usage[sb.id];
    const tr = h('tr', {'data-id': sb.id},
      h('td', {}, h('a', {href: `#/sandboxes/${encodeURIComponent(sb.id)}`}, sb.id)),
      h('td', {}, stateBadge(sb)),
      h('td', {class: 'tier'}, tierText(sb)),
      h('td', {}, sb.template),
      h('td', {}, sizeText(sb)),
      h('td', {class: 'age', title: sb.created_at}, fmtAge(sb.created_at)),
      h('td', {class: 'ttl'}, ttlLeft(sb)),
      h('td', {}, u ? `${fmtNum(u.cpu_seconds, 1)} CPU·s · ${fmtUSD(u.cost_usd)}` : '—'),
      h('td', {}, sandboxActions(sb, () => load(true))));
    tr.sandbox = sb;
    return tr;
  };

  async function load(reset) {
    try {
      const [list, rep] = await Promise.all([
        api('GET', `/v1/sandboxes${q({limit: 100, cursor: reset ? '' : cursor})}`, {signal}),
        reset ? api('GET', '/v1/usage', {signal}).catch((e) => {
          // A sign-out (the list's 401) aborts it: no error of its own.
          if (!signal.aborted) showError(e, 'Reading usage');
          return null;
        }) : null,
      ]);
      if (rep) usage = Object.fromEntries(rep.sandboxes.map((u) => [u.sandbox_id, u]));
      rows = reset ? list.sandboxes : rows.concat(list.sandboxes);
      cursor = list.next_cursor || '';
      tbody.replaceChildren(...rows.map(row));
      empty.hidden = rows.length > 0;
      table.hidden = rows.length === 0;
      more.hidden = !cursor;
    } catch (e) {
      showError(e, 'Listing sandboxes');
    }
  }
  refresh.addEventListener('click', () => busy(refresh, 'Refreshing…', () => load(true)));
  // The template field offers the server's templates; any name can
  // still be typed (the server says when it does not know it).
  api('GET', '/v1/templates', {signal}).then((list) => {
    templates.replaceChildren(...list.templates.map((t) => h('option', {value: t.name},
      t.created_at ? `made ${fmtAge(t.created_at)} ago` : 'the host’s own system')));
    // A server without gVisor's runsc says so: the tier is offered, but
    // disabled with the reason, rather than refused after a click.
    if (list.isolations && !list.isolations.includes('gvisor')) {
      const opt = isolation.querySelector('option[value="gvisor"]');
      opt.disabled = true;
      opt.textContent = 'gvisor — not installed on this server (runsc)';
    }
  }).catch(() => {});
  more.addEventListener('click', () => busy(more, 'Loading…', () => load(false)));
  // Ages and TTLs count down without asking the server again.
  const tick = setInterval(() => {
    for (const tr of tbody.children) {
      tr.querySelector('.age').textContent = fmtAge(tr.sandbox.created_at);
      tr.querySelector('.ttl').textContent = ttlLeft(tr.sandbox);
    }
  }, 1000);
  ctx.onLeave(() => clearInterval(tick));
  await load(true);
}

// ---- one sandbox ----

export async function sandboxView(ctx, id) {
  const {main, signal} = ctx;
  let sb;
  try {
    sb = await api('GET', path(id), {signal});
  } catch (e) {
    if (e.name === 'AbortError') return;
    showError(e);
    main.append(h('h1', {}, `Sandbox ${id}`),
      h('div', {class: 'card problem', id: 'sandbox-missing'},
        h('p', {}, e.status === 404
          ? `There is no sandbox ${id} for this key: it may have expired and been deleted, or belong to another team.`
          : `This sandbox cannot be shown: ${e.message}`),
        h('p', {}, h('a', {href: '#/sandboxes'}, 'Back to the sandboxes'))));
    return;
  }

  const header = h('div', {class: 'title-row'});
  const facts = h('dl', {class: 'facts'});
  const body = h('div', {id: 'sandbox-body'});
  main.append(header, facts, body);

  const show = (rec) => {
    if (rec === null) {
      location.hash = '#/sandboxes';
      return;
    }
    sb = rec;
    header.replaceChildren(
      h('h1', {}, sb.id, ' ', stateBadge(sb)),
      h('span', {class: 'actions'},
        h('a', {class: 'button', href: `#/chat?sandbox=${encodeURIComponent(sb.id)}`}, 'Chat with an agent here'),
        sandboxActions(sb, show)));
    facts.replaceChildren(
      ...fact('Template', sb.template), ...fact('Isolation', tierText(sb)), ...fact('Size', sizeText(sb)), ...fact('Workspace', h('code', {}, sb.root)),
      ...fact('Created', h('span', {id: 'created-age', title: sb.created_at}, `${fmtAge(sb.created_at)} ago`)), ...fact('TTL left', h('span', {id: 'ttl-left'}, ttlLeft(sb))),
      ...(sb.idle_timeout_seconds ? fact('Idle timeout', fmtDuration(sb.idle_timeout_seconds * 1000)) : []),
      ...fact('On expiry', sb.on_expire));
    renderBody();
  };

  let panels = null;
  const renderBody = () => {
    if (sb.state !== 'running') {
      panels = null;
      const resume = lifecycleButton(sb, 'resume', 'Resume', 'Resuming', show, {class: 'primary'});
      const what = sb.paused
        ? 'This sandbox is paused with its processes and memory. Resume it and they carry on where they were.'
        : 'This sandbox is stopped (its disk is kept). Resume it to run commands and browse its files.';
      body.replaceChildren(h('div', {class: 'card problem', id: 'sandbox-stopped'}, h('p', {}, what), resume));
      return;
    }
    if (panels) return; // running, and already shown
    panels = tabs(ctx, [
      {id: 'console', label: 'Console', make: () => consolePanel(ctx, sb)},
      {id: 'terminal', label: 'Terminal', make: () => terminalPanel(ctx, sb)},
      {id: 'files', label: 'Files', make: () => filesPanel(ctx, sb)},
    ], ctx.params.get('tab'));
    body.replaceChildren(panels);
  };
  show(sb);
  const tick = setInterval(() => {
    const el = document.getElementById('ttl-left');
    if (el) el.textContent = ttlLeft(sb);
    const age = document.getElementById('created-age');
    if (age) age.textContent = `${fmtAge(sb.created_at)} ago`;
  }, 1000);
  ctx.onLeave(() => clearInterval(tick));
}

function fact(name, value) {
  return [h('dt', {}, name), h('dd', {}, value)];
}

// tabs is an ARIA tab list; panels are made the first time they are shown.
export function tabs(ctx, list, initial) {
  const bar = h('div', {role: 'tablist', class: 'tabs'});
  const wrap = h('div', {class: 'tabbed'}, bar);
  const made = {};
  const buttons = list.map((t, i) => {
    const b = h('button', {type: 'button', role: 'tab', id: `tab-${t.id}`, 'aria-controls': `panel-${t.id}`, 'aria-selected': 'false', tabindex: '-1'}, t.label);
    b.addEventListener('click', () => select(t.id));
    b.addEventListener('keydown', (e) => {
      const d = e.key === 'ArrowRight' ? 1 : e.key === 'ArrowLeft' ? -1 : 0;
      if (!d) return;
      e.preventDefault();
      const next = list[(i + d + list.length) % list.length];
      select(next.id);
      document.getElementById(`tab-${next.id}`).focus();
    });
    bar.append(b);
    return b;
  });
  const select = (id) => {
    list.forEach((t, i) => {
      const on = t.id === id;
      buttons[i].setAttribute('aria-selected', String(on));
      buttons[i].tabIndex = on ? 0 : -1;
      if (on && !made[t.id]) {
        made[t.id] = h('section', {role: 'tabpanel', id: `panel-${t.id}`, 'aria-labelledby': `tab-${t.id}`}, t.make());
        wrap.append(made[t.id]);
      }
      if (made[t.id]) made[t.id].hidden = !on;
      if (on && made[t.id] && made[t.id].firstChild && made[t.id].firstChild.onShow) made[t.id].firstChild.onShow();
    });
  };
  select(list.some((t) => t.id === initial) ? initial : list[0].id);
  return wrap;
}
