// The command console of a sandbox: each command runs through
// POST /v1/sandboxes/{id}/exec and its NDJSON events stream in as they
// come, with ANSI colours, then the exit code and the time it took.
// Output of any size is shown by an OutputView: the last lines kept,
// the rows in sight drawn, the rest offered as a download.

import {base64Bytes, ndjson, request} from './api.js';
import {fmtDuration, h, showError} from './dom.js';
import {OutputView} from './outview.js';

export function consolePanel(ctx, sb) {
  const input = h('input', {id: 'cmd', name: 'cmd', autocomplete: 'off', spellcheck: 'false', placeholder: 'ls -la', 'aria-describedby': 'cmd-help'});
  const run = h('button', {type: 'submit', class: 'primary', id: 'run'}, 'Run');
  const stop = h('button', {type: 'button', id: 'stop', disabled: true}, 'Stop');
  const clear = h('button', {type: 'button'}, 'Clear');
  const log = h('div', {class: 'console', id: 'console-log', role: 'log', 'aria-label': 'Command output'});
  const form = h('form', {class: 'console-form'},
    h('label', {for: 'cmd'}, 'Command'),
    h('div', {class: 'inline'}, h('span', {class: 'prompt', 'aria-hidden': 'true'}, '$'), input, run, stop, clear),
    h('p', {id: 'cmd-help', class: 'muted small'}, `Runs with /bin/sh -c in ${sb.root}. ↑ and ↓ go through the history.`));
  const panel = h('div', {class: 'console-panel'}, form, log);
  panel.onShow = () => input.focus();

  const history = [];
  let hpos = 0;
  let running = null; // AbortController of the command running

  input.addEventListener('keydown', (e) => {
    if (e.key === 'ArrowUp' && hpos > 0) {
      hpos--;
      input.value = history[hpos];
      e.preventDefault();
    } else if (e.key === 'ArrowDown' && hpos < history.length) {
      hpos++;
      input.value = history[hpos] ?? '';
      e.preventDefault();
    }
  });
  clear.addEventListener('click', () => log.replaceChildren());
  stop.addEventListener('click', () => running && running.abort());
  ctx.onLeave(() => running && running.abort());

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const cmd = input.value.trim();
    if (!cmd || running) return;
    if (history[history.length - 1] !== cmd) history.push(cmd);
    hpos = history.length;
    input.value = '';
    running = new AbortController();
    run.disabled = true;
    stop.disabled = false;
    try {
      await execInto(log, sb, cmd, running.signal);
    } finally {
      running = null;
      run.disabled = false;
      stop.disabled = true;
      input.focus();
    }
  });
  return panel;
}

// execInto runs cmd and renders it as one entry of log.
async function execInto(log, sb, cmd, signal) {
  const view = new OutputView({outer: log, filename: `${sb.id}-output.txt`});
  const status = h('div', {class: 'status running'}, 'running…');
  const entry = h('div', {class: 'entry'}, h('div', {class: 'cmdline'}, h('span', {class: 'prompt'}, '$ '), cmd), view.el, status);
  log.append(entry);
  entry.scrollIntoView({block: 'nearest'});
  const decoders = {stdout: new TextDecoder(), stderr: new TextDecoder()};
  const started = performance.now();
  const done = (cls, text) => {
    status.className = `status ${cls}`;
    status.textContent = `${text} · ${fmtDuration(performance.now() - started)}`;
  };
  let ended = false;
  try {
    const resp = await request('POST', `/v1/sandboxes/${encodeURIComponent(sb.id)}/exec`, {body: {cmd, shell: true}, signal});
    for await (const ev of ndjson(resp)) {
      if (ev.type === 'stdout' || ev.type === 'stderr') {
        if (ev.data) view.write(decoders[ev.type].decode(base64Bytes(ev.data), {stream: true}), ev.type);
      } else if (ev.type === 'exit') {
        ended = true;
        let text = `exit ${ev.exit_code}`;
        if (ev.signal) text += ` (signal ${ev.signal})`;
        if (ev.oom) text += ' (out of memory)';
        if (ev.timed_out) text += ' (timed out)';
        done(ev.exit_code === 0 ? 'ok' : 'fail', text);
      } else if (ev.type === 'error') {
        ended = true;
        done('fail', `error: ${ev.error}`);
        showError(new Error(ev.error), `Running ${cmd}`);
      }
    }
    if (!ended) done('fail', 'the stream ended without an exit status (the connection to the server broke)');
  } catch (e) {
    if (e.name === 'AbortError') {
      done('fail', 'stopped');
      return;
    }
    done('fail', `error: ${e.message}`);
    showError(e, `Running ${cmd}`);
  }
}
