// OutputView shows a command's output (stdout and stderr, with ANSI
// colours) however long it is: it keeps the last lines only (bounded in
// lines and characters, the rest counted and offered as a download),
// draws only the rows in sight (virtualised scrollback: rows have one
// height, a spacer gives the scrollbar its length) and draws at most
// once a frame, however many chunks came. It follows the end while the
// user is at the bottom and stays put when they scrolled up.

import {AnsiParser} from './ansi.js';
import {h} from './dom.js';

const defaults = {
  maxLines: 10000, // lines kept for the view
  maxChars: 2 << 20, // characters kept for the view
  maxLineChars: 4096, // a longer line is cut into several
  keepChars: 32 << 20, // characters kept for the download
  filename: 'output.txt',
  outer: null, // a scrolling element around the view that follows the end too
};

// overscan is the rows drawn above and below the visible ones.
const overscan = 20;

// newLine is an empty line: segments of text in one style each (key
// names the style and stream), n its length and col where the next
// text goes.
function newLine() {
  return {segs: noSegs, n: 0, col: 0};
}

// noSegs is the segments of every empty line, never written to: most
// lines have one segment, made as an array of one (a push would make
// room for 16).
const noSegs = Object.freeze([]);

export class OutputView {
  constructor(opts = {}) {
    this.opts = {...defaults, ...opts};
    this.lines = [newLine()];
    this.chars = 0; // characters in lines
    this.dropped = 0; // lines dropped from the front
    this.styles = new Map(); // key -> {style, stderr}, null for plain stdout
    this.parsers = {stdout: new AnsiParser(), stderr: new AnsiParser()};
    this.sinks = {stdout: this.sink('stdout'), stderr: this.sink('stderr')};
    this.kept = {blob: new Blob([]), parts: [], n: 0, lost: 0}; // the full output, for the download
    this.follow = true;
    this.autoTop = -1; // the scrollTop the view set itself, not the user
    this.rowH = 0;
    this.scheduled = false;
    this.version = 0; // counts the writes
    this.drawn = null; // what the last render drew: rows first to end of version

    this.rows = h('div', {class: 'vout-rows'});
    this.spacer = h('div', {class: 'vout-spacer'}, this.rows);
    this.scroller = h('div', {class: 'vout-scroll', tabindex: '0', 'aria-label': 'Output'}, this.spacer);
    this.count = h('span', {});
    this.notice = h('div', {class: 'vout-dropped', hidden: true}, this.count,
      h('button', {type: 'button', class: 'link', onclick: () => this.download()}, 'Download the full output'));
    this.jump = h('button', {type: 'button', class: 'vout-jump', hidden: true, onclick: () => this.toEnd()}, '↓ To the end');
    this.el = h('div', {class: 'out vout'}, this.notice, this.jump, this.scroller); // the button before the rows: the text ends with the output
    this.scroller.addEventListener('scroll', () => this.scrolled());
    if (typeof ResizeObserver === 'function') new ResizeObserver(() => this.schedule()).observe(this.scroller);
  }

  // write adds text a stream printed.
  write(text, stream = 'stdout') {
    if (!text) return;
    this.keep(text);
    const s = stream === 'stderr' ? 'stderr' : 'stdout';
    this.parsers[s].write(text, this.sinks[s]);
    this.version++;
    this.trim();
    this.schedule();
  }

  // keep adds text to the copy for the download, up to keepChars.
  keep(text) {
    const k = this.kept;
    const room = this.opts.keepChars - k.n;
    if (room < text.length) {
      k.lost += text.length - Math.max(room, 0);
      text = room > 0 ? text.slice(0, room) : '';
    }
    if (!text) return;
    k.parts.push(text);
    k.n += text.length;
    if (k.parts.length >= 256) {
      k.blob = new Blob([k.blob, ...k.parts]); // out of the JS heap
      k.parts = [];
    }
  }

  // text is the full output kept for the download, as a Blob.
  text() {
    const k = this.kept;
    const tail = k.lost ? [`\n[${k.lost.toLocaleString('en-US')} more characters were not kept]\n`] : [];
    return new Blob([k.blob, ...k.parts, ...tail], {type: 'text/plain;charset=utf-8'});
  }

  download() {
    const url = URL.createObjectURL(this.text());
    const a = h('a', {href: url, download: this.opts.filename, hidden: true});
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
  }

  // sink receives a stream's parsed text into the lines.
  sink(stream) {
    let last = null; // the style key of the last text, and its view key
    let key = '';
    return {
      text: (t, style) => {
        if (style.key() !== last) {
          last = style.key();
          key = this.styleKey(stream, style);
        }
        this.addText(t, key);
      },
      newline: () => this.newline(),
      cr: () => {
        this.last().col = 0;
      },
    };
  }

  last() {
    return this.lines[this.lines.length - 1];
  }

  // styleKey names a stream's style, with a template element for it.
  styleKey(stream, style) {
    const key = `${stream}|${style.key()}`;
    if (!this.styles.has(key)) {
      this.styles.set(key, stream === 'stderr' || !style.isPlain() ? {style: style.clone(), stderr: stream === 'stderr'} : null);
    }
    return key;
  }

  addText(t, key) {
    const max = this.opts.maxLineChars;
    for (;;) {
      const line = this.last();
      if (line.col < line.n) {
        const part = t.slice(0, line.n - line.col);
        overwrite(line, part, key);
        if (part.length === t.length) return;
        t = t.slice(part.length);
        continue;
      }
      const fit = t.length <= max - line.n ? t : t.slice(0, Math.max(max - line.n, 0));
      if (fit) {
        const seg = line.segs[line.segs.length - 1];
        if (seg && seg.key === key) seg.t += fit;
        else if (line.segs === noSegs) line.segs = [{key, t: fit}];
        else line.segs.push({key, t: fit});
        line.n += fit.length;
        line.col = line.n;
        this.chars += fit.length;
      }
      if (fit.length === t.length) return;
      t = t.slice(fit.length);
      this.newline(); // too long a line goes on in the next
    }
  }

  newline() {
    this.lines.push(newLine());
  }

  // trim drops lines from the front beyond maxLines or maxChars (the
  // line being written stays); it drops in batches, so a line costs
  // O(1) however long the output.
  trim() {
    const {maxLines, maxChars} = this.opts;
    const n = this.lines.length;
    if (n <= maxLines + 512 && this.chars <= maxChars) return;
    let k = Math.max(0, n - maxLines);
    let c = this.chars;
    for (let i = 0; i < k; i++) c -= this.lines[i].n;
    while (c > maxChars * 0.9 && k < n - 1) c -= this.lines[k++].n;
    if (!k) return;
    this.chars = c;
    this.lines.splice(0, k);
    this.dropped += k;
  }

  // shown is the number of rows to draw: a last empty line (the output
  // ended with a newline) is not a row.
  shown() {
    const n = this.lines.length;
    return n > 1 && this.last().n === 0 ? n - 1 : n;
  }

  scrolled() {
    this.userMoved();
    this.schedule();
  }

  // userMoved notes a scroll the view did not make itself: at the end,
  // the view follows it; elsewhere, it stays put. Checked on each scroll
  // event and before each render (a render can come before the event).
  userMoved() {
    const sc = this.scroller;
    const top = sc.scrollTop;
    if (this.autoTop >= 0 && Math.abs(top - this.autoTop) <= 1) return;
    this.follow = sc.scrollHeight - top - sc.clientHeight <= Math.max(this.rowH, 4);
    this.autoTop = this.follow ? -1 : top;
  }

  // schedule draws on the next frame (or soon, in a tab in the
  // background), once for all the writes until then.
  schedule() {
    if (this.scheduled) return;
    this.scheduled = true;
    const go = () => {
      if (!this.scheduled) return;
      this.scheduled = false;
      this.render();
    };
    requestAnimationFrame(go);
    setTimeout(go, 250);
  }

  // render draws the rows in sight.
  render() {
    const sc = this.scroller;
    const outer = this.opts.outer;
    const outerAtBottom = outer && outer.scrollHeight - outer.scrollTop - outer.clientHeight < 40;
    if (!this.rowH && !this.measure()) return;
    const rowH = this.rowH;
    this.userMoved();
    const n = this.shown();
    const was = sc.scrollTop; // before a shorter spacer clamps it
    const shift = this.drawn ? this.dropped - this.drawn.dropped : 0;
    this.spacer.style.height = `${n * rowH}px`;
    if (this.follow) this.setTop(sc.scrollHeight);
    else if (shift) this.setTop(was - shift * rowH); // the lines read stay in place
    const top = sc.scrollTop;
    const first = Math.max(0, Math.floor(top / rowH) - overscan);
    const end = Math.min(n, Math.ceil((top + (sc.clientHeight || rowH * 40)) / rowH) + overscan);
    this.showDropped(n, end - first);
    const d = this.drawn;
    if (!d || d.first !== first || d.end !== end || d.version !== this.version || d.dropped !== this.dropped) {
      // Only when something changed: a redraw would end a selection.
      this.rows.style.transform = `translateY(${first * rowH}px)`;
      const rows = [];
      for (let i = first; i < end; i++) rows.push(this.row(this.lines[i]));
      this.rows.replaceChildren(...rows);
      this.drawn = {first, end, version: this.version, dropped: this.dropped};
    }
    this.jump.hidden = this.follow || top + sc.clientHeight >= sc.scrollHeight - rowH;
    if (outerAtBottom) outer.scrollTop = outer.scrollHeight;
  }

  // toEnd scrolls to the end and follows it again.
  toEnd() {
    this.follow = true;
    this.setTop(this.scroller.scrollHeight);
    this.schedule();
  }

  setTop(top) {
    this.scroller.scrollTop = top;
    this.autoTop = this.scroller.scrollTop;
  }

  // measure finds the height of a row; 0 while the view is not laid out.
  measure() {
    const probe = h('div', {class: 'vout-row'}, 'X');
    this.rows.replaceChildren(probe);
    this.rowH = probe.getBoundingClientRect().height;
    probe.remove();
    this.drawn = null;
    return this.rowH;
  }

  // showDropped says how many lines are not shown, with the download;
  // the download is offered too when the rows are more than those drawn
  // (a copy of the page's text would miss the others).
  showDropped(n, drawn) {
    this.notice.hidden = this.dropped === 0 && n <= drawn;
    if (this.dropped) {
      this.count.textContent = `${this.dropped.toLocaleString('en-US')} earlier lines are not shown (the view keeps the last ${n.toLocaleString('en-US')}). `;
    } else if (n > drawn) {
      this.count.textContent = `${n.toLocaleString('en-US')} lines. `;
    }
  }

  // row draws one line; the newline at its end makes a copy of several
  // rows come out as lines.
  row(line) {
    const el = document.createElement('div');
    el.className = 'vout-row';
    for (const seg of line.segs) {
      const tpl = this.styles.get(seg.key);
      if (!tpl) {
        el.append(seg.t);
        continue;
      }
      // A new span, not a clone: colours go in through the CSSOM, which
      // the page's CSP allows (a copied style attribute may not be).
      const sp = tpl.style.span();
      if (tpl.stderr) sp.classList.add('stderr');
      sp.append(seg.t);
      el.append(sp);
    }
    el.append('\n');
    return el;
  }
}

// overwrite writes t at line.col over what is there (after a \r),
// within the line's length.
function overwrite(line, t, key) {
  const from = line.col;
  const to = from + t.length;
  const before = [];
  const after = [];
  let pos = 0;
  for (const seg of line.segs) {
    const a = pos;
    const b = pos + seg.t.length;
    pos = b;
    if (a < from) before.push(b <= from ? seg : {key: seg.key, t: seg.t.slice(0, from - a)});
    if (b > to) after.push(a >= to ? seg : {key: seg.key, t: seg.t.slice(to - a)});
  }
  line.segs = [...before, {key, t}, ...after];
  line.col = to;
}
