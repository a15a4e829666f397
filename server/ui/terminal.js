// An interactive terminal over the PTY WebSocket
// (GET /v1/sandboxes/{id}/pty, signed in by the session's cookie and
// CSRF token). screen.js is the xterm-compatible screen model (less,
// top, vi, nano, clear); this file draws it, redrawing only the rows
// that changed, and sends the keys as xterm does.

import {wsURL} from './api.js';
import {h, showError} from './dom.js';
import {Screen, keySequence, pasteSequence, scrollbackMax} from './screen.js';

// View draws a Screen into two elements: hist, the lines scrolled off
// the main screen (drawn once, hidden while a full-screen program has
// the alternate screen), and live, one span per row. A row's span is
// kept until its line changes (Line.v) or the cursor enters or leaves
// it, so a frame costs the rows that changed, and a scroll moves spans
// instead of drawing them again.
class View {
  constructor(hist, live) {
    this.hist = hist;
    this.live = live;
    this.drawn = new WeakMap(); // Line -> {el, v, cur}
  }
  row(line, cur) {
    const d = this.drawn.get(line);
    if (d && d.v === line.v && d.cur === cur) return d.el;
    const el = drawLine(line.cells, cur);
    this.drawn.set(line, {el, v: line.v, cur});
    return el;
  }
  render(scr, focused) {
    if (scr.historyCleared) {
      this.hist.replaceChildren();
      scr.historyCleared = false;
    }
    if (scr.scrolled.length) {
      this.hist.append(...scr.scrolled.slice(-scrollbackMax).map((l) => this.row(l, '')));
      scr.scrolled = [];
      while (this.hist.childNodes.length > scrollbackMax) this.hist.firstChild.remove();
    }
    this.hist.hidden = scr.alt;
    const cursorKey = `${scr.c}${focused ? 'f' : 'b'}`;
    const want = scr.lines.map((l, i) => this.row(l, scr.cursorVisible && i === scr.r ? cursorKey : ''));
    const keep = new Set(want);
    for (const el of [...this.live.children]) if (!keep.has(el)) el.remove();
    want.forEach((el, i) => {
      const at = this.live.children[i];
      if (at !== el) this.live.insertBefore(el, at || null);
    });
  }
}

// drawLine is one row of cells as a span, runs of one style sharing a
// span, with the cursor at the column cur names ('' for none; 'f' or
// 'b' after the column: focused or not).
function drawLine(cells, cur) {
  const el = document.createElement('span');
  const cursorAt = cur ? parseInt(cur, 10) : -1;
  let end = cells.length;
  while (end > 0 && !cells[end - 1] && end - 1 !== cursorAt) end--;
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
    const cell = cells[i];
    if (cell && cell.ch === '') continue; // the second half of a wide character
    const st = cell ? cell.st : null;
    if (i === cursorAt) {
      flush();
      el.append(h('span', {class: cur.endsWith('f') ? 'cursor' : 'cursor blur'}, cell ? cell.ch : ' '));
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

// bindInput sends what is typed, pasted and (on the alternate screen)
// wheeled on the terminal element el to the shell, as xterm: send writes
// to the PTY; current is the connection's Screen, null when none.
function bindInput(el, send, current) {
  el.addEventListener('keydown', (e) => {
    const scr = current();
    if (!scr) return;
    if (e.ctrlKey && e.key === ']') {
      el.blur();
      return;
    }
    // Ctrl+Shift+C and V stay the browser's copy and paste.
    if (e.ctrlKey && e.shiftKey && (e.key === 'C' || e.key === 'V')) return;
    const s = keySequence(e, scr.appCursor);
    if (s !== null) {
      e.preventDefault();
      send(s);
    }
  });
  el.addEventListener('paste', (e) => {
    const scr = current();
    e.preventDefault();
    if (scr) send(pasteSequence(e.clipboardData.getData('text'), scr.bracketedPaste));
  });
  // On the alternate screen (less, vi, top) there is nothing to scroll:
  // the wheel sends arrow keys instead, as xterm's alternateScroll.
  el.addEventListener('wheel', (e) => {
    const scr = current();
    if (!scr || !scr.alt || e.deltaY === 0) return;
    e.preventDefault();
    send(keySequence({key: e.deltaY < 0 ? 'ArrowUp' : 'ArrowDown'}, scr.appCursor).repeat(3));
  }, {passive: false});
}

// terminalPanel is the sandbox page's Terminal tab: a shell in sb over
// the PTY WebSocket, opened by its button, closed on leaving the page.
export function terminalPanel(ctx, sb) {
  const screen = h('pre', {class: 'term', id: 'terminal', tabindex: '0', role: 'textbox', 'aria-multiline': 'true', 'aria-label': 'Terminal: type to send keys to the shell'});
  const connect = h('button', {type: 'button', class: 'primary', id: 'term-connect'}, 'Start a shell');
  const disconnect = h('button', {type: 'button', disabled: true}, 'End the shell');
  const state = h('span', {class: 'muted', role: 'status'}, 'Not connected.');
  const panel = h('div', {class: 'term-panel'},
    h('div', {class: 'inline'}, connect, disconnect, state),
    h('p', {class: 'muted small'}, 'Click the terminal (or tab to it) and type. Esc, Tab and Ctrl keys go to the shell (Ctrl+Shift+C and V copy and paste); Ctrl+] leaves the terminal for the keyboard.'),
    screen);
  const hist = h('span', {class: 'term-history'});
  const live = h('span', {class: 'term-screen'});
  screen.append(hist, live);
  const view = new View(hist, live);
  let ws = null;
  let scr = null;
  let drawQueued = false;
  const enc = new TextEncoder();
  let dec = null;
  const draw = () => {
    if (drawQueued || !scr) return;
    drawQueued = true;
    requestAnimationFrame(() => {
      drawQueued = false;
      const atBottom = screen.scrollHeight - screen.scrollTop - screen.clientHeight < 30;
      view.render(scr, document.activeElement === screen);
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
    dec = new TextDecoder(); // a new stream: no bytes of the last connection
    scr.reply = send; // answers to status queries (cursor position, device attributes)
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
  bindInput(screen, send, () => (ws ? scr : null));
  screen.addEventListener('focus', draw);
  screen.addEventListener('blur', draw);
  // A resize is sent when the window has kept its size for a moment:
  // dragging a window's edge (or a page capture) passes through sizes
  // that would make a full-screen program redraw for nothing, and cut
  // the rows of the screen to a passing width.
  let resizeTimer = null;
  const resized = () => {
    resizeTimer = null;
    if (!ws || !scr || !screen.isConnected) return;
    const {cols, rows} = size();
    if (cols === scr.cols && rows === scr.rows) return;
    scr.resize(cols, rows);
    ws.send(JSON.stringify({type: 'resize', cols, rows}));
    state.textContent = `Connected (${cols}×${rows}).`;
    draw();
  };
  const onResize = () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(resized, 250);
  };
  window.addEventListener('resize', onResize);
  ctx.onLeave(() => {
    window.removeEventListener('resize', onResize);
    clearTimeout(resizeTimer);
  });
  return panel;
}
