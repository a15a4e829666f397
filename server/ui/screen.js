// The web terminal's screen model: what xterm does with the bytes a
// shell and full-screen programs (less, top, vi, nano, clear) send, as
// cells in rows. It has no DOM, so node can test it; terminal.js draws
// it and sends the keys (keySequence).
//
// Supported: cursor addressing (CUP/HVP, CUU/CUD/CUF/CUB, CNL/CPL, CHA,
// HPA/HPR, VPA/VPR, save/restore by ESC 7/8 and CSI s/u), erase (ED
// 0-3, EL 0-2, ECH), insert/delete of lines and characters (IL/DL,
// ICH/DCH), repeat (REP), scroll regions (DECSTBM, SU/SD, IND/RI/NEL),
// tab stops, the alternate screen (?47, ?1047, ?1048, ?1049), origin
// mode, auto-wrap (?7) with xterm's deferred wrap, cursor visibility
// (?25), application cursor keys (?1), bracketed paste (?2004), insert
// mode (IRM), SGR through ansi.js's Style (16, 256 and 24-bit colours),
// DEC line drawing (ESC ( 0, SO/SI), wide and combining characters,
// device status and attribute reports. Titles (OSC), mouse modes and
// other settings are read and ignored.

import {Style, maxPending, sequenceEnd} from './ansi.js';

export const scrollbackMax = 2000;

// decGraphics is the DEC special graphics set (ESC ( 0): line drawing.
const decGraphics = {
  '`': '◆', a: '▒', b: '␉', c: '␌', d: '␍', e: '␊', f: '°', g: '±', h: '␤', i: '␋', j: '┘', k: '┐', l: '┌', m: '└', n: '┼',
  o: '⎺', p: '⎻', q: '─', r: '⎼', s: '⎽', t: '├', u: '┤', v: '┴', w: '┬', x: '│', y: '≤', z: '≥', '{': 'π', '|': '≠', '}': '£', '~': '·',
};

const zeroWidth = [[0x300, 0x36f], [0x483, 0x489], [0x591, 0x5bd], [0x610, 0x61a], [0x64b, 0x65f], [0x1ab0, 0x1aff], [0x1dc0, 0x1dff],
  [0x200b, 0x200f], [0x20d0, 0x20ff], [0xfe00, 0xfe0f], [0xfe20, 0xfe2f], [0xe0100, 0xe01ef]];
const wide = [[0x1100, 0x115f], [0x231a, 0x231b], [0x2329, 0x232a], [0x23e9, 0x23ec], [0x25fd, 0x25fe], [0x2614, 0x2615], [0x2648, 0x2653],
  [0x26a1, 0x26a1], [0x26aa, 0x26ab], [0x26bd, 0x26be], [0x26c4, 0x26c5], [0x26ce, 0x26ce], [0x26d4, 0x26d4], [0x26ea, 0x26ea],
  [0x26f2, 0x26f5], [0x26fa, 0x26fd], [0x2705, 0x2705], [0x270a, 0x270b], [0x2728, 0x2728], [0x274c, 0x274c], [0x2753, 0x2755],
  [0x2757, 0x2757], [0x2795, 0x2797], [0x27b0, 0x27b0], [0x27bf, 0x27bf], [0x2b1b, 0x2b1c], [0x2b50, 0x2b50], [0x2b55, 0x2b55],
  [0x2e80, 0x303e], [0x3041, 0x33ff], [0x3400, 0x4dbf], [0x4e00, 0x9fff], [0xa000, 0xa4cf], [0xa960, 0xa97f], [0xac00, 0xd7a3],
  [0xf900, 0xfaff], [0xfe10, 0xfe19], [0xfe30, 0xfe6f], [0xff00, 0xff60], [0xffe0, 0xffe6], [0x1f004, 0x1f004], [0x1f0cf, 0x1f0cf],
  [0x1f18e, 0x1f18e], [0x1f191, 0x1f19a], [0x1f200, 0x1f251], [0x1f300, 0x1f64f], [0x1f680, 0x1f6ff], [0x1f7e0, 0x1f7eb],
  [0x1f900, 0x1f9ff], [0x1fa70, 0x1faff], [0x20000, 0x3fffd]];

function inRanges(cp, ranges) {
  if (cp < ranges[0][0]) return false;
  for (const [lo, hi] of ranges) if (cp >= lo && cp <= hi) return true;
  return false;
}

// charWidth is the number of cells a code point takes, as wcwidth.
export function charWidth(cp) {
  if (cp < 0x300) return 1;
  if (inRanges(cp, zeroWidth)) return 0;
  return inRanges(cp, wide) ? 2 : 1;
}

// Line is one row of cells. A cell is null (blank in the default style)
// or {ch, st, w}: st a frozen Style or null, w 2 for the first half of a
// wide character, ch '' for its second half. v counts changes, so a
// renderer can keep a drawn row until its line changes.
export class Line {
  constructor(cols, cell = null) {
    this.cells = new Array(cols).fill(cell);
    this.v = 0;
  }
  text() {
    return this.cells.map((c) => (c ? c.ch : ' ')).join('').replace(/ +$/, '');
  }
}

// seqEnd is the index after the escape sequence at s[i], or -1 when s
// ends before it does. Three-byte escapes (charsets, ESC # 8) are read
// here; CSI, OSC and the others by ansi.js.
function seqEnd(s, i) {
  const t = s[i + 1];
  if (t === undefined) return -1;
  if ('()*+-./#% '.includes(t)) return i + 2 < s.length ? i + 3 : -1;
  return sequenceEnd(s, i);
}

// Screen is the terminal: a main and an alternate buffer of rows, the
// cursor, the modes. write feeds it output; reply (set by the owner)
// gets the answers to status queries, to send back to the program.
export class Screen {
  constructor(cols, rows) {
    this.cols = cols;
    this.rows = rows;
    this.reply = () => {};
    this.scrolled = []; // lines scrolled off the main screen since the last render
    this.historyCleared = false;
    this.pending = '';
    this.reset();
  }
  reset() {
    this.main = {lines: this.blankLines(this.rows), saved: null};
    this.altBuf = {lines: this.blankLines(this.rows), saved: null};
    this.buf = this.main;
    this.alt = false;
    this.style = new Style();
    this.pen = null;
    this.r = this.c = 0;
    this.wrapNext = false;
    this.top = 0;
    this.bottom = this.rows - 1;
    this.autowrap = true;
    this.origin = false;
    this.insert = false;
    this.cursorVisible = true;
    this.appCursor = false;
    this.bracketedPaste = false;
    this.g = ['B', 'B'];
    this.gl = 0;
    this.lastCh = null; // the last character printed, for REP
    this.lastCp = 0;
    this.resetTabs();
  }
  get lines() {
    return this.buf.lines;
  }
  resetTabs() {
    this.tabs = new Set();
    for (let i = 8; i < this.cols; i += 8) this.tabs.add(i);
  }
  // blankCell is an erased cell: xterm erases with the background colour.
  blankCell() {
    if (!this.pen || this.pen.bg === null) return null;
    if (!this.bce || this.bce.bg !== this.pen.bg) {
      this.bce = new Style();
      this.bce.bg = this.pen.bg;
    }
    return {ch: ' ', st: this.bce, w: 1};
  }
  blankLines(n) {
    return Array.from({length: n}, () => new Line(this.cols));
  }
  newLine() {
    return new Line(this.cols, this.blankCell());
  }
  resize(cols, rows) {
    for (const b of [this.main, this.altBuf]) {
      for (const l of b.lines) {
        l.cells = l.cells.length >= cols ? l.cells.slice(0, cols) : l.cells.concat(new Array(cols - l.cells.length).fill(null));
        l.v++;
      }
    }
    this.cols = cols;
    for (const b of [this.main, this.altBuf]) {
      const current = b === this.buf;
      while (b.lines.length > rows) {
        // Drop blank rows below the cursor first, as xterm; else the top.
        if ((!current || this.r < b.lines.length - 1) && !b.lines[b.lines.length - 1].text()) b.lines.pop();
        else {
          const l = b.lines.shift();
          if (b === this.main) this.toHistory(l);
          if (current) this.r = Math.max(0, this.r - 1);
        }
      }
      while (b.lines.length < rows) b.lines.push(new Line(cols));
    }
    this.rows = rows;
    this.top = 0;
    this.bottom = rows - 1;
    this.r = Math.min(this.r, rows - 1);
    this.c = Math.min(this.c, cols - 1);
    this.wrapNext = false;
    this.resetTabs();
  }
  toHistory(line) {
    this.scrolled.push(line);
    // Trimmed in batches: a shift per line costs the whole array.
    if (this.scrolled.length > 2 * scrollbackMax) this.scrolled.splice(0, this.scrolled.length - scrollbackMax);
  }
  // scrollUp moves rows top..bottom up by n, blank rows coming in at the
  // bottom. Rows leaving the top of the whole main screen go to the
  // scrollback when save is set (output scrolling, not deletions).
  scrollUp(n, top = this.top, bottom = this.bottom, save = false) {
    n = Math.min(n, bottom - top + 1);
    const keep = save && top === 0 && bottom === this.rows - 1 && !this.alt;
    for (let i = 0; i < n; i++) {
      const [l] = this.lines.splice(top, 1);
      if (keep) this.toHistory(l);
      this.lines.splice(bottom, 0, this.newLine());
    }
  }
  scrollDown(n, top = this.top, bottom = this.bottom) {
    n = Math.min(n, bottom - top + 1);
    for (let i = 0; i < n; i++) {
      this.lines.splice(bottom, 1);
      this.lines.splice(top, 0, this.newLine());
    }
  }
  index() {
    if (this.r === this.bottom) this.scrollUp(1, this.top, this.bottom, true);
    else if (this.r < this.rows - 1) this.r++;
  }
  reverseIndex() {
    if (this.r === this.top) this.scrollDown(1);
    else if (this.r > 0) this.r--;
  }
  // moveTo puts the cursor at (r, c), screen-relative, clamped.
  moveTo(r, c) {
    this.r = Math.max(0, Math.min(this.rows - 1, r));
    this.c = Math.max(0, Math.min(this.cols - 1, c));
    this.wrapNext = false;
  }
  // moveRows moves the cursor up (n < 0) or down, stopping at the scroll
  // region's edge when it starts inside it.
  moveRows(n) {
    let lo = 0;
    let hi = this.rows - 1;
    if (this.r >= this.top && this.r <= this.bottom) {
      lo = this.top;
      hi = this.bottom;
    }
    this.moveTo(Math.max(lo, Math.min(hi, this.r + n)), this.c);
  }
  erase(line, from, to) {
    const blank = this.blankCell();
    from = Math.max(0, from);
    to = Math.min(this.cols, to);
    // Erasing half of a wide character erases all of it.
    if (from > 0 && from < to && line.cells[from] && line.cells[from].ch === '') from--;
    if (to < this.cols && to > from && line.cells[to] && line.cells[to].ch === '') to++;
    for (let i = from; i < to; i++) line.cells[i] = blank;
    line.v++;
  }
  put(line, c, cell) {
    const old = line.cells[c];
    if (old && old.ch === '' && c > 0) line.cells[c - 1] = null;
    if (old && old.w === 2 && c + 1 < this.cols) line.cells[c + 1] = null;
    line.cells[c] = cell;
  }
  print(ch, cp) {
    if (this.g[this.gl] === '0' && decGraphics[ch]) ch = decGraphics[ch];
    const w = charWidth(cp);
    if (w === 0) return this.combine(ch);
    if (w > this.cols) return;
    if (this.wrapNext || (w === 2 && this.c === this.cols - 1)) {
      if (this.autowrap) {
        this.c = 0;
        this.index();
      }
      this.wrapNext = false;
    }
    if (w === 2 && this.c === this.cols - 1) this.c = this.cols - 2;
    const line = this.lines[this.r];
    if (this.insert) {
      line.cells.splice(this.c, 0, ...new Array(w).fill(null));
      line.cells.length = this.cols;
    }
    this.put(line, this.c, {ch, st: this.pen, w});
    if (w === 2) this.put(line, this.c + 1, {ch: '', st: this.pen, w: 0});
    line.v++;
    this.lastCh = ch;
    this.lastCp = cp;
    if (this.c + w >= this.cols) {
      this.c = this.cols - 1;
      this.wrapNext = this.autowrap;
    } else this.c += w;
  }
  // printASCII prints s[from:to], printable ASCII, as print would, in
  // one loop: most output is this.
  printASCII(s, from, to) {
    const st = this.pen;
    for (let i = from; i < to; i++) {
      if (this.wrapNext) {
        if (this.autowrap) {
          this.c = 0;
          this.index();
        }
        this.wrapNext = false;
      }
      const line = this.lines[this.r];
      const cell = {ch: s[i], st, w: 1};
      const old = line.cells[this.c];
      if (old && old.w !== 1) this.put(line, this.c, cell);
      else line.cells[this.c] = cell;
      line.v++;
      if (this.c + 1 >= this.cols) {
        this.c = this.cols - 1;
        this.wrapNext = this.autowrap;
      } else this.c++;
    }
    this.lastCh = s[to - 1];
    this.lastCp = s.charCodeAt(to - 1);
  }
  // combine adds a zero-width character (an accent) to the last one.
  combine(ch) {
    let c = this.wrapNext ? this.c : this.c - 1;
    const line = this.lines[this.r];
    if (c > 0 && line.cells[c] && line.cells[c].ch === '') c--;
    const cell = line.cells[c];
    if (c < 0 || !cell) return;
    line.cells[c] = {...cell, ch: cell.ch + ch};
    line.v++;
  }
  control(code) {
    switch (code) {
      case 0x08:
        if (this.wrapNext) this.wrapNext = false;
        else this.moveTo(this.r, this.c - 1);
        break;
      case 0x09: {
        let c = this.c + 1;
        while (c < this.cols - 1 && !this.tabs.has(c)) c++;
        this.c = Math.min(c, this.cols - 1);
        this.wrapNext = false;
        break;
      }
      case 0x0a: case 0x0b: case 0x0c: this.index(); this.wrapNext = false; break;
      case 0x0d: this.c = 0; this.wrapNext = false; break;
      case 0x0e: this.gl = 1; break;
      case 0x0f: this.gl = 0; break;
      default: break; // BEL and the others draw nothing
    }
  }
  write(text) {
    const s = this.pending + text;
    this.pending = '';
    let i = 0;
    while (i < s.length) {
      const code = s.charCodeAt(i);
      if (code === 0x1b) {
        const end = seqEnd(s, i);
        if (end < 0) {
          // A sequence cut by the end of this chunk waits for the next.
          if (s.length - i <= maxPending) {
            this.pending = s.slice(i);
            return;
          }
          i++; // not a sequence we can read: drop the ESC
          continue;
        }
        this.escape(s, i, end);
        i = end;
      } else if (code < 0x20 || code === 0x7f) {
        this.control(code);
        i++;
      } else if (code < 0x7f && !this.insert && this.g[this.gl] !== '0') {
        let j = i + 1;
        while (j < s.length && s.charCodeAt(j) >= 0x20 && s.charCodeAt(j) < 0x7f) j++;
        this.printASCII(s, i, j);
        i = j;
      } else if (code >= 0x80 && code < 0xa0) {
        i++; // C1 controls as characters: nothing to draw
      } else {
        const cp = s.codePointAt(i);
        const n = cp > 0xffff ? 2 : 1;
        this.print(s.slice(i, i + n), cp);
        i += n;
      }
    }
  }
  escape(s, i, end) {
    const t = s[i + 1];
    if (t === '[') {
      const fin = s[end - 1];
      if (end - i >= 3 && fin >= '@' && fin <= '~') this.csi(s.slice(i + 2, end - 1), fin);
      return;
    }
    switch (t) {
      case '7': this.saveCursor(); break;
      case '8': this.restoreCursor(); break;
      case 'D': this.index(); this.wrapNext = false; break;
      case 'M': this.reverseIndex(); this.wrapNext = false; break;
      case 'E': this.c = 0; this.index(); this.wrapNext = false; break;
      case 'H': this.tabs.add(this.c); break;
      case 'c': this.reset(); this.historyCleared = true; this.scrolled = []; break;
      case '(': case ')': this.g[t === '(' ? 0 : 1] = s[i + 2]; break;
      case '#':
        if (s[i + 2] === '8') {
          for (const l of this.lines) {
            l.cells = Array.from({length: this.cols}, () => ({ch: 'E', st: null, w: 1}));
            l.v++;
          }
        }
        break;
      default: break; // keypad modes, OSC titles, DCS, other charsets
    }
  }
  saveCursor() {
    this.buf.saved = {r: this.r, c: this.c, wrapNext: this.wrapNext, style: this.style.clone(), origin: this.origin, g: [...this.g], gl: this.gl};
  }
  restoreCursor() {
    const sv = this.buf.saved;
    if (!sv) {
      this.moveTo(0, 0);
      return;
    }
    this.moveTo(sv.r, sv.c);
    this.wrapNext = sv.wrapNext;
    this.style = sv.style.clone();
    this.setPen();
    this.origin = sv.origin;
    this.g = [...sv.g];
    this.gl = sv.gl;
  }
  setPen() {
    if (this.style.isPlain()) {
      this.pen = null;
      return;
    }
    // Frozen, so shared by every cell it draws: its key is computed first
    // (Style caches it on first use).
    const pen = this.style.clone();
    pen.key();
    this.pen = Object.freeze(pen);
  }
  // switchBuffer shows the alternate screen (on) or the main one;
  // clear blanks the alternate screen on the way.
  switchBuffer(on, clear) {
    if (on === this.alt) {
      if (on && clear) this.altBuf.lines = this.blankLines(this.rows);
      return;
    }
    if (!on && clear) this.altBuf.lines = this.blankLines(this.rows);
    this.alt = on;
    this.buf = on ? this.altBuf : this.main;
    if (on && clear) this.altBuf.lines = this.blankLines(this.rows);
    for (const l of this.lines) l.v++;
  }
  privateModes(params, on) {
    for (const p of params.split(';').map((x) => parseInt(x, 10))) {
      switch (p) {
        case 1: this.appCursor = on; break;
        case 6: this.origin = on; this.moveTo(on ? this.top : 0, 0); break;
        case 7: this.autowrap = on; if (!on) this.wrapNext = false; break;
        case 25: this.cursorVisible = on; break;
        case 47: this.switchBuffer(on, false); break;
        case 1047: this.switchBuffer(on, !on); break;
        case 1048: if (on) this.saveCursor(); else this.restoreCursor(); break;
        case 1049:
          if (on) {
            this.saveCursor();
            this.switchBuffer(true, true);
          } else {
            this.switchBuffer(false, false);
            this.restoreCursor();
          }
          break;
        case 2004: this.bracketedPaste = on; break;
        default: break; // mouse reporting, blinking, focus events...
      }
    }
  }
  csi(body, fin) {
    let prefix = '';
    if (body && '?><='.includes(body[0])) {
      prefix = body[0];
      body = body.slice(1);
    }
    let k = body.length;
    while (k > 0 && body.charCodeAt(k - 1) >= 0x20 && body.charCodeAt(k - 1) <= 0x2f) k--;
    const inter = body.slice(k);
    body = body.slice(0, k);
    if (inter) {
      if (inter === '!' && fin === 'p') this.softReset();
      return; // cursor shape (SP q) and other settings
    }
    if (prefix === '?') {
      if (fin === 'h' || fin === 'l') this.privateModes(body, fin === 'h');
      else if (fin === 'J' || fin === 'K') this.csi(body, fin); // selective erase as erase
      return;
    }
    if (prefix) {
      if (prefix === '>' && fin === 'c') this.reply('\x1b[>0;276;0c');
      return; // xterm key modifier options and the like
    }
    if (fin === 'm') {
      this.style.apply(body);
      this.setPen();
      return;
    }
    const a = body.split(';').map((x) => parseInt(x, 10));
    this.csiMove(a, fin) || this.csiEdit(a, fin) || this.csiOther(a, fin);
  }
  // csiMove runs the cursor motions; false when fin is not one.
  csiMove(a, fin) {
    const n = (i) => a[i] || 1;
    const rowBase = this.origin ? this.top : 0;
    switch (fin) {
      case 'A': this.moveRows(-n(0)); break;
      case 'B': case 'e': this.moveRows(n(0)); break;
      case 'C': case 'a': this.moveTo(this.r, this.c + n(0)); break;
      case 'D': this.moveTo(this.r, this.c - n(0)); break;
      case 'E': this.moveRows(n(0)); this.c = 0; break;
      case 'F': this.moveRows(-n(0)); this.c = 0; break;
      case 'G': case '`': this.moveTo(this.r, n(0) - 1); break;
      case 'd': this.moveTo(this.originRow(rowBase + n(0) - 1), this.c); break;
      case 'H': case 'f': this.moveTo(this.originRow(rowBase + n(0) - 1), n(1) - 1); break;
      case 'I': for (let i = 0; i < n(0); i++) this.control(0x09); break;
      case 'Z':
        for (let i = 0; i < n(0); i++) {
          let c = this.c - 1;
          while (c > 0 && !this.tabs.has(c)) c--;
          this.moveTo(this.r, c);
        }
        break;
      case 's': this.saveCursor(); break;
      case 'u': this.restoreCursor(); break;
      default: return false;
    }
    return true;
  }
  originRow(r) {
    return this.origin ? Math.min(r, this.bottom) : r;
  }
  // csiEdit runs erases, insertions, deletions and scrolls.
  csiEdit(a, fin) {
    const n = (i) => a[i] || 1;
    const line = this.lines[this.r];
    const inRegion = this.r >= this.top && this.r <= this.bottom;
    switch (fin) {
      case 'J': this.eraseDisplay(a[0] || 0); break;
      case 'K': {
        const m = a[0] || 0;
        if (m === 0) this.erase(line, this.c, this.cols);
        else if (m === 1) this.erase(line, 0, this.c + 1);
        else this.erase(line, 0, this.cols);
        break;
      }
      case 'X': this.erase(line, this.c, this.c + n(0)); break;
      case '@': {
        const k = Math.min(n(0), this.cols - this.c);
        line.cells.splice(this.c, 0, ...new Array(k).fill(this.blankCell()));
        line.cells.length = this.cols;
        line.v++;
        break;
      }
      case 'P': {
        const k = Math.min(n(0), this.cols - this.c);
        line.cells.splice(this.c, k);
        while (line.cells.length < this.cols) line.cells.push(this.blankCell());
        line.v++;
        break;
      }
      case 'L': if (inRegion) { this.scrollDown(n(0), this.r, this.bottom); this.c = 0; } break;
      case 'M': if (inRegion) { this.scrollUp(n(0), this.r, this.bottom); this.c = 0; } break;
      case 'S': this.scrollUp(n(0)); break;
      case 'T': if (a.length <= 1) this.scrollDown(n(0)); break; // five parameters: mouse tracking
      case 'b':
        if (this.lastCh) for (let i = 0; i < Math.min(n(0), 65535); i++) this.print(this.lastCh, this.lastCp);
        return true; // printing sets the deferred wrap
      default: return false;
    }
    this.wrapNext = false;
    return true;
  }
  eraseDisplay(m) {
    const blankAll = (from, to) => {
      for (let i = from; i < to; i++) this.erase(this.lines[i], 0, this.cols);
    };
    if (m === 0) {
      this.erase(this.lines[this.r], this.c, this.cols);
      blankAll(this.r + 1, this.rows);
    } else if (m === 1) {
      this.erase(this.lines[this.r], 0, this.c + 1);
      blankAll(0, this.r);
    } else if (m === 2) blankAll(0, this.rows);
    else if (m === 3) {
      this.scrolled = [];
      this.historyCleared = true;
    }
  }
  csiOther(a, fin) {
    switch (fin) {
      case 'r': {
        const top = (a[0] || 1) - 1;
        const bottom = (a[1] || this.rows) - 1;
        if (top < bottom && bottom < this.rows) {
          this.top = top;
          this.bottom = bottom;
          this.moveTo(this.origin ? top : 0, 0);
        }
        break;
      }
      case 'g':
        if ((a[0] || 0) === 0) this.tabs.delete(this.c);
        else if (a[0] === 3) this.tabs.clear();
        break;
      case 'h': case 'l': if (a.includes(4)) this.insert = fin === 'h'; break;
      case 'c': if (!a[0]) this.reply('\x1b[?1;2c'); break;
      case 'n':
        if (a[0] === 5) this.reply('\x1b[0n');
        else if (a[0] === 6) this.reply(`\x1b[${this.r - (this.origin ? this.top : 0) + 1};${this.c + 1}R`);
        break;
      case 't': if (a[0] === 18) this.reply(`\x1b[8;${this.rows};${this.cols}t`); break;
      default: break; // other sequences change nothing we draw
    }
  }
  softReset() {
    this.cursorVisible = true;
    this.origin = this.insert = this.appCursor = false;
    this.autowrap = true;
    this.top = 0;
    this.bottom = this.rows - 1;
    this.style = new Style();
    this.pen = null;
    this.g = ['B', 'B'];
    this.gl = 0;
    this.buf.saved = null;
  }
  // text is the screen as lines of text without trailing blanks (tests).
  text() {
    return this.lines.map((l) => l.text());
  }
}

const csiKeys = {ArrowUp: 'A', ArrowDown: 'B', ArrowRight: 'C', ArrowLeft: 'D', Home: 'H', End: 'F'};
const tildeKeys = {Insert: 2, Delete: 3, PageUp: 5, PageDown: 6, F5: 15, F6: 17, F7: 18, F8: 19, F9: 20, F10: 21, F11: 23, F12: 24};
const ss3Keys = {F1: 'P', F2: 'Q', F3: 'R', F4: 'S'};

// ctrlChar is what Ctrl with key sends (xterm), or null.
function ctrlChar(key) {
  if (key === ' ' || key === '@' || key === '2') return '\x00';
  if (key >= '3' && key <= '7') return String.fromCharCode(key.charCodeAt(0) - 24); // ESC, FS, GS, RS, US
  if (key === '/' || key === '-') return '\x1f';
  if (key === '?' || key === '8') return '\x7f';
  const c = key.toUpperCase().charCodeAt(0);
  if (key.length === 1 && c >= 64 && c <= 95) return String.fromCharCode(c - 64);
  return null;
}

// keySequence is what xterm sends for a keydown event e (key, ctrlKey,
// altKey, shiftKey, metaKey), or null for a key it sends nothing for.
// appCursor is the application cursor keys mode (?1h): arrows, Home
// and End send ESC O x instead of ESC [ x.
export function keySequence(e, appCursor) {
  const mod = 1 + (e.shiftKey ? 1 : 0) + (e.altKey ? 2 : 0) + (e.ctrlKey ? 4 : 0);
  const k = e.key;
  if (csiKeys[k]) return mod > 1 ? `\x1b[1;${mod}${csiKeys[k]}` : (appCursor ? '\x1bO' : '\x1b[') + csiKeys[k];
  if (ss3Keys[k]) return mod > 1 ? `\x1b[1;${mod}${ss3Keys[k]}` : '\x1bO' + ss3Keys[k];
  if (tildeKeys[k]) return mod > 1 ? `\x1b[${tildeKeys[k]};${mod}~` : `\x1b[${tildeKeys[k]}~`;
  const esc = e.altKey ? '\x1b' : '';
  switch (k) {
    case 'Enter': return esc + '\r';
    case 'Backspace': return esc + (e.ctrlKey ? '\x08' : '\x7f');
    case 'Tab': return e.shiftKey ? '\x1b[Z' : '\t';
    case 'Escape': return '\x1b';
    default: break;
  }
  if (e.metaKey || [...k].length !== 1) return null;
  if (e.ctrlKey) {
    const c = ctrlChar(k);
    if (c !== null) return esc + c;
    return e.altKey ? k : null; // AltGr: Ctrl+Alt typing a character
  }
  return esc + k;
}

// pasteSequence is what a paste of text sends: newlines as Enter, and
// in bracketed paste mode (?2004h) between ESC [200~ and ESC [201~ (an
// end marker inside the text is removed, so a paste cannot end early).
export function pasteSequence(text, bracketed) {
  const t = text.replace(/\r?\n/g, '\r');
  return bracketed ? `\x1b[200~${t.replace(/\x1b\[20[01]~/g, '')}\x1b[201~` : t;
}
