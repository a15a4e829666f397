// The chat: agent runs on the server (POST /v1/runs), their timeline
// followed live from GET /v1/runs/{id}/events (Server-Sent Events, read
// with fetch since EventSource cannot send the key), approvals,
// follow-up messages, cancel, and the files the agent produced.

import {api, q, request, sse} from './api.js';
import {busy, fmtAge, fmtBytes, fmtDuration, fmtNum, fmtUSD, h, showError, showNotice, clearError} from './dom.js';
import {OutputView} from './outview.js';
import {download, fileViewer, kindOf} from './files.js';
import {renderMarkdown} from './markdown.js';

const runPath = (id) => `/v1/runs/${encodeURIComponent(id)}`;
const stopped = new Set(['idle', 'failed', 'cancelled']);
const settingsKey = 'cove.agentSettings';
// autoShowBytes is the largest artifact shown without a click.
const autoShowBytes = 4 << 20;

function statusBadge(status) {
  return h('span', {class: `badge run-${status}`, id: 'run-status'}, status);
}

// ---- the chat page: a new run and the past ones ----

export async function chatView(ctx) {
  const {main, signal, params} = ctx;
  const saved = JSON.parse(localStorage.getItem(settingsKey) || '{}');
  const workspace = h('select', {id: 'workspace', name: 'workspace'},
    h('option', {value: ''}, 'A new workspace (a new small sandbox)'));
  const task = h('textarea', {id: 'task', name: 'task', rows: 4, required: true, placeholder: 'Write a script that prints the first 10 primes, run it, and save the output to primes.txt'});
  const model = h('input', {id: 'model', value: saved.model || '', placeholder: 'server default', autocomplete: 'off'});
  const baseURL = h('input', {id: 'base-url', value: saved.base_url || '', placeholder: 'server default (OpenAI)', autocomplete: 'off', spellcheck: 'false'});
  const apiKind = h('select', {id: 'api-kind'}, [['', 'pick for me'], ['responses', 'Responses'], ['chat', 'Chat Completions']]
    .map(([v, l]) => h('option', {value: v, selected: saved.api === v}, l)));
  const secret = h('input', {id: 'key-secret', value: saved.api_key_secret || '', placeholder: 'OPENAI_API_KEY', autocomplete: 'off'});
  const approval = h('select', {id: 'approval'}, [['risky', 'risky calls (default)'], ['all', 'every call'], ['never', 'never']]
    .map(([v, l]) => h('option', {value: v, selected: (saved.approval || 'risky') === v}, l)));
  const instructions = h('textarea', {id: 'instructions', rows: 2, placeholder: 'the default instructions'}, saved.instructions || '');
  const start = h('button', {type: 'submit', class: 'primary', id: 'start-run'}, 'Start');
  const form = h('form', {class: 'card', id: 'new-run'},
    h('h2', {}, 'New task'),
    h('div', {class: 'field'}, h('label', {for: 'workspace'}, 'Workspace'), workspace),
    h('div', {class: 'field'}, h('label', {for: 'task'}, 'Task'), task),
    h('details', {class: 'settings'}, h('summary', {}, 'Agent settings'),
      h('div', {class: 'grid2'},
        h('div', {class: 'field'}, h('label', {for: 'model'}, 'Model'), model),
        h('div', {class: 'field'}, h('label', {for: 'base-url'}, 'Model server URL (OpenAI-compatible)'), baseURL),
        h('div', {class: 'field'}, h('label', {for: 'api-kind'}, 'API'), apiKind),
        h('div', {class: 'field'}, h('label', {for: 'key-secret'}, 'Team secret with the model key'), secret),
        h('div', {class: 'field'}, h('label', {for: 'approval'}, 'Ask before running'), approval),
        h('div', {class: 'field'}, h('label', {for: 'instructions'}, 'Instructions'), instructions))),
    h('p', {class: 'muted small'}, 'Ctrl+Enter starts the task.'),
    start);
  task.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) form.requestSubmit();
  });
  const remembered = savedSettingsLine(form, {model, baseURL, apiKind, secret, approval, instructions});
  form.insertBefore(remembered, form.querySelector('details.settings'));
  const modelNotice = h('div', {id: 'model-notice', hidden: true});
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const input = task.value.trim();
    if (!input) {
      showError(new Error('write a task for the agent first'), 'Chat');
      task.focus();
      return;
    }
    const agent = {model: model.value.trim(), base_url: baseURL.value.trim(), api: apiKind.value, api_key_secret: secret.value.trim(),
      approval: approval.value, instructions: instructions.value.trim()};
    localStorage.setItem(settingsKey, JSON.stringify(agent));
    for (const k of Object.keys(agent)) if (!agent[k]) delete agent[k];
    const body = {agent, input};
    if (workspace.value) body.sandbox_id = workspace.value;
    else body.sandbox = {size: 'small'};
    busy(start, 'Starting…', async () => {
      try {
        const run = await api('POST', '/v1/runs', {body});
        location.hash = `#/runs/${encodeURIComponent(run.id)}`;
      } catch (err) {
        showError(err, 'Starting the run');
      }
    });
  });

  const tbody = h('tbody');
  const table = h('table', {class: 'list', id: 'runs'},
    h('thead', {}, h('tr', {}, ['Run', 'Status', 'Task', 'Sandbox', 'Started', 'Cost'].map((t) => h('th', {scope: 'col'}, t)))), tbody);
  const none = h('p', {class: 'muted', hidden: true}, 'No runs yet.');
  const more = h('button', {type: 'button', hidden: true}, 'Load more');
  main.append(h('h1', {}, 'Chat with an agent'), modelNotice, form, h('h2', {}, 'Past runs'), h('div', {class: 'table-wrap'}, table), none, more);

  // Whether runs have a model, said before Start rather than by a failed run.
  api('GET', '/v1/model', {signal}).then((info) => {
    if (info.configured) {
      model.placeholder = `${info.model} (the server's default)`;
      return;
    }
    modelNotice.replaceWith(noModelCard(info));
  }).catch((e) => e.name !== 'AbortError' && showError(e, 'Asking the server about its model'));

  // The workspaces: the team's running sandboxes.
  api('GET', '/v1/sandboxes?state=running&limit=200', {signal}).then((list) => {
    for (const sb of list.sandboxes) workspace.append(h('option', {value: sb.id}, `${sb.id} (${sb.template}, ${fmtAge(sb.created_at)} old)`));
    const want = params.get('sandbox');
    if (want) {
      if (![...workspace.options].some((o) => o.value === want)) workspace.append(h('option', {value: want}, want));
      workspace.value = want;
    }
  }).catch((e) => showError(e, 'Listing the workspaces'));

  let next = '';
  const load = async (reset) => {
    try {
      const list = await api('GET', `/v1/runs${q({cursor: reset ? '' : next})}`, {signal});
      const rows = (list.runs || []).map((r) => h('tr', {},
        h('td', {}, h('a', {href: `#/runs/${encodeURIComponent(r.id)}`}, r.id)),
        h('td', {}, h('span', {class: `badge run-${r.status}`}, r.status)),
        h('td', {class: 'clip', title: r.input}, r.input),
        h('td', {}, r.sandbox_id ? h('a', {href: `#/sandboxes/${encodeURIComponent(r.sandbox_id)}`}, r.sandbox_id) : '—'),
        h('td', {title: r.created_at}, `${fmtAge(r.created_at)} ago`),
        h('td', {}, r.cost_usd !== undefined && r.cost_usd !== null ? fmtUSD(r.cost_usd) : '—')));
      if (reset) tbody.replaceChildren(...rows);
      else tbody.append(...rows);
      next = list.next || '';
      more.hidden = !next;
      none.hidden = tbody.children.length > 0;
      table.hidden = tbody.children.length === 0;
    } catch (e) {
      showError(e, 'Listing runs');
    }
  };
  more.addEventListener('click', () => busy(more, 'Loading…', () => load(false)));
  await load(true);
  if (!params.get('sandbox')) task.focus();
}

// sentence is text with a capital first letter and a full stop.
const sentence = (t) => t.charAt(0).toUpperCase() + t.slice(1) + (/[.!?]$/.test(t) ? '' : '.');

// noModelCard says that runs have no model, and the ways to fix it on
// this server (GET /v1/model's fix list: "what to do: the command").
function noModelCard(info) {
  const fixes = (info.fix || []).map((f) => {
    const i = f.indexOf(': ');
    return h('li', {}, i < 0 ? f : [f.slice(0, i + 2), h('code', {}, f.slice(i + 2))]);
  });
  return h('div', {class: 'card problem', id: 'no-model', role: 'alert'},
    h('h2', {}, 'No model is configured for agent runs'),
    h('p', {}, sentence(info.problem || 'this server has no model for agent runs')),
    h('p', {}, 'To fix it:'), h('ul', {}, fixes),
    h('p', {}, h('a', {href: '#/settings'}, 'Open the Settings page'), ' to save a team secret, or give your own model server under Agent settings below.'));
}

// savedSettingsLine shows the agent settings the form took from the last
// run (they are remembered in this browser), with a way to change them
// or go back to the server's defaults: never reused unseen.
function savedSettingsLine(form, f) {
  const text = h('span', {id: 'saved-settings-text'});
  const change = h('button', {type: 'button', class: 'link', id: 'saved-settings-change'}, 'Change');
  const reset = h('button', {type: 'button', class: 'link', id: 'saved-settings-reset'}, 'Use the defaults');
  const line = h('p', {class: 'saved-settings', id: 'saved-settings', hidden: true}, text, ' ', change, ' ', reset);
  const describe = () => {
    const parts = [];
    if (f.model.value.trim()) parts.push(`model ${f.model.value.trim()}`);
    if (f.baseURL.value.trim()) parts.push(`model server ${f.baseURL.value.trim()}`);
    if (f.apiKind.value) parts.push(`${f.apiKind.value} API`);
    if (f.secret.value.trim()) parts.push(`key from the secret ${f.secret.value.trim()}`);
    if (f.approval.value !== 'risky') parts.push(`ask before: ${f.approval.value === 'all' ? 'every call' : 'never'}`);
    if (f.instructions.value.trim()) parts.push('your own instructions');
    line.hidden = parts.length === 0;
    text.textContent = `Using your last settings: ${parts.join(', ')}.`;
  };
  change.addEventListener('click', () => {
    const d = form.querySelector('details.settings');
    d.open = true;
    f.model.focus();
  });
  reset.addEventListener('click', () => {
    for (const el of [f.model, f.baseURL, f.apiKind, f.secret, f.instructions]) el.value = '';
    f.approval.value = 'risky';
    localStorage.removeItem(settingsKey);
    describe();
  });
  for (const el of Object.values(f)) el.addEventListener('input', describe);
  describe();
  return line;
}

// ---- one run ----

export async function runView(ctx, id) {
  const {main, signal} = ctx;
  let run;
  try {
    run = await api('GET', runPath(id), {signal});
  } catch (e) {
    if (e.name === 'AbortError') return;
    showError(e);
    main.append(h('h1', {}, `Run ${id}`), h('div', {class: 'card problem', id: 'run-missing'},
      h('p', {}, e.status === 404 ? `There is no run ${id} for this key.` : `This run cannot be shown: ${e.message}`),
      h('p', {}, h('a', {href: '#/chat'}, 'Back to the chat'))));
    return;
  }

  const badge = h('span', {}, statusBadge(run.status));
  const meta = h('dl', {class: 'facts', id: 'run-meta'});
  const cancel = h('button', {type: 'button', id: 'cancel-run', class: 'danger'}, 'Cancel');
  const timeline = h('div', {class: 'timeline', id: 'timeline', role: 'log', 'aria-label': 'What the agent did'});
  const artifacts = h('ul', {class: 'artifacts'});
  const artifactBox = h('section', {class: 'card', id: 'artifacts', hidden: true}, h('h2', {}, 'Artifacts'), artifacts);
  const followInput = h('textarea', {id: 'followup', rows: 3, placeholder: 'Ask a follow-up in the same workspace'});
  const send = h('button', {type: 'submit', class: 'primary', id: 'send-followup'}, 'Send');
  const followForm = h('form', {class: 'card followup', id: 'followup-form'},
    h('label', {for: 'followup'}, 'Follow-up'), followInput, h('div', {class: 'inline'}, send, h('span', {class: 'muted small', id: 'followup-help'}, '')));
  main.append(
    h('div', {class: 'title-row'}, h('h1', {}, `Run ${run.id} `, badge), h('span', {class: 'actions'}, h('a', {class: 'button', href: '#/chat'}, 'New task'), cancel)),
    meta, timeline, artifactBox, followForm);

  // The header follows the run: usage events after each model call, the
  // time the agent worked (its segments, summed) ticking while it works.
  let usedModel = '';
  const elapsed = h('dd', {id: 'run-elapsed'});
  let segStart = Date.parse(run.created_at);
  let segEnd = run.finished_at ? Date.parse(run.finished_at) : null;
  let evStatus = ''; // the status the log last said
  let worked = 0; // ms the agent worked in the segments before the current one
  const started = h('dd', {title: run.created_at, id: 'run-started'});
  const showElapsed = () => {
    started.textContent = `${fmtAge(run.created_at)} ago`;
    const working = run.status === 'running' || segEnd === null;
    const ms = worked + Math.max(0, (working ? Date.now() : segEnd) - segStart);
    elapsed.textContent = working && ms < 60000 ? `${Math.floor(ms / 1000)} s` : fmtDuration(ms);
  };
  const ticker = setInterval(() => {
    showElapsed();
  }, 1000);
  ctx.onLeave(() => clearInterval(ticker));
  const showMeta = () => {
    const u = run.usage || {};
    const cost = run.cost_usd !== undefined && run.cost_usd !== null ? fmtUSD(run.cost_usd) : u.requests ? 'unknown for this model' : '—';
    meta.replaceChildren(
      h('dt', {}, 'Workspace'), h('dd', {}, run.sandbox_id ? h('a', {href: `#/sandboxes/${encodeURIComponent(run.sandbox_id)}`}, run.sandbox_id) : '—'),
      h('dt', {}, 'Model'), h('dd', {id: 'run-model'}, run.agent?.model || usedModel || '—'),
      h('dt', {}, 'Tokens'), h('dd', {id: 'run-tokens'}, `${fmtNum(u.input_tokens || 0, 0)} in${u.cached_tokens ? ` (${fmtNum(u.cached_tokens, 0)} cached)` : ''} · ${fmtNum(u.output_tokens || 0, 0)} out · ${u.requests || 0} request${u.requests === 1 ? '' : 's'}`),
      h('dt', {}, 'Cost'), h('dd', {id: 'run-cost'}, cost),
      h('dt', {}, 'Elapsed'), elapsed,
      h('dt', {}, 'Started'), started);
    showElapsed();
  };
  const onUsage = (ev) => {
    const u = ev.usage || {};
    run.usage = {requests: u.requests || 0, input_tokens: u.input_tokens || 0, cached_tokens: u.cached_input_tokens || 0,
      output_tokens: u.output_tokens || 0, reasoning_tokens: u.reasoning_tokens || 0};
    run.cost_usd = ev.cost_usd ?? null;
    if (ev.model) usedModel = ev.model;
    showMeta();
  };
  const setStatus = (status) => {
    run.status = status;
    badge.replaceChildren(statusBadge(status));
    cancel.disabled = stopped.has(status);
    const canSend = stopped.has(status);
    followInput.disabled = !canSend;
    send.disabled = !canSend;
    document.getElementById('followup-help').textContent = canSend ? 'Ctrl+Enter sends.' :
      status === 'waiting' ? 'Decide the approvals above first.' : 'The agent is working; you can write your next message once it answers.';
  };
  showMeta();
  setStatus(run.status);

  const refreshRun = async () => {
    try {
      run = {...run, ...(await api('GET', runPath(id), {signal}))};
      showMeta();
      setStatus(run.status);
    } catch (e) {
      showError(e, 'Reading the run');
    }
  };

  // ---- the timeline ----
  let bubble = null; // the assistant message being streamed
  let lastMessage = null; // the last complete one
  const calls = new Map(); // call_id -> {card, writer, status, started}
  let lastCall = null;
  const cards = new Map(); // call_id -> approval card
  let pending = new Map(); // call_id -> decision, for the approvals shown as waiting

  const push = (el) => {
    const atBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
    timeline.append(el);
    if (atBottom && !replaying) el.scrollIntoView({block: 'nearest'});
  };
  let replaying = true;

  const assistant = () => {
    if (!bubble) {
      const text = h('div', {class: 'text'});
      bubble = h('div', {class: 'msg assistant'}, h('div', {class: 'who'}, 'Agent'), text);
      bubble.text = text;
      push(bubble);
    }
    return bubble;
  };

  // The Artifacts panel: each file the run made or changed, newest state
  // shown (images and PDFs inline, CSV as a table, anything else to
  // download or show as text); a deleted file leaves it. Renders are
  // coalesced, so a replay of a file written ten times fetches it once.
  const artifactItems = new Map(); // path -> {item, body, kind}
  const toRender = new Set();
  let renderTimer = 0;
  const renderArtifacts = () => {
    renderTimer = 0;
    for (const p of toRender) {
      const a = artifactItems.get(p);
      if (!a || a.kind === 'other') continue;
      fileViewer(run.sandbox_id, p, signal, ctx.onLeave).then((el) => a.body.replaceChildren(el))
        .catch((e) => e.name !== 'AbortError' && a.body.replaceChildren(h('p', {class: 'error-text'}, `Cannot show it: ${e.message}`)));
    }
    toRender.clear();
  };
  const addArtifact = (p, action, size) => {
    if (!p || !run.sandbox_id) return;
    const known = artifactItems.get(p);
    if (action === 'deleted') {
      if (known) known.item.remove();
      artifactItems.delete(p);
      artifactBox.hidden = artifactItems.size === 0;
      return;
    }
    if (!known) {
      // A large file is fetched only when asked for.
      const kind = size > autoShowBytes ? 'other' : kindOf(p);
      const body = h('div', {class: 'artifact-body'});
      const dl = h('button', {type: 'button', 'aria-label': `Download ${p}`}, 'Download');
      dl.addEventListener('click', () => download(run.sandbox_id, p));
      const item = h('li', {'data-path': p, 'data-kind': kind}, h('div', {class: 'inline'}, h('code', {}, p), dl), body);
      if (kind === 'other') {
        const show = h('button', {type: 'button'}, 'Show');
        show.addEventListener('click', () => busy(show, 'Loading…', async () => {
          try {
            body.replaceChildren(await fileViewer(run.sandbox_id, p, signal, ctx.onLeave));
          } catch (e) {
            showError(e, `Opening ${p}`);
          }
        }));
        item.firstChild.append(show);
      }
      artifactItems.set(p, {item, body, kind});
      artifacts.append(item);
      artifactBox.hidden = false;
    }
    if (size > autoShowBytes) return;
    toRender.add(p);
    if (!renderTimer) renderTimer = setTimeout(renderArtifacts, 100);
  };
  ctx.onLeave(() => clearTimeout(renderTimer));

  const decide = async (callID, decision) => {
    pending.set(callID, decision);
    const card = cards.get(callID);
    if (card) card.decided(decision === 'approve' ? 'Approved' : 'Rejected', true);
    const open = [...pending.values()].filter((d) => !d).length;
    if (open > 0) {
      if (card) card.note(`Decide the other ${open} call${open > 1 ? 's' : ''} to go on.`);
      return;
    }
    const decisions = [...pending.entries()].map(([call_id, d]) => ({call_id, decision: d}));
    try {
      await api('POST', `${runPath(id)}/approvals`, {body: {decisions}});
      pending = new Map();
      for (const {call_id, decision: d} of decisions) cards.get(call_id)?.decided(d === 'approve' ? 'Approved' : 'Rejected', false);
      setStatus('running');
    } catch (e) {
      showError(e, 'Sending the decisions');
      for (const {call_id} of decisions) {
        pending.set(call_id, '');
        cards.get(call_id)?.reopen();
      }
    }
  };

  const approvalCard = (a) => {
    let summary = a.command;
    if (!summary && a.arguments) {
      try {
        const args = JSON.parse(a.arguments);
        summary = args.cmd || args.command || null;
      } catch {
        // apply_patch and other tools take free text
      }
    }
    const approve = h('button', {type: 'button', class: 'primary approve'}, 'Approve');
    const reject = h('button', {type: 'button', class: 'danger reject'}, 'Reject');
    const state = h('span', {class: 'muted', role: 'status'});
    const buttons = h('div', {class: 'inline'}, approve, reject, state);
    const card = h('div', {class: 'event approval', 'data-call': a.call_id},
      h('div', {class: 'head'}, h('strong', {}, 'Approval needed: '), a.tool, a.reason ? h('span', {class: 'muted'}, ` — ${a.reason}`) : null),
      summary ? h('pre', {class: 'cmd'}, summary) : h('pre', {class: 'args'}, a.arguments || ''),
      buttons);
    approve.setAttribute('aria-label', `Approve ${a.tool}${summary ? `: ${summary}` : ''}`);
    reject.setAttribute('aria-label', `Reject ${a.tool}${summary ? `: ${summary}` : ''}`);
    approve.addEventListener('click', () => decide(a.call_id, 'approve'));
    reject.addEventListener('click', () => decide(a.call_id, 'reject'));
    card.decided = (text, sending) => {
      approve.disabled = reject.disabled = true;
      approve.hidden = reject.hidden = !sending;
      state.textContent = sending ? `${text}…` : text;
      card.classList.toggle('done', !sending);
    };
    card.note = (text) => {
      state.textContent += ` ${text}`;
    };
    card.reopen = () => {
      approve.disabled = reject.disabled = false;
      approve.hidden = reject.hidden = false;
      state.textContent = '';
    };
    return card;
  };

  // settle marks the calls still shown running as cut short: the run
  // stopped without finishing them (cancelled, failed, server restart).
  const settle = () => {
    for (const c of calls.values()) {
      if (c.status.classList.contains('running')) {
        c.status.className = 'status fail';
        c.status.textContent = 'interrupted';
      }
    }
  };

  const handle = (type, ev) => {
    switch (type) {
      case 'user_message':
        bubble = null;
        push(h('div', {class: 'msg user'}, h('div', {class: 'who'}, 'You'), h('div', {class: 'text'}, ev.text || ev.input || '')));
        break;
      case 'run_started':
        push(h('div', {class: 'event note'}, `Agent ${ev.agent || ''} started.`));
        break;
      case 'turn_started':
        bubble = null;
        break;
      case 'text_delta':
        assistant().text.append(ev.text || '');
        break;
      case 'message':
        // Streamed as raw text, rendered as Markdown once complete; the
        // raw text stays for comparing with the final answer.
        assistant().raw = ev.text || '';
        bubble.text.classList.add('md');
        bubble.text.replaceChildren(renderMarkdown(bubble.raw));
        lastMessage = bubble;
        bubble = null;
        break;
      case 'tool_call_started': {
        bubble = null;
        // The call id comes from the model: only safe characters in a file name.
        const view = new OutputView({filename: `${(ev.call_id || 'command').replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 64)}-output.txt`});
        const out = view.el;
        const status = h('div', {class: 'status running'}, 'running…');
        const head = ev.command
          ? h('div', {class: 'head'}, h('span', {class: 'prompt'}, '$ '), h('code', {}, ev.command))
          : h('div', {class: 'head'}, h('strong', {}, ev.tool || 'tool'),
            ev.arguments && ev.call_kind !== 'edit' ? h('code', {class: 'args-inline'}, ` ${ev.arguments.slice(0, 300)}`) : null);
        const card = h('div', {class: 'event call', 'data-call': ev.call_id || ''}, head, out, status);
        const c = {card, out, status, view, any: false};
        if (ev.call_id) calls.set(ev.call_id, c);
        lastCall = c;
        cards.get(ev.call_id)?.decided('Approved', false);
        push(card);
        break;
      }
      case 'output': {
        const c = (ev.call_id && calls.get(ev.call_id)) || lastCall;
        if (!c) break;
        c.any = true;
        c.view.write(ev.data || '', ev.stream);
        break;
      }
      case 'tool_call_finished': {
        const c = (ev.call_id && calls.get(ev.call_id)) || lastCall;
        if (!c) break;
        const parts = [];
        if (ev.exit_code !== undefined && ev.exit_code !== null) parts.push(`exit ${ev.exit_code}`);
        else if (ev.session_id) parts.push(`still running (session ${ev.session_id})`);
        else parts.push('done');
        if (ev.duration_ns) parts.push(fmtDuration(ev.duration_ns / 1e6));
        c.status.className = `status ${ev.exit_code === undefined || ev.exit_code === null || ev.exit_code === 0 ? 'ok' : 'fail'}`;
        c.status.textContent = parts.join(' · ');
        if (!c.any && ev.result) c.card.insertBefore(h('details', {}, h('summary', {}, 'Result'), h('pre', {class: 'out'}, ev.result)), c.status);
        if (!c.any && !ev.result) c.out.remove();
        break;
      }
      case 'file_changed':
        push(diffCard(ev));
        if (ev.action === 'moved') {
          // The diff names the file's old place: it leaves the panel.
          const from = /^--- a\/(.*)$/m.exec(ev.diff || '');
          if (from) addArtifact(from[1], 'deleted');
        }
        addArtifact(ev.path, ev.action, ev.size || 0);
        break;
      case 'approval_requested': {
        const a = ev.approval || ev;
        const card = approvalCard(a);
        cards.set(a.call_id, card);
        pending.set(a.call_id, '');
        push(card);
        break;
      }
      case 'usage':
        onUsage(ev);
        break;
      case 'run_status': {
        if (ev.time && ev.status === 'running' && evStatus !== 'running') {
          if (evStatus) worked += Math.max(0, segEnd - segStart);
          segStart = Date.parse(ev.time);
        } else if (ev.time && ev.status !== 'running') {
          segEnd = Date.parse(ev.time);
        }
        evStatus = ev.status;
        setStatus(ev.status);
        showElapsed();
        if (ev.status !== 'running') settle();
        if (ev.status !== 'waiting') {
          // Calls decided earlier (or by another client) are not open.
          for (const [callID] of pending) {
            const card = cards.get(callID);
            if (card && !card.classList.contains('done')) card.decided('Decided', false);
          }
          pending = new Map();
        }
        if (ev.text) push(h('div', {class: 'event note'}, ev.text));
        if (ev.error && ev.status === 'failed') push(h('div', {class: 'event error-event'}, `The run failed: ${ev.error}`));
        if (!replaying) refreshRun();
        break;
      }
      case 'run_finished': {
        bubble = null;
        settle();
        const u = ev.usage || {};
        const tokens = `${fmtNum(u.input_tokens || 0, 0)} tokens in, ${fmtNum(u.output_tokens || 0, 0)} out` +
          (ev.cost_usd !== undefined && ev.cost_usd !== null ? ` · ${fmtUSD(ev.cost_usd)}` : '');
        if (!ev.output && !ev.error) {
          // A segment that stopped for approvals (or with nothing to say).
          push(h('div', {class: 'event note'}, `The agent paused · ${tokens} so far.`));
          break;
        }
        // The answer replaces the message that carried it.
        if (lastMessage && ev.output && lastMessage.raw.trim() === ev.output.trim()) lastMessage.remove();
        push(h('div', {class: 'event final'},
          h('div', {class: 'head'}, h('strong', {}, ev.error ? 'The agent stopped' : 'Final answer')),
          ev.output ? h('div', {class: 'text answer md'}, renderMarkdown(ev.output)) : null,
          ev.error ? h('p', {class: 'error-text'}, ev.error) : null,
          h('p', {class: 'muted small tokens'}, tokens)));
        break;
      }
      case 'error':
        push(h('div', {class: 'event error-event'}, `Error: ${ev.error || ev.text || 'unknown'}`));
        break;
      default:
        break; // newer event kinds: nothing to draw
    }
  };

  // ---- following the events ----
  let lastID = 0;
  let wake = null; // resolves to reconnect after a follow-up
  const sleep = (ms) => new Promise((r) => {
    const t = setTimeout(r, ms);
    signal.addEventListener('abort', () => {
      clearTimeout(t);
      r();
    }, {once: true});
  });
  const follow = async () => {
    let backoff = 500;
    let lost = false;
    while (!signal.aborted) {
      try {
        const resp = await request('GET', `${runPath(id)}/events${q({follow: 'true', after: lastID || ''})}`, {signal});
        if (lost) {
          lost = false;
          clearError();
          showNotice('Reconnected to the server.');
          refreshRun();
        }
        backoff = 500;
        for await (const ev of sse(resp)) {
          const n = Number(ev.id);
          if (ev.id !== null && Number.isFinite(n)) {
            if (n <= lastID) continue; // already shown
            lastID = n;
          }
          let data = {};
          try {
            data = ev.data ? JSON.parse(ev.data) : {};
          } catch {
            data = {text: ev.data};
          }
          handle(ev.event !== 'message' ? ev.event : data.type, data);
          if (ev.event === 'run_status' || data.type === 'run_status') replaying = false;
        }
        replaying = false;
        // The stream ended: a stopped run's stream ends there; wait for
        // a follow-up before listening again.
        if (stopped.has(run.status)) {
          await new Promise((r) => {
            wake = r;
            signal.addEventListener('abort', r, {once: true});
          });
        } else {
          await sleep(backoff);
        }
      } catch (e) {
        if (e.name === 'AbortError' || signal.aborted) return;
        if (e.status === 404 || e.status === 403 || e.status === 401) {
          showError(e, 'Following the run');
          return;
        }
        lost = true;
        showError(new Error(`lost the connection to the server (${e.message}); reconnecting… Nothing is lost: the run's events are replayed from where this page left off`), 'Following the run');
        await sleep(backoff);
        backoff = Math.min(backoff * 2, 5000);
      }
    }
  };

  followForm.addEventListener('submit', (e) => {
    e.preventDefault();
    const input = followInput.value.trim();
    if (!input) return;
    busy(send, 'Sending…', async () => {
      try {
        const r = await api('POST', `${runPath(id)}/messages`, {body: {input}});
        followInput.value = '';
        if (r && r.status) setStatus(r.status);
        else setStatus('running');
        if (wake) {
          wake();
          wake = null;
        }
      } catch (err) {
        showError(err, 'Sending the follow-up');
      }
    });
  });
  followInput.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) followForm.requestSubmit();
  });
  cancel.addEventListener('click', () => busy(cancel, 'Cancelling…', async () => {
    try {
      const r = await api('POST', `${runPath(id)}/cancel`);
      if (r && r.status) setStatus(r.status);
      showNotice('Cancel requested.');
    } catch (e) {
      showError(e, 'Cancelling the run');
    }
  }));
  follow();
}

// diffCard shows a file change with its unified diff, lines coloured.
function diffCard(ev) {
  const pre = h('pre', {class: 'diff'});
  for (const line of (ev.diff || '').split('\n')) {
    let cls = 'ctx';
    if (line.startsWith('+++') || line.startsWith('---')) cls = 'file';
    else if (line.startsWith('+')) cls = 'add';
    else if (line.startsWith('-')) cls = 'del';
    else if (line.startsWith('@@')) cls = 'hunk';
    pre.append(h('span', {class: cls}, line), '\n');
  }
  if (!ev.path) return h('div', {class: 'event change file'}, h('div', {class: 'head'}, ev.text || 'more files changed'));
  // A command's change has no diff: its size says what it is.
  const size = !ev.diff && ev.action !== 'deleted' ? h('span', {class: 'muted'}, ` · ${fmtBytes(ev.size || 0)}`) : null;
  return h('div', {class: `event change${ev.diff ? '' : ' file'}`, 'data-path': ev.path, 'data-action': ev.action || ''},
    h('div', {class: 'head'}, h('strong', {}, ev.action || 'changed'), ' ', h('code', {}, ev.path), size),
    ev.diff ? pre : null);
}
