// Markdown for what the agent writes (its messages and final answers),
// rendered safely. The text comes from a model, which reads whatever a
// sandbox, a web page or a file showed it: it is hostile. So the renderer
// builds DOM nodes from a fixed set of tags and attributes (never HTML
// from a string): raw HTML in the text stays text, links go only to
// http:, https:, mailto: or a #fragment and open in a new tab without an
// opener, and an image is never loaded (its syntax becomes a link).
//
// The subset is CommonMark's blocks (ATX and setext headings, paragraphs,
// fenced and indented code, block quotes, nested ordered and unordered
// lists, thematic breaks) and inlines (emphasis, strong, code spans,
// links, autolinks, backslash escapes, entities), with GFM's tables,
// strikethrough and bare http(s) URLs. A single newline is a line break,
// as chat apps show it. Reference links and HTML are not supported.

const maxInput = 200000; // longer text is shown as text
const maxDepth = 12; // block quotes and lists nested deeper are text

// The only elements and attributes the renderer ever makes.
const tags = new Set(['h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'p', 'br', 'hr', 'em', 'strong', 'del', 'code', 'pre',
  'blockquote', 'ul', 'ol', 'li', 'table', 'thead', 'tbody', 'tr', 'th', 'td', 'div', 'a', 'span']);
const attrNames = new Set(['href', 'title', 'class', 'start', 'target', 'rel']);

// renderMarkdown returns a DocumentFragment with src rendered. Text it
// cannot render (too long, too deeply nested) comes back as plain text.
export function renderMarkdown(src) {
  const frag = document.createDocumentFragment();
  const text = String(src ?? '');
  try {
    if (text.length > maxInput) throw new Error('too long');
    for (const n of parseMarkdown(text)) frag.append(build(n));
  } catch {
    frag.replaceChildren(document.createTextNode(text));
  }
  return frag;
}

// build makes the DOM of one node, checking it against the allowed sets.
function build(n) {
  if (typeof n === 'string') return document.createTextNode(n);
  if (!tags.has(n.tag)) return document.createTextNode('');
  const el = document.createElement(n.tag);
  for (const [k, v] of Object.entries(n.attrs || {})) {
    if (attrNames.has(k) && v !== null && v !== undefined) el.setAttribute(k, String(v));
  }
  for (const c of n.kids || []) el.append(build(c));
  return el;
}

// safeHref returns the URL a link may point to, or null: absolute http:,
// https: and mailto: URLs (as the browser parses them: "java\tscript:"
// is javascript:) and #fragments of this page.
export function safeHref(raw) {
  const s = String(raw ?? '').trim();
  if (!s) return null;
  if (s.startsWith('#')) return /[\u0000-\u001f\u007f\s]/.test(s) ? null : s;
  let u;
  try {
    u = new URL(s);
  } catch {
    return null; // relative: it would point into this app
  }
  return ['http:', 'https:', 'mailto:'].includes(u.protocol) ? u.href : null;
}

const el = (tag, attrs, kids) => ({tag, attrs: attrs || null, kids: kids || []});

function link(href, title, kids) {
  return el('a', {href, title: title || null, target: '_blank', rel: 'noopener noreferrer'}, kids);
}

// ---- blocks ----

// parseMarkdown returns the tree of src: nodes {tag, attrs, kids} and strings.
export function parseMarkdown(src) {
  const lines = src.replace(/\r\n?/g, '\n').replace(/\u0000/g, '\ufffd').split('\n').map(expandTabs);
  return parseBlocks(lines, 0);
}

function expandTabs(line) {
  const m = /^[ \t]*/.exec(line)[0];
  if (!m.includes('\t')) return line;
  let col = 0;
  for (const c of m) col = c === '\t' ? col + 4 - (col % 4) : col + 1;
  return ' '.repeat(col) + line.slice(m.length);
}

const blank = (l) => /^[ \t]*$/.test(l);
const indentOf = (l) => /^ */.exec(l)[0].length;
const atx = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const hr = /^ {0,3}(?:(?:\*[ \t]*){3,}|(?:-[ \t]*){3,}|(?:_[ \t]*){3,})$/;
const fence = /^( {0,3})(`{3,}|~{3,})(.*)$/;
const quote = /^ {0,3}> ?/;
const setext = /^ {0,3}(=+|-+)[ \t]*$/;

// listMarker reads a list item's marker: its kind, its number and the
// column its content starts at.
function listMarker(line) {
  const m = /^( {0,3})([-+*]|(\d{1,9})([.)]))([ \t]+|$)(.*)$/.exec(line);
  if (!m) return null;
  const width = m[1].length + m[2].length;
  const spaces = m[5].length;
  const empty = m[6] === '';
  return {
    kind: m[3] ? `ol${m[4]}` : m[2],
    start: m[3] ? Number(m[3]) : null,
    empty,
    offset: empty || spaces > 4 ? width + 1 : width + spaces,
  };
}

function fenceOpen(line) {
  const m = fence.exec(line);
  if (!m || (m[2][0] === '`' && m[3].includes('`'))) return null;
  return {indent: m[1].length, ch: m[2][0], len: m[2].length, info: m[3].trim()};
}

// startsBlock: does line begin a block that ends a paragraph?
function startsBlock(line, depth) {
  if (atx.test(line) || hr.test(line) || fenceOpen(line)) return true;
  if (depth >= maxDepth) return false;
  if (quote.test(line)) return true;
  const m = listMarker(line);
  return !!m && !m.empty && (m.start === null || m.start === 1);
}

// parseBlocks returns the blocks of lines; out.loose says whether a
// blank line separates two of them (a list item's, for a loose list).
function parseBlocks(lines, depth) {
  const out = [];
  let gap = false;
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if (!blank(line) && gap) out.loose = true;
    gap = blank(line) && out.length > 0;
    if (blank(line)) {
      i++;
    } else if ((m = fenceOpen(line))) {
      i = fencedCode(lines, i, m, out);
    } else if ((m = atx.exec(line))) {
      out.push(el(`h${m[1].length}`, null, inline(m[2] || '')));
      i++;
    } else if (hr.test(line)) {
      out.push(el('hr'));
      i++;
    } else if (depth < maxDepth && quote.test(line)) {
      i = blockquote(lines, i, depth, out);
    } else if (depth < maxDepth && (m = listMarker(line))) {
      i = list(lines, i, depth, out);
    } else if (indentOf(line) >= 4) {
      i = indentedCode(lines, i, out);
    } else if (tableAt(lines, i)) {
      i = table(lines, i, out);
    } else {
      i = paragraph(lines, i, depth, out);
    }
  }
  return out;
}

function codeBlock(text, lang) {
  const cls = lang ? `language-${lang.replace(/[^A-Za-z0-9_+#.-]/g, '').slice(0, 40)}` : null;
  return el('pre', null, [el('code', {class: cls}, [text])]);
}

function fencedCode(lines, i, f, out) {
  const body = [];
  const close = new RegExp(`^ {0,3}${f.ch === '`' ? '`' : '~'}{${f.len},}[ \\t]*$`);
  for (i++; i < lines.length && !close.test(lines[i]); i++) {
    body.push(lines[i].slice(Math.min(f.indent, indentOf(lines[i]))));
  }
  out.push(codeBlock(body.length ? `${body.join('\n')}\n` : '', unescape(f.info.split(/\s+/)[0] || '')));
  return i + 1;
}

function indentedCode(lines, i, out) {
  const body = [];
  for (; i < lines.length && (indentOf(lines[i]) >= 4 || blank(lines[i])); i++) body.push(lines[i].slice(4));
  for (; blank(body[body.length - 1]); i--) body.pop(); // trailing blank lines are not code
  out.push(codeBlock(`${body.join('\n')}\n`, ''));
  return i;
}

function blockquote(lines, i, depth, out) {
  const inner = [];
  let para = false; // the last line was paragraph text: the next may continue it lazily
  for (; i < lines.length; i++) {
    const l = lines[i];
    if (quote.test(l)) {
      const rest = l.replace(quote, '');
      inner.push(rest);
      para = !blank(rest) && !startsBlock(rest, depth + 1);
    } else if (para && !blank(l) && !startsBlock(l, depth)) {
      inner.push(l);
    } else {
      break;
    }
  }
  out.push(el('blockquote', null, parseBlocks(inner, depth + 1)));
  return i;
}

// list reads the items of one list: same kind of marker, each item's
// lines indented to its content (or lazily continuing its paragraph).
function list(lines, i, depth, out) {
  const first = listMarker(lines[i]);
  const items = [];
  let loose = false;
  let gap = 0; // blank lines after the previous item
  while (i < lines.length) {
    const m = listMarker(lines[i]);
    if (!m || m.kind !== first.kind || hr.test(lines[i])) break;
    if (gap) loose = true;
    const body = [m.empty ? '' : lines[i].slice(m.offset)];
    let lastBlank = m.empty;
    for (i++; i < lines.length; i++) {
      const l = lines[i];
      if (blank(l)) {
        body.push('');
        lastBlank = true;
      } else if (indentOf(l) >= m.offset) {
        body.push(l.slice(m.offset));
        lastBlank = false;
      } else if (!lastBlank && !listMarker(l) && !startsBlock(l, depth) && !tableAt(lines, i)) {
        body.push(l.trimStart()); // a lazy continuation of the paragraph
      } else {
        break;
      }
    }
    for (gap = 0; body.length > 1 && blank(body[body.length - 1]); gap++) body.pop();
    const task = /^\[([ xX])\][ \t]/.exec(body[0]);
    if (task) body[0] = `${task[1] === ' ' ? '\u2610' : '\u2611'} ${body[0].slice(task[0].length)}`;
    const kids = parseBlocks(body, depth + 1);
    if (kids.loose) loose = true;
    items.push(kids);
  }
  i -= gap; // the blank lines after the list are not its own
  const lis = items.map((kids) => el('li', null, loose ? kids : kids.flatMap((k) => (k.tag === 'p' ? k.kids : [k]))));
  const ordered = first.start !== null;
  out.push(el(ordered ? 'ol' : 'ul', ordered && first.start !== 1 ? {start: first.start} : null, lis));
  return i;
}

function paragraph(lines, i, depth, out) {
  const text = [lines[i].trim()];
  for (i++; i < lines.length; i++) {
    const l = lines[i];
    if (blank(l)) break;
    const s = setext.exec(l);
    if (s) {
      out.push(el(s[1][0] === '=' ? 'h1' : 'h2', null, inline(text.join('\n'))));
      return i + 1;
    }
    if (startsBlock(l, depth) || tableAt(lines, i)) break;
    text.push(l.trim());
  }
  out.push(el('p', null, inline(text.join('\n'))));
  return i;
}

// ---- tables (GFM) ----

// cells splits a table row on its unescaped pipes.
function cells(line) {
  let s = line.trim();
  if (s.startsWith('|')) s = s.slice(1);
  if (s.endsWith('|') && !s.endsWith('\\|')) s = s.slice(0, -1);
  const out = [];
  let cur = '';
  for (let i = 0; i < s.length; i++) {
    if (s[i] === '\\' && s[i + 1] === '|') {
      cur += '|';
      i++;
    } else if (s[i] === '|') {
      out.push(cur.trim());
      cur = '';
    } else {
      cur += s[i];
    }
  }
  out.push(cur.trim());
  return out;
}

// tableAt: a header row then a delimiter row with as many cells.
function tableAt(lines, i) {
  if (i + 1 >= lines.length || !lines[i].includes('|') || indentOf(lines[i]) >= 4) return false;
  const d = lines[i + 1];
  if (!/^ {0,3}[|:-][|:\- \t]*$/.test(d) || !d.includes('-')) return false;
  const dc = cells(d);
  return dc.every((c) => /^:?-+:?$/.test(c)) && dc.length === cells(lines[i]).length;
}

function table(lines, i, out) {
  const align = cells(lines[i + 1]).map((c) => (c.endsWith(':') ? (c.startsWith(':') ? 'center' : 'right') : c.startsWith(':') ? 'left' : null));
  const row = (line, tag) => {
    const cs = cells(line);
    return el('tr', null, align.map((a, k) => el(tag, a ? {class: `align-${a}`} : null, inline(cs[k] || ''))));
  };
  const head = el('thead', null, [row(lines[i], 'th')]);
  const body = [];
  for (i += 2; i < lines.length && !blank(lines[i]) && !startsBlock(lines[i], 0); i++) body.push(row(lines[i], 'td'));
  out.push(el('div', {class: 'md-table'}, [el('table', null, body.length ? [head, el('tbody', null, body)] : [head])]));
  return i;
}

// ---- inlines ----

const punct = /[\p{P}\p{S}]/u;
const asciiPunct = /[!-/:-@[-`{-~]/;
const entities = {amp: '&', lt: '<', gt: '>', quot: '"', apos: "'", nbsp: '\u00a0', copy: '©', reg: '®', trade: '™',
  hellip: '…', mdash: '—', ndash: '–', lsquo: '‘', rsquo: '’', ldquo: '“', rdquo: '”', times: '×', middot: '·', bull: '•', rarr: '→', larr: '←'};

function entity(text, i) {
  const m = /^&(?:#(\d{1,7})|#[xX]([0-9a-fA-F]{1,6})|([a-zA-Z][a-zA-Z0-9]{1,31}));/.exec(text.slice(i, i + 40));
  if (!m) return null;
  if (m[3]) return Object.hasOwn(entities, m[3]) ? {s: entities[m[3]], len: m[0].length} : null;
  const cp = m[1] ? Number(m[1]) : parseInt(m[2], 16);
  return {s: cp === 0 || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) ? '\ufffd' : String.fromCodePoint(cp), len: m[0].length};
}

// unescape resolves backslash escapes and entities (link destinations,
// titles, a code block's language).
function unescape(s) {
  let out = '';
  for (let i = 0; i < s.length; i++) {
    const e = s[i] === '&' ? entity(s, i) : null;
    if (s[i] === '\\' && asciiPunct.test(s[i + 1] || '')) out += s[++i];
    else if (e) {
      out += e.s;
      i += e.len - 1;
    } else out += s[i];
  }
  return out;
}

// inline parses a paragraph's (or heading's, or cell's) text: a first
// pass makes text, nodes, delimiter runs (* _ ~) and brackets; links are
// closed as their "]" comes; emphasis is matched as CommonMark says.
function inline(text) {
  const items = [];
  const brackets = [];
  const noCloser = new Set(); // backtick run lengths with no closing run further on
  const meter = {left: 4 * text.length + maxDest}; // characters link destinations may read
  let buf = '';
  const flush = () => {
    if (buf) items.push({type: 'text', s: buf});
    buf = '';
  };
  const node = (n) => {
    flush();
    items.push({type: 'node', node: n});
  };
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '\\') {
      if (text[i + 1] === '\n') {
        node(el('br'));
        i++;
      } else if (asciiPunct.test(text[i + 1] || '')) {
        buf += text[++i];
      } else {
        buf += c;
      }
    } else if (c === '`') {
      const n = /^`+/.exec(text.slice(i, i + 1000))[0].length;
      const end = noCloser.has(n) ? -1 : closingTicks(text, i + n, n);
      if (end < 0) {
        noCloser.add(n);
        buf += '`'.repeat(n);
        i += n - 1;
      } else {
        let code = text.slice(i + n, end).replace(/\n/g, ' ');
        if (/^ .*[^ ].* $|^ [^ ] $/s.test(code)) code = code.slice(1, -1);
        node(el('code', null, [code]));
        i = end + n - 1;
      }
    } else if (c === '*' || c === '_' || c === '~') {
      let n = 1;
      while (text[i + n] === c) n++;
      flush();
      items.push(delim(text, i, n));
      i += n - 1;
    } else if (c === '<') {
      const a = autolink(text, i);
      if (a) {
        node(a.node);
        i += a.len - 1;
      } else {
        buf += c;
      }
    } else if (c === '&') {
      const e = entity(text, i);
      if (e) {
        buf += e.s;
        i += e.len - 1;
      } else {
        buf += c;
      }
    } else if (c === '\n') {
      buf = buf.replace(/ +$/, '');
      node(el('br'));
    } else if (c === '[' || (c === '!' && text[i + 1] === '[')) {
      flush();
      const image = c === '!';
      items.push({type: 'text', s: image ? '![' : '['});
      brackets.push({at: items.length - 1, image, active: true});
      if (image) i++;
    } else if (c === ']') {
      const b = brackets.pop();
      const dest = b && b.active ? destination(text, i + 1, meter) : null;
      if (!dest) {
        buf += c;
        continue;
      }
      flush();
      processEmphasis(items, b.at + 1);
      const kids = toNodes(items, b.at + 1, items.length);
      items.length = b.at;
      items.push({type: 'node', node: linkNode(b.image, dest, kids)});
      if (!b.image) for (const o of brackets) o.active = false; // no link in a link
      i = dest.end - 1;
    } else {
      buf += c;
    }
  }
  flush();
  processEmphasis(items, 0);
  return linkify(toNodes(items, 0, items.length));
}

// closingTicks finds the next run of exactly n backticks from i, or -1.
function closingTicks(text, i, n) {
  for (;;) {
    const j = text.indexOf('`', i);
    if (j < 0) return -1;
    let k = j;
    while (text[k] === '`') k++;
    if (k - j === n) return j;
    i = k;
  }
}

// delim is a run of * _ or ~ with whether it can open or close emphasis
// (CommonMark's left- and right-flanking rules).
function delim(text, i, n) {
  const ch = text[i];
  const before = i > 0 ? text[i - 1] : ' ';
  const after = i + n < text.length ? text[i + n] : ' ';
  const ws = (x) => /\s/u.test(x);
  const left = !ws(after) && (!punct.test(after) || ws(before) || punct.test(before));
  const right = !ws(before) && (!punct.test(before) || ws(after) || punct.test(after));
  let canOpen = left;
  let canClose = right;
  if (ch === '_') {
    canOpen = left && (!right || punct.test(before));
    canClose = right && (!left || punct.test(after));
  }
  return {type: 'delim', ch, n, orig: n, canOpen, canClose, opens: [], closes: [], prev: -1};
}

// processEmphasis matches the delimiter runs of items[lo:] as
// CommonMark's "process emphasis" does; matched runs record the tags they
// open and close, and toNodes builds the tree from them.
function processEmphasis(items, lo) {
  const bottom = {};
  let top = -1; // the latest delimiter still on the stack
  for (let c = lo; c < items.length; c++) {
    const C = items[c];
    if (C.type !== 'delim') continue;
    C.prev = top;
    if (!C.canClose) {
      top = c;
      continue;
    }
    while (C.n > 0) {
      const key = `${C.ch}${C.canOpen ? 1 : 0}${C.orig % 3}`;
      const floor = bottom[key] ?? lo - 1;
      let o = C.prev;
      while (o > floor && !matches(items[o], C)) o = items[o].prev;
      if (o <= floor) {
        bottom[key] = C.prev;
        break;
      }
      const O = items[o];
      const use = C.ch === '~' ? C.n : C.n >= 2 && O.n >= 2 ? 2 : 1;
      const tag = C.ch === '~' ? 'del' : use === 2 ? 'strong' : 'em';
      O.opens.unshift(tag);
      C.closes.push(tag);
      O.n -= use;
      C.n -= use;
      C.prev = O.n > 0 ? o : O.prev; // the runs between are done
    }
    top = C.n > 0 && C.canOpen ? c : C.prev;
  }
}

function matches(O, C) {
  if (O.ch !== C.ch || !O.canOpen || O.n === 0) return false;
  if (C.ch === '~') return O.n === C.n && C.n <= 2;
  const odd = (O.canClose || C.canOpen) && (O.orig + C.orig) % 3 === 0 && !(O.orig % 3 === 0 && C.orig % 3 === 0);
  return !odd;
}

// toNodes turns items[lo:hi] into nodes, nesting the matched emphasis.
function toNodes(items, lo, hi) {
  const root = {kids: []};
  const stack = [root];
  const put = (n) => {
    const kids = stack[stack.length - 1].kids;
    if (typeof n === 'string' && typeof kids[kids.length - 1] === 'string') kids[kids.length - 1] += n;
    else kids.push(n);
  };
  for (let k = lo; k < hi; k++) {
    const it = items[k];
    if (it.type === 'text') put(it.s);
    else if (it.type === 'node') put(it.node);
    else {
      for (let j = 0; j < it.closes.length && stack.length > 1; j++) {
        const done = stack.pop();
        put(el(done.tag, null, done.kids));
      }
      if (it.n > 0) put(it.ch.repeat(it.n));
      for (const tag of it.opens) stack.push({tag, kids: []});
    }
  }
  while (stack.length > 1) {
    const done = stack.pop();
    put(el(done.tag, null, done.kids));
  }
  return root.kids;
}

// destination reads "(url "title")" at i, or null. It looks at most
// maxDest characters ahead and takes what it reads from meter.left: a
// text full of "](" still costs linear time.
const maxDest = 4096;
function destination(text, i, meter) {
  if (text[i] !== '(' || meter.left <= 0) return null;
  const stop = Math.min(text.length, i + maxDest, i + meter.left);
  const d = destinationIn(text, i, stop);
  meter.left -= d ? d.end - i : stop - i;
  return d;
}

function destinationIn(text, i, stop) {
  let j = i + 1;
  const skip = () => {
    while (j < stop && (text[j] === ' ' || text[j] === '\t' || text[j] === '\n')) j++;
  };
  skip();
  let url = '';
  if (text[j] === '<') {
    const end = text.slice(j + 1, stop).search(/[\n<>]/) + j + 1; // the first of them after "<"
    if (end <= j || text[end] !== '>') return null;
    url = text.slice(j + 1, end);
    j = end + 1;
  } else {
    const start = j;
    let depth = 0;
    for (; j < stop; j++) {
      const c = text.charCodeAt(j);
      if (c === 92 && asciiPunct.test(text[j + 1] || '')) j++; // backslash
      else if (c === 40) depth++; // (
      else if (c === 41) { // )
        if (depth === 0) break;
        depth--;
      } else if (c <= 32 || c === 127) break;
    }
    url = text.slice(start, j);
  }
  const afterURL = j;
  skip();
  let title = '';
  const q = text[j];
  if (j > afterURL && (q === '"' || q === "'" || q === '(')) {
    const close = q === '(' ? ')' : q;
    let k = j + 1;
    for (; k < stop && text[k] !== close; k++) if (text[k] === '\\') k++;
    if (k >= stop) return null;
    title = text.slice(j + 1, k);
    j = k + 1;
    skip();
  }
  if (j >= stop || text[j] !== ')') return null;
  return {url: unescape(url), title: unescape(title), end: j + 1};
}

// linkNode is a link, or its text when the URL is not allowed; an
// image is a link to it, never loaded.
function linkNode(image, dest, kids) {
  const href = safeHref(dest.url);
  if (image) {
    const alt = plain(kids) || 'image';
    return href ? link(href, dest.title || 'an image, not loaded', [`image: ${alt}`]) : el('span', {class: 'md-blocked'}, [alt]);
  }
  return href ? link(href, dest.title, kids) : el('span', {class: 'md-blocked', title: 'not a link: links here go only to http(s) and mailto addresses'}, kids);
}

function plain(kids) {
  return kids.map((k) => (typeof k === 'string' ? k : plain(k.kids || []))).join('');
}

// autolink reads <scheme:...> or <user@host> at i.
function autolink(text, i) {
  const m = /^<([a-zA-Z][a-zA-Z0-9+.-]{1,31}:[^\s<>\u0000-\u001f]*)>/.exec(text.slice(i, i + 2048)) ||
    /^<([a-zA-Z0-9.!#$%&'*+/=?^_`{|}~-]+@[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*)>/.exec(text.slice(i, i + 512));
  if (!m) return null;
  const href = safeHref(m[1].includes(':') ? m[1] : `mailto:${m[1]}`);
  return href ? {node: link(href, null, [m[1]]), len: m[0].length} : null;
}

// linkify makes links of bare http(s) URLs in text outside links and code.
function linkify(nodes) {
  const out = [];
  for (const n of nodes) {
    if (typeof n !== 'string') {
      if (n.tag !== 'a' && n.tag !== 'code') n.kids = linkify(n.kids);
      out.push(n);
      continue;
    }
    const re = /(^|[\s(*_~])(https?:\/\/[^\s<>]+)/g;
    let last = 0;
    let m;
    while ((m = re.exec(n))) {
      let url = m[2].replace(/[?!.,:;*_~'"]+$/, '');
      while (url.endsWith(')') && (url.match(/\(/g) || []).length < (url.match(/\)/g) || []).length) url = url.slice(0, -1);
      const start = m.index + m[1].length;
      const href = safeHref(url);
      if (!href) continue;
      if (start > last) out.push(n.slice(last, start));
      out.push(link(href, null, [url]));
      last = start + url.length;
      re.lastIndex = last;
    }
    if (last < n.length) out.push(n.slice(last));
  }
  return out;
}
