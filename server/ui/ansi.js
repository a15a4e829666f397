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
// ansi-bg-N, themed in app.css); others an inline colour.
class Style {
  constructor() {
    this.reset();
  }
  reset() {
    this.fg = null;
    this.bg = null;
    this.bold = this.dim = this.italic = this.underline = this.inverse = false;
  }
  // apply reads the parameters of one SGR sequence (ESC [ ... m).
  apply(params) {
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
    return [this.fg, this.bg, this.bold, this.dim, this.italic, this.underline, this.inverse].join('|');
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

// AnsiWriter appends text with SGR colours to an element. It keeps its
// state between writes: output arrives in chunks that can split a
// sequence. Other control sequences (cursor moves, titles) are dropped.
export class AnsiWriter {
  constructor(target, extraClass) {
    this.target = target;
    this.extraClass = extraClass || '';
    this.style = new Style();
    this.pending = '';
    this.lastKey = null;
    this.lastNode = null;
  }

  write(text) {
    let s = this.pending + text;
    this.pending = '';
    let out = '';
    let i = 0;
    while (i < s.length) {
      const ch = s[i];
      if (ch === '\x1b') {
        if (out) {
          this.emit(out);
          out = '';
        }
        const end = sequenceEnd(s, i);
        if (end < 0) {
          if (s.length - i <= maxPending) {
            this.pending = s.slice(i);
            break;
          }
          i++; // not a sequence we can read: drop the ESC
          continue;
        }
        if (s[i + 1] === '[' && s[end - 1] === 'm') this.style.apply(s.slice(i + 2, end - 1));
        i = end;
        continue;
      }
      if (ch === '\r') {
        i++;
        continue; // \r\n is a newline; a lone \r (progress bars) just continues
      }
      const code = ch.charCodeAt(0);
      if (code < 32 && ch !== '\n' && ch !== '\t') {
        i++;
        continue;
      }
      out += ch;
      i++;
    }
    if (out) this.emit(out);
  }

  emit(text) {
    const key = this.style.key();
    if (this.lastNode && this.lastKey === key && this.lastNode.parentNode === this.target) {
      this.lastNode.append(text);
      return;
    }
    const node = this.style.span();
    if (this.extraClass) node.classList.add(this.extraClass);
    node.append(text);
    this.target.append(node);
    this.lastNode = node;
    this.lastKey = key;
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
