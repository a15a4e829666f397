// An interactive terminal over the PTY WebSocket
// (GET /v1/sandboxes/{id}/pty, signed in by the session's cookie and
// CSRF token). A small screen model:
// enough for a shell, line editing, colours and simple full-screen
// redraws; it is not a complete VT100.

import {wsURL} from './api.js';
import {h, showError} from './dom.js';
import {Style, maxPending, sequenceEnd} from './ansi.js';

const scrollbackMax = 2000;

class Screen {
  constructor(cols, rows) {
    this.cols = cols;
    this.rows = rows;
    this.style = new Style();
    this.lines = [];
    this.scrolled = []; // lines scrolled off the top since the last render
    for (let i = 0; i < rows; i++) this.lines.push(this.blank());
    this.r = 0;
    this.c = 0;
    this.pending = '';
  }
  blank() {
    return Array.from({length: this.cols}, () => null);
  }
  resize(cols, rows) {
    this.lines = this.lines.map((l) => (l.length >= cols ? l.slice(0, cols) : l.concat(Array(cols - l.length).fill(null))));
    while (this.lines.length > rows) {
      this.scrollOff();
      this.r = Math.max(0, this.r - 1);
    }
    this.cols = cols;
    while (this.lines.length < rows) this.lines.push(this.blank());
    this.rows = rows;
    this.c = Math.min(this.c, cols - 1);
  }
  scrollOff() {
    this.scrolled.push(this.lines.shift());
    if (this.scrolled.length > scrollbackMax) this.scrolled.shift();
  }
  newline() {
    if (this.r === this.rows - 1) {
      this.scrollOff();
      this.lines.push(this.blank());
    } else this.r++;
  }
  put(ch) {
    if (this.c >= this.cols) {
      this.c = 0;
      this.newline();
    }
    this.lines[this.r][this.c] = {ch, st: this.style.clone()};
    this.c++;
  }
  erase(line, from, to) {
    for (let i = from; i < to && i < this.cols; i++) line[i] = null;
  }
  csi(params, final) {
    const priv = params.startsWith('?');
    const a = (priv ? params.slice(1) : params).split(';').map((x) => parseInt(x, 10));
    const n = (i, d = 1) => (Number.isNaN(a[i]) || a[i] === undefined || a[i] === 0 ? d : a[i]);
    const clampR = (r) => Math.max(0, Math.min(this.rows - 1, r));
    const clampC = (c) => Math.max(0, Math.min(this.cols - 1, c));
    switch (final) {
      case 'm': this.style.apply(params); break;
      case 'A': this.r = clampR(this.r - n(0)); break;
      case 'B': this.r = clampR(this.r + n(0)); break;
      case 'C': this.c = clampC(this.c + n(0)); break;
      case 'D': this.c = clampC(this.c - n(0)); break;
      case 'G': this.c = clampC(n(0) - 1); break;
      case 'd': this.r = clampR(n(0) - 1); break;
      case 'H': case 'f': this.r = clampR(n(0) - 1); this.c = clampC(n(1) - 1); break;
      case 'J': {
        const m = a[0] || 0;
        if (m === 2 || m === 3) this.lines = this.lines.map(() => this.blank());
        else if (m === 0) {
          this.erase(this.lines[this.r], this.c, this.cols);
          for (let i = this.r + 1; i < this.rows; i++) this.lines[i] = this.blank();
        } else {
          this.erase(this.lines[this.r], 0, this.c + 1);
          for (let i = 0; i < this.r; i++) this.lines[i] = this.blank();
        }
        break;
      }
      case 'K': {
        const m = a[0] || 0;
        const line = this.lines[this.r];
        if (m === 0) this.erase(line, this.c, this.cols);
        else if (m === 1) this.erase(line, 0, this.c + 1);
        else this.erase(line, 0, this.cols);
        break;
      }
      case 'P': { const line = this.lines[this.r]; line.splice(this.c, n(0)); while (line.length < this.cols) line.push(null); break; }
      case '@': { const line = this.lines[this.r]; line.splice(this.c, 0, ...Array(n(0)).fill(null)); line.length = this.cols; break; }
      case 'X': this.erase(this.lines[this.r], this.c, this.c + n(0)); break;
      case 'h': case 'l':
        if (priv && (a[0] === 1049 || a[0] === 47)) { this.lines = this.lines.map(() => this.blank()); this.r = this.c = 0; }
        break;
      default: break; // other sequences change nothing we draw
    }
  }
  write(text) {
    const s = this.pending + text;
    this.pending = '';
    for (let i = 0; i < s.length; i++) {
      const ch = s[i];
      if (ch === '\x1b') {
        const end = sequenceEnd(s, i);
        if (end < 0) {
          // A sequence cut by the end of this chunk waits for the next.
          if (s.length - i <= maxPending) { this.pending = s.slice(i); break; }
          continue; // not a sequence we can read: drop the ESC
        }
        if (s[i + 1] === '[') this.csi(s.slice(i + 2, end - 1), s[end - 1]);
        i = end - 1;
        continue;
      }
      if (ch === '\r') this.c = 0;
      else if (ch === '\n') this.newline();
      else if (ch === '\b') this.c = Math.max(0, this.c - 1);
      else if (ch === '\t') this.c = Math.min(this.cols - 1, (Math.floor(this.c / 8) + 1) * 8);
      else if (ch.charCodeAt(0) >= 32) this.put(ch);
    }
  }
  // render draws the screen into live, and adds the lines scrolled off
  // since the last render to hist: the scrollback is drawn once, not on
  // every frame.
  render(hist, live, focused) {
    if (this.scrolled.length) {
      hist.append(...this.scrolled.map((l) => drawLine(l, -1, focused)));
      this.scrolled = [];
      while (hist.childNodes.length > scrollbackMax) hist.firstChild.remove();
    }
    live.replaceChildren(...this.lines.map((l, i) => drawLine(l, i === this.r ? this.c : -1, focused)));
  }
}

// drawLine is one line of cells as a span, runs of one style sharing a
// span, with the cursor at cursorAt (-1 for none).
function drawLine(line, cursorAt, focused) {
  const el = document.createElement('span');
  let end = line.length;
  while (end > 0 && !line[end - 1] && end - 1 !== cursorAt) end--;
  let run = '';
  let runStyle = null;
  const flush = () => {
    if (!run) return;
    if (runStyle && !runStyle.isPlain()) {
      const sp = runStyle.span();
      sp.append(run);
      el.append(sp);
    } else el.append(run);
    run = '';
  };
  for (let i = 0; i < end; i++) {
    const cell = line[i];
    const st = cell ? cell.st : null;
    if (i === cursorAt) {
      flush();
      el.append(h('span', {class: focused ? 'cursor' : 'cursor blur'}, cell ? cell.ch : ' '));
      runStyle = null;
      continue;
    }
    if ((st ? st.key() : '') !== (runStyle ? runStyle.key() : '')) {
      flush();
      runStyle = st;
    }
    run += cell ? cell.ch : ' ';
  }
  flush();
  el.append('\n');
  return el;
}

const keys = {
  Enter: '\r', Backspace: '\x7f', Tab: '\t', Escape: '\x1b', ArrowUp: '\x1b[A', ArrowDown: '\x1b[B', ArrowRight: '\x1b[C',
  ArrowLeft: '\x1b[D', Home: '\x1b[H', End: '\x1b[F', Delete: '\x1b[3~', PageUp: '\x1b[5~', PageDown: '\x1b[6~', Insert: '\x1b[2~',
};

export function terminalPanel(ctx, sb) {
  const screen = h('pre', {class: 'term', id: 'terminal', tabindex: '0', role: 'textbox', 'aria-multiline': 'true', 'aria-label': 'Terminal: type to send keys to the shell'});
  const connect = h('button', {type: 'button', class: 'primary', id: 'term-connect'}, 'Start a shell');
  const disconnect = h('button', {type: 'button', disabled: true}, 'End the shell');
  const state = h('span', {class: 'muted', role: 'status'}, 'Not connected.');
  const panel = h('div', {class: 'term-panel'},
    h('div', {class: 'inline'}, connect, disconnect, state),
    h('p', {class: 'muted small'}, 'Click the terminal (or tab to it) and type. Esc and Tab go to the shell; Ctrl+] leaves the terminal for the keyboard.'),
    screen);
  const hist = h('span');
  const live = h('span');
  screen.append(hist, live);
  let ws = null;
  let scr = null;
  let drawQueued = false;
  const enc = new TextEncoder();
  const dec = new TextDecoder();
  const draw = () => {
    if (drawQueued || !scr) return;
    drawQueued = true;
    requestAnimationFrame(() => {
      drawQueued = false;
      const atBottom = screen.scrollHeight - screen.scrollTop - screen.clientHeight < 30;
      scr.render(hist, live, document.activeElement === screen);
      if (atBottom) screen.scrollTop = screen.scrollHeight;
    });
  };
  // size fits the terminal to its box, measuring the font's cell.
  const size = () => {
    const probe = h('div', {'aria-hidden': 'true'}, h('span', {}, 'MMMMMMMMMM'));
    screen.append(probe);
    const cw = probe.firstChild.getBoundingClientRect().width / 10 || 8;
    const lh = probe.getBoundingClientRect().height || 17;
    probe.remove();
    const cols = Math.max(20, Math.min(300, Math.floor((screen.clientWidth - 16) / cw)));
    const rows = Math.max(5, Math.min(100, Math.floor((screen.clientHeight - 16) / lh)));
    return {cols, rows};
  };
  const send = (s) => {
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(enc.encode(s));
  };
  connect.addEventListener('click', () => {
    const {cols, rows} = size();
    scr = new Screen(cols, rows);
    hist.replaceChildren();
    ws = new WebSocket(wsURL(`/v1/sandboxes/${encodeURIComponent(sb.id)}/pty`, {cols, rows}));
    ws.binaryType = 'arraybuffer';
    connect.disabled = true;
    state.textContent = 'Connecting…';
    let opened = false;
    let exit = null;
    ws.onopen = () => {
      opened = true;
      disconnect.disabled = false;
      state.textContent = `Connected (${cols}×${rows}).`;
      screen.focus();
      draw();
    };
    ws.onmessage = (e) => {
      if (typeof e.data === 'string') {
        const m = JSON.parse(e.data);
        if (m.type === 'exit') exit = m;
        return;
      }
      scr.write(dec.decode(new Uint8Array(e.data), {stream: true}));
      draw();
    };
    ws.onclose = (e) => {
      connect.disabled = false;
      disconnect.disabled = true;
      ws = null;
      if (exit) state.textContent = `The shell exited with code ${exit.exit_code}${exit.signal ? ` (signal ${exit.signal})` : ''}.`;
      else if (!opened) {
        state.textContent = 'Could not connect.';
        showError(new Error('the terminal could not connect: the sandbox may be stopped or gone, or the key refused; reload the page to check'), 'Terminal');
      } else if (e.code !== 1000) {
        state.textContent = 'Disconnected.';
        showError(new Error(e.reason || `the connection closed (code ${e.code})`), 'Terminal');
      } else state.textContent = 'Disconnected.';
      draw();
    };
  });
  disconnect.addEventListener('click', () => ws && ws.close(1000));
  ctx.onLeave(() => ws && ws.close(1000));
  screen.addEventListener('keydown', (e) => {
    if (!ws) return;
    if (e.ctrlKey && e.key === ']') {
      screen.blur();
      return;
    }
    let s = null;
    if (e.ctrlKey && !e.altKey && e.key.length === 1) {
      const c = e.key.toUpperCase().charCodeAt(0);
      if (c >= 64 && c <= 95) s = String.fromCharCode(c - 64);
    } else if (keys[e.key]) s = keys[e.key];
    else if (e.key.length === 1 && !e.metaKey) s = e.altKey ? '\x1b' + e.key : e.key;
    if (s !== null) {
      e.preventDefault();
      send(s);
    }
  });
  screen.addEventListener('paste', (e) => {
    e.preventDefault();
    send(e.clipboardData.getData('text'));
  });
  screen.addEventListener('focus', draw);
  screen.addEventListener('blur', draw);
  const onResize = () => {
    if (!ws || !scr) return;
    const {cols, rows} = size();
    if (cols === scr.cols && rows === scr.rows) return;
    scr.resize(cols, rows);
    ws.send(JSON.stringify({type: 'resize', cols, rows}));
    draw();
  };
  window.addEventListener('resize', onResize);
  ctx.onLeave(() => window.removeEventListener('resize', onResize));
  return panel;
}
