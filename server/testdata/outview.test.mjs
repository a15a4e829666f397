// Unit tests of the web UI's output view model (server/ui/outview.js):
// lines, \r, ANSI split across chunks, the bounds and the download.
// Run by TestUIOutputViewModel (ui_console_test.go) with node --test;
// the drawing is tested in the browser (TestUIBrowserConsoleBigOutput).
import {test} from 'node:test';
import assert from 'node:assert/strict';

// A minimal document: the view builds its elements in its constructor.
const el = () => ({style: {}, classList: {add() {}}, append() {}, setAttribute() {}, addEventListener() {}, replaceChildren() {}, remove() {}});
globalThis.document = {createElement: el};
globalThis.Node = class {};
const {OutputView} = await import('../ui/outview.js');
OutputView.prototype.schedule = () => {}; // no drawing here

const texts = (v) => v.lines.slice(0, v.shown()).map((l) => l.segs.map((s) => s.t).join(''));

test('lines, and a last newline is no row', () => {
  const v = new OutputView();
  v.write('one\ntw');
  v.write('o\n');
  assert.deepEqual(texts(v), ['one', 'two']);
});

test('\\r\\n across chunks is one newline; a lone \\r rewrites the line', () => {
  const v = new OutputView();
  v.write('a\r');
  v.write('\nb\n');
  v.write(' 10%\r 50%\r100%\nabcdef\rXY\n');
  v.write('x\ry\r');
  assert.deepEqual(texts(v), ['a', 'b', '100%', 'XYcdef', 'y']);
});

test('an escape sequence split across chunks colours the text', () => {
  const v = new OutputView();
  v.write('plain \x1b[3');
  v.write('1mred\x1b[0m back\n');
  v.write('oops\n', 'stderr');
  const segs = v.lines[0].segs;
  assert.deepEqual(segs.map((s) => s.t), ['plain ', 'red', ' back']);
  assert.equal(v.styles.get(segs[0].key), null);
  assert.equal(v.styles.get(segs[1].key).style.fg, 1);
  assert.equal(v.styles.get(v.lines[1].segs[0].key).stderr, true);
  assert.deepEqual(texts(v), ['plain red back', 'oops']);
});

test('a line longer than maxLineChars goes on in the next', () => {
  const v = new OutputView({maxLineChars: 10});
  v.write('x'.repeat(25) + '\n');
  assert.deepEqual(texts(v), ['x'.repeat(10), 'x'.repeat(10), 'x'.repeat(5)]);
});

test('the view keeps a bounded number of lines and counts the rest', () => {
  const v = new OutputView({maxLines: 1000});
  let s = '';
  for (let i = 1; i <= 50000; i++) s += `${i}\n`;
  for (let i = 0; i < s.length; i += 4096) v.write(s.slice(i, i + 4096));
  assert.ok(v.lines.length <= 1000 + 512, `${v.lines.length} lines kept`);
  assert.equal(v.dropped + v.shown(), 50000);
  assert.equal(texts(v).at(-1), '50000');
});

test('the view keeps a bounded number of characters', () => {
  const v = new OutputView({maxChars: 10000, maxLineChars: 100});
  for (let i = 0; i < 1000; i++) v.write('y'.repeat(99) + '\n');
  assert.ok(v.chars <= 10000, `${v.chars} characters kept`);
  assert.equal(v.chars, texts(v).join('').length);
  assert.equal(v.dropped + v.shown(), 1000);
});

test('the download has the whole output, up to keepChars', async () => {
  const v = new OutputView();
  v.write('out\n');
  v.write('err\n', 'stderr');
  assert.equal(await v.text().text(), 'out\nerr\n');
  const small = new OutputView({keepChars: 5});
  small.write('abc');
  small.write('defgh');
  assert.equal(await small.text().text(), 'abcde\n[3 more characters were not kept]\n');
  const many = new OutputView();
  for (let i = 0; i < 600; i++) many.write(`${i}\n`);
  assert.equal((await many.text().text()).split('\n').at(-2), '599');
});
