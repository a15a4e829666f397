// Rendering of terminal output with ANSI colours into the DOM. Text is
// added as text nodes inside spans whose classes carry the style, so
// output is shown, never interpreted as HTML.

const cube = [0, 95, 135, 175, 215, 255];

// color256 is the CSS colour of an xterm 256-colour index >= 16.
function color256(n) {
  if (n >= 232) {
    const v = 8 + 10 * (n - 232);
    return `rgb(${v},${v},${v})`;
  }
  n -= 16;
  return `rgb(${cube[Math.floor(n / 36)]},${cube[Math.floor(n / 6) % 6]},${cube[n % 6]})`;
}

// Style is the SGR state: colours 0-15 become classes (ansi-fg-N,
// ansi-bg-N, themed in app.css); others an inline colour. Its fields
// change only through reset and apply, which forget the cached key.
class Style {
  constructor() {
    this.reset();
  }
  reset() {
    this.cachedKey = null;
    this.fg = null;
    this.bg = null;
    this.bold = this.dim = this.italic = this.underline = this.inverse = false;
  }
  // apply reads the parameters of one SGR sequence (ESC [ ... m).
  apply(params) {
    this.cachedKey = null;
    const a = params === '' ? [0] : params.split(/[;:]/).map((x) => (x === '' ? 0 : parseInt(x, 10)));
    for (let i = 0; i < a.length; i++) {
      const n = a[i];
      if (n === 0) this.reset();
      else if (n === 1) this.bold = true;
      else if (n === 2) this.dim = true;
      else if (n === 3) this.italic = true;
      else if (n === 4) this.underline = true;
      else if (n === 7) this.inverse = true;
      else if (n === 22) this.bold = this.dim = false;
      else if (n === 23) this.italic = false;
      else if (n === 24) this.underline = false;
      else if (n === 27) this.inverse = false;
      else if (n >= 30 && n <= 37) this.fg = n - 30;
      else if (n === 39) this.fg = null;
      else if (n >= 40 && n <= 47) this.bg = n - 40;
      else if (n === 49) this.bg = null;
      else if (n >= 90 && n <= 97) this.fg = n - 90 + 8;
      else if (n >= 100 && n <= 107) this.bg = n - 100 + 8;
      else if (n === 38 || n === 48) {
        let c = null;
        if (a[i + 1] === 5 && a[i + 2] !== undefined) {
          const idx = a[i + 2] & 255;
          c = idx < 16 ? idx : color256(idx);
          i += 2;
        } else if (a[i + 1] === 2 && a[i + 4] !== undefined) {
          c = `rgb(${a[i + 2] & 255},${a[i + 3] & 255},${a[i + 4] & 255})`;
          i += 4;
        }
        if (n === 38) this.fg = c;
        else this.bg = c;
      }
    }
  }
  clone() {
    return Object.assign(new Style(), this);
  }
  // key identifies a style, so runs of text in the same style share a span.
  key() {
    this.cachedKey ??= [this.fg, this.bg, this.bold, this.dim, this.italic, this.underline, this.inverse].join('|');
    return this.cachedKey;
  }
  isPlain() {
    return this.fg === null && this.bg === null && !this.bold && !this.dim && !this.italic && !this.underline && !this.inverse;
  }
  // span makes an element in this style.
  span() {
    const el = document.createElement('span');
    let fg = this.fg;
    let bg = this.bg;
    if (this.inverse) {
      [fg, bg] = [bg === null ? 'inv-fg' : bg, fg === null ? 'inv-bg' : fg];
    }
    const cls = [];
    if (typeof fg === 'number') cls.push(`ansi-fg-${fg}`);
    else if (fg === 'inv-fg') cls.push('ansi-inv-fg');
    else if (fg) el.style.color = fg;
    if (typeof bg === 'number') cls.push(`ansi-bg-${bg}`);
    else if (bg === 'inv-bg') cls.push('ansi-inv-bg');
    else if (bg) el.style.backgroundColor = bg;
    if (this.bold) cls.push('ansi-bold');
    if (this.dim) cls.push('ansi-dim');
    if (this.italic) cls.push('ansi-italic');
    if (this.underline) cls.push('ansi-underline');
    el.className = cls.join(' ');
    return el;
  }
}

// maxPending bounds an unfinished escape sequence held for the next
// chunk; a longer one is not a sequence and shows as text.
const maxPending = 256;

// controls matches the characters that are not printed as they are:
// C0 controls but the tab, and DEL.
const controls = /[\x00-\x08\x0a-\x1f\x7f]/g;

// AnsiParser reads terminal output in chunks (which can split a
// sequence or a \r\n) and tells a sink what to show:
// sink.text(s, style) for a run of printable text in an SGR style,
// sink.newline() for \n (and \r\n), sink.cr() for a lone \r (progress
// bars: the next text rewrites the line). Other control sequences
// (cursor moves, titles) are dropped. It goes by runs, not characters:
// a megabyte of plain lines is a few thousand slices.
export class AnsiParser {
  constructor() {
    this.style = new Style();
    this.pending = '';
    this.cr = false; // a \r seen, not yet known to be a \r\n
  }

  write(text, sink) {
    const s = this.pending + text;
    this.pending = '';
    let i = 0;
    while (i < s.length) {
      controls.lastIndex = i;
      const m = controls.exec(s);
      const j = m ? m.index : s.length;
      if (j > i) {
        this.resolveCR(sink);
        sink.text(s.slice(i, j), this.style);
      }
      if (!m) break;
      const ch = s[j];
      i = j + 1;
      if (ch === '\n') {
        this.cr = false;
        sink.newline();
      } else if (ch === '\r') {
        this.cr = true;
      } else if (ch === '\x1b') {
        const end = sequenceEnd(s, j);
        if (end < 0) {
          if (s.length - j <= maxPending) {
            this.pending = s.slice(j);
            break;
          }
          continue; // not a sequence we can read: drop the ESC
        }
        if (s[j + 1] === '[' && s[end - 1] === 'm') this.style.apply(s.slice(j + 2, end - 1));
        i = end;
      }
    }
  }

  // resolveCR tells the sink of a \r followed by text.
  resolveCR(sink) {
    if (this.cr) {
      this.cr = false;
      sink.cr();
    }
  }
}

// sequenceEnd is the index after the escape sequence at s[i] (an ESC),
// or -1 when s ends before it does.
function sequenceEnd(s, i) {
  if (i + 1 >= s.length) return -1;
  const t = s[i + 1];
  if (t === '[') {
    // CSI: parameter and intermediate bytes, then a final byte.
    let j = i + 2;
    while (j < s.length) {
      const c = s.charCodeAt(j);
      if (c >= 0x40 && c <= 0x7e) return j + 1;
      if (c < 0x20 || c > 0x3f) return j; // malformed: end it here
      j++;
    }
    return -1;
  }
  if (t === ']' || t === 'P' || t === '_' || t === '^') {
    // OSC, DCS, APC, PM: up to BEL or ESC \.
    for (let j = i + 2; j < s.length; j++) {
      if (s[j] === '\x07') return j + 1;
      if (s[j] === '\x1b') return j + 1 < s.length ? (s[j + 1] === '\\' ? j + 2 : j) : -1;
    }
    return -1;
  }
  if (t === '(' || t === ')') return i + 2 < s.length ? i + 3 : -1; // charset selection
  return i + 2;
}

export {Style, maxPending, sequenceEnd};
