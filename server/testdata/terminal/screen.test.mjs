// Unit tests of the web terminal's screen model (server/ui/screen.js):
// the sequences full-screen programs send, and the keys xterm sends.
// Run by TestUITerminalScreen (server/ui_terminal_test.go), which copies
// screen.js and ansi.js beside this file.

import {test} from 'node:test';
import assert from 'node:assert/strict';
import {Screen, keySequence, pasteSequence, charWidth} from './screen.js';

const ESC = '\x1b';
const CSI = ESC + '[';

function screen(cols = 10, rows = 5, ...writes) {
  const s = new Screen(cols, rows);
  for (const w of writes) s.write(w);
  return s;
}

test('text, CR LF, deferred wrap at the last column', () => {
  const s = screen(5, 3, 'abcde');
  assert.deepEqual([s.r, s.c, s.wrapNext], [0, 4, true]);
  s.write('f');
  assert.deepEqual(s.text(), ['abcde', 'f', '']);
  s.write('\r\nxy\r\n\r\nz');
  assert.deepEqual(s.text(), ['xy', '', 'z']);
  assert.deepEqual(s.scrolled.map((l) => l.text()), ['abcde', 'f']);
});

test('no wrap with ?7l: the last column is overwritten', () => {
  const s = screen(4, 2, CSI + '?7labcdef');
  assert.deepEqual(s.text(), ['abcf', '']);
});

test('cursor addressing: CUP, HVP, CUU/CUD/CUF/CUB, CHA, VPA, CNL, CPL', () => {
  const s = screen(10, 5, CSI + '3;5HA', CSI + '1;1fB', CSI + '2BC', CSI + '3CD', CSI + '2DE', CSI + 'AF', CSI + '8GG', CSI + '5dH');
  assert.deepEqual(s.text(), ['B', '     F G', ' C  ED', '', '        H']);
  s.write(CSI + '99;99HZ');
  assert.deepEqual([s.r, s.c], [4, 9]);
  s.write(CSI + '2FY' + CSI + 'EX');
  assert.equal(s.text()[2].slice(0, 1), 'Y');
  assert.equal(s.text()[3], 'X');
});

test('save and restore the cursor: ESC 7/8 and CSI s/u, with the style', () => {
  const s = screen(10, 3, CSI + '2;3H' + CSI + '31m' + ESC + '7' + CSI + '0m' + CSI + '1;1H' + ESC + '8x');
  assert.equal(s.lines[1].cells[2].ch, 'x');
  assert.equal(s.lines[1].cells[2].st.fg, 1);
  s.write(CSI + '3;4H' + CSI + 's' + CSI + 'H' + CSI + 'uy');
  assert.equal(s.text()[2], '   y');
});

test('erase: ED 0/1/2/3, EL 0/1/2, ECH', () => {
  const fill = () => screen(4, 3, 'abcd', 'efgh', 'ijkl', CSI + '2;2H');
  let s = fill();
  s.write(CSI + 'J');
  assert.deepEqual(s.text(), ['abcd', 'e', '']);
  s = fill();
  s.write(CSI + '1J');
  assert.deepEqual(s.text(), ['', '  gh', 'ijkl']);
  s = fill();
  s.write(CSI + '2J');
  assert.deepEqual(s.text(), ['', '', '']);
  assert.deepEqual([s.r, s.c], [1, 1]);
  s = fill();
  s.write(CSI + 'K');
  assert.equal(s.text()[1], 'e');
  s = fill();
  s.write(CSI + '1K');
  assert.equal(s.text()[1], '  gh');
  s = fill();
  s.write(CSI + '2K');
  assert.equal(s.text()[1], '');
  s = fill();
  s.write(CSI + '2X');
  assert.equal(s.text()[1], 'e  h');
  s = screen(3, 2, '1\r\n2\r\n3\r\n4');
  assert.equal(s.scrolled.length, 2);
  s.write(CSI + 'H' + CSI + '2J' + CSI + '3J');
  assert.deepEqual([s.scrolled.length, s.historyCleared], [0, true]);
});

test('`clear` as ncurses sends it empties the screen and the scrollback', () => {
  const s = screen(10, 3, 'one\r\ntwo\r\nthree\r\nfour\r\n$ clear\r\n');
  s.write(CSI + 'H' + CSI + '2J' + CSI + '3J' + '$ ');
  assert.deepEqual(s.text(), ['$', '', '']);
  assert.equal(s.scrolled.length, 0);
});

test('insert and delete characters and lines: ICH, DCH, IL, DL', () => {
  let s = screen(6, 3, 'abcdef', CSI + '1;3H' + CSI + '2@');
  assert.equal(s.text()[0], 'ab  cd');
  s.write(CSI + '3P');
  assert.equal(s.text()[0], 'abd');
  s = screen(3, 4, 'a\r\nb\r\nc\r\nd', CSI + '2;1H' + CSI + 'L');
  assert.deepEqual(s.text(), ['a', '', 'b', 'c']);
  s.write(CSI + '2M');
  assert.deepEqual(s.text(), ['a', 'c', '', '']);
});

test('scroll regions: DECSTBM with LF, IND, RI, SU, SD; the scrollback untouched', () => {
  const s = screen(3, 5, '1\r\n2\r\n3\r\n4\r\n5');
  s.write(CSI + '2;4r');
  assert.deepEqual([s.r, s.c, s.top, s.bottom], [0, 0, 1, 3]);
  s.write(CSI + '4;1H\n');
  assert.deepEqual(s.text(), ['1', '3', '4', '', '5']);
  s.write(CSI + '2;1H' + ESC + 'M');
  assert.deepEqual(s.text(), ['1', '', '3', '4', '5']);
  s.write(ESC + 'D' + ESC + 'D' + ESC + 'D');
  assert.deepEqual(s.text(), ['1', '3', '4', '', '5']);
  s.write(CSI + '2T');
  assert.deepEqual(s.text(), ['1', '', '', '3', '5']);
  s.write(CSI + 'S');
  assert.deepEqual(s.text(), ['1', '', '3', '', '5']);
  assert.equal(s.scrolled.length, 0);
  s.write(CSI + 'r');
  assert.deepEqual([s.top, s.bottom], [0, 4]);
});

test('the alternate screen: ?1049 saves, clears and restores; ?47 and ?1047', () => {
  const s = screen(8, 3, '$ less f\r\n');
  const before = s.text();
  s.write(CSI + '?1049h' + CSI + 'H' + CSI + '2J' + 'page 1\r\n\r\n\r\n\r\n:');
  assert.equal(s.alt, true);
  assert.deepEqual(s.text(), ['', '', ':']);
  assert.equal(s.scrolled.length, 0, 'the alternate screen has no scrollback');
  s.write(CSI + '?1049l');
  assert.equal(s.alt, false);
  assert.deepEqual(s.text(), before);
  assert.deepEqual([s.r, s.c], [1, 0]);
  s.write(CSI + '?47h' + 'alt' + CSI + '?47l');
  assert.deepEqual(s.text(), before);
  s.write(CSI + '?47h');
  assert.equal(s.text()[1], 'alt', '?47 keeps the alternate screen');
  s.write(CSI + '?47l' + CSI + '?1047h' + 'x' + CSI + '?1047l' + CSI + '?1047h');
  assert.deepEqual(s.text(), ['', '', ''], '?1047l clears it');
});

test('modes: cursor visibility, application cursor keys, bracketed paste, insert', () => {
  const s = screen(6, 2, CSI + '?25l' + CSI + '?1h' + CSI + '?2004h');
  assert.deepEqual([s.cursorVisible, s.appCursor, s.bracketedPaste], [false, true, true]);
  s.write(CSI + '?25h' + CSI + '?1l' + CSI + '?2004l');
  assert.deepEqual([s.cursorVisible, s.appCursor, s.bracketedPaste], [true, false, false]);
  s.write('abc' + CSI + '1G' + CSI + '4hX' + CSI + '4lY');
  assert.equal(s.text()[0], 'XYbc');
});

test('SGR: 16, 256 and truecolour, reset; xterm key options are not SGR', () => {
  const s = screen(20, 2, CSI + '1;31mA' + CSI + '38;5;196mB' + CSI + '48;2;1;2;3mC' + CSI + '0mD' + CSI + '>4;2mE');
  const c = s.lines[0].cells;
  assert.equal(c[0].st.fg, 1);
  assert.equal(c[0].st.bold, true);
  assert.equal(c[1].st.fg, 'rgb(255,0,0)');
  assert.equal(c[2].st.bg, 'rgb(1,2,3)');
  assert.equal(c[3].st, null);
  assert.equal(c[4].st, null);
});

test('erase uses the background colour (as xterm)', () => {
  const s = screen(4, 1, CSI + '44m' + CSI + '2K');
  assert.equal(s.lines[0].cells[3].st.bg, 4);
});

test('charsets: ESC ( 0 draws lines, ESC ( B and SO/SI switch back', () => {
  const s = screen(10, 1, ESC + '(0lqk' + ESC + '(Bq' + ESC + ')0\x0ex\x0fx');
  assert.equal(s.text()[0], '┌─┐q│x');
});

test('OSC titles, DCS, keypad modes, cursor shape are read and ignored', () => {
  const s = screen(10, 1, ESC + ']0;title\x07' + ESC + ']2;t2' + ESC + '\\' + ESC + '=' + ESC + '>' + CSI + '2 q' + ESC + 'P+q544e' + ESC + '\\ok');
  assert.equal(s.text()[0], 'ok');
});

test('a sequence split between writes', () => {
  const s = screen(10, 2, 'a' + ESC, '[3', '1mb', ESC + '[?10', '49h');
  assert.equal(s.main.lines[0].cells[1].st.fg, 1);
  assert.equal(s.alt, true);
});

test('tabs, HTS, TBC, CHT, CBT', () => {
  const s = screen(20, 1, '\tx');
  assert.equal(s.text()[0], '        x');
  s.write('\r' + CSI + '3g' + CSI + '3G' + ESC + 'H\r\ty' + CSI + '2Zz' + CSI + 'Iw');
  assert.equal(s.text()[0], 'z w     x');
});

test('REP repeats the last character', () => {
  const s = screen(10, 1, '-' + CSI + '4b');
  assert.equal(s.text()[0], '-----');
});

test('wide and combining characters', () => {
  assert.deepEqual([charWidth(0x61), charWidth(0x4e2d), charWidth(0x301), charWidth(0x1f600)], [1, 2, 0, 2]);
  const s = screen(5, 2, '中a😀e\u0301x');
  assert.equal(s.text()[0], '中a😀');
  assert.equal(s.text()[1], 'e\u0301x');
});

test('status reports: cursor position, device attributes, size', () => {
  const got = [];
  const s = screen(10, 4);
  s.reply = (r) => got.push(r);
  s.write(CSI + '3;7H' + CSI + '6n' + CSI + 'c' + CSI + '>c' + CSI + '5n' + CSI + '18t');
  assert.deepEqual(got, [CSI + '3;7R', CSI + '?1;2c', CSI + '>0;276;0c', CSI + '0n', CSI + '8;4;10t']);
});

test('resize keeps the text and the cursor on the screen', () => {
  const s = screen(6, 4, 'ab\r\ncd\r\nef\r\ngh');
  s.resize(4, 2);
  assert.deepEqual(s.text(), ['ef', 'gh']);
  assert.deepEqual([s.r, s.c], [1, 2]);
  s.resize(8, 3);
  assert.deepEqual(s.text(), ['ef', 'gh', '']);
});

test('RIS resets everything', () => {
  const s = screen(5, 2, CSI + '?1049h' + CSI + '31mab' + ESC + 'c');
  assert.deepEqual([s.alt, s.pen, s.r, s.c], [false, null, 0, 0]);
  assert.deepEqual(s.text(), ['', '']);
});

test('keys as xterm sends them', () => {
  const k = (key, mods = {}, app = false) => keySequence({key, ctrlKey: false, altKey: false, shiftKey: false, metaKey: false, ...mods}, app);
  assert.equal(k('ArrowUp'), CSI + 'A');
  assert.equal(k('ArrowUp', {}, true), ESC + 'OA');
  assert.equal(k('ArrowLeft', {ctrlKey: true}), CSI + '1;5D');
  assert.equal(k('Home'), CSI + 'H');
  assert.equal(k('End', {}, true), ESC + 'OF');
  assert.equal(k('PageUp'), CSI + '5~');
  assert.equal(k('PageDown'), CSI + '6~');
  assert.equal(k('Delete'), CSI + '3~');
  assert.equal(k('F1'), ESC + 'OP');
  assert.equal(k('F5'), CSI + '15~');
  assert.equal(k('F12'), CSI + '24~');
  assert.equal(k('F2', {shiftKey: true}), CSI + '1;2Q');
  assert.equal(k('Enter'), '\r');
  assert.equal(k('Backspace'), '\x7f');
  assert.equal(k('Tab'), '\t');
  assert.equal(k('Tab', {shiftKey: true}), CSI + 'Z');
  assert.equal(k('Escape'), ESC);
  assert.equal(k('c', {ctrlKey: true}), '\x03');
  assert.equal(k('D', {ctrlKey: true, shiftKey: true}), '\x04');
  assert.equal(k('[', {ctrlKey: true}), ESC);
  assert.equal(k(' ', {ctrlKey: true}), '\x00');
  assert.equal(k('3', {ctrlKey: true}), ESC);
  assert.equal(k('7', {ctrlKey: true}), '\x1f');
  assert.equal(k('b', {altKey: true}), ESC + 'b');
  assert.equal(k('q'), 'q');
  assert.equal(k('é'), 'é');
  assert.equal(k('Shift', {shiftKey: true}), null);
  assert.equal(k('v', {metaKey: true}), null);
});

test('paste: newlines as Enter, bracketed when asked, the end marker removed', () => {
  assert.equal(pasteSequence('a\nb\r\n', false), 'a\rb\r');
  assert.equal(pasteSequence('x' + CSI + '201~y', true), CSI + '200~xy' + CSI + '201~');
});
