// DOM helpers. Every element is built with createElement and text goes
// in as text nodes, never as HTML: what a sandbox or a model prints
// cannot inject markup.

// h builds an element: h('a', {href: '#/x', class: 'btn', onclick: f}, 'text', child).
// Attributes that are null, undefined or false are left out; true sets
// an empty attribute; "value" sets the property (inputs, selects).
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'value') el.value = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  add(el, children);
  return el;
}

// add appends children (nodes, strings, numbers, nested arrays; null
// and false are skipped).
export function add(el, ...children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

const svgNS = 'http://www.w3.org/2000/svg';

// s builds an SVG element.
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(svgNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) el.setAttribute(k, String(v));
  }
  return add(el, children);
}

// ---- the error banner ----

// showError puts a failure's message in the banner at the top of the
// page, with the request id when the server gave one. Nothing fails
// silently: every caught error of a request ends up here, but for one
// the page aborted itself (it moved on, or signed out): that is no error,
// and showing it would hide the message that says why.
export function showError(err, context) {
  const banner = document.getElementById('banner');
  if (!banner || (err && err.name === 'AbortError')) return;
  let msg = err && err.message ? err.message : String(err);
  if (context) msg = `${context}: ${msg}`;
  banner.replaceChildren(
    h('span', {class: 'banner-text', id: 'banner-text'}, msg,
      err && err.requestId ? h('span', {class: 'muted'}, ` (request id ${err.requestId})`) : null),
    h('button', {type: 'button', class: 'banner-close', 'aria-label': 'Dismiss the message', onclick: clearError}, '×'),
  );
  banner.hidden = false;
}

// showNotice says that something worked, for a few seconds.
let noticeTimer;
export function showNotice(msg) {
  const banner = document.getElementById('notice');
  if (!banner) return;
  banner.textContent = msg;
  banner.hidden = !msg;
  clearTimeout(noticeTimer);
  if (msg) noticeTimer = setTimeout(() => showNotice(''), 8000);
}

export function clearError() {
  const banner = document.getElementById('banner');
  if (banner) {
    banner.hidden = true;
    banner.replaceChildren();
  }
}

// ---- formatting ----

export function fmtBytes(n) {
  if (n === undefined || n === null) return '';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i === 0 ? n : n.toFixed(n >= 10 ? 0 : 1).replace(/\.0$/, '')} ${units[i]}`;
}

// fmtDuration: "850 ms", "4.2 s", "3 min 4 s", "2 h 5 min", "3 d 4 h".
export function fmtDuration(ms) {
  if (ms < 0) ms = 0;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const sec = ms / 1000;
  if (sec < 60) return `${sec.toFixed(1)} s`;
  const m = Math.floor(sec / 60);
  if (m < 60) return `${m} min ${Math.floor(sec % 60)} s`;
  const hr = Math.floor(m / 60);
  if (hr < 24) return `${hr} h ${m % 60} min`;
  return `${Math.floor(hr / 24)} d ${hr % 24} h`;
}

export function fmtAge(iso) {
  if (!iso) return '';
  return fmtDuration(Date.now() - Date.parse(iso)).replace(/ \d+ (s|min)$/, '');
}

export function fmtTime(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  return d.toLocaleString(undefined, {dateStyle: 'medium', timeStyle: 'short'});
}

export function fmtUSD(x) {
  if (x === undefined || x === null) return '';
  if (x === 0) return '$0';
  if (Math.abs(x) < 0.01) return `$${x.toPrecision(2)}`;
  return `$${x.toFixed(2)}`;
}

export function fmtNum(x, digits = 1) {
  if (x === undefined || x === null) return '';
  return x.toLocaleString(undefined, {maximumFractionDigits: digits});
}

// confirmButton is a button that asks once more before acting: the
// first press turns it into "Confirm <label>?" for a few seconds.
export function confirmButton(label, action, attrs = {}) {
  let armed = false;
  let timer;
  const btn = h('button', {type: 'button', ...attrs}, label);
  btn.addEventListener('click', async () => {
    if (!armed) {
      armed = true;
      btn.textContent = `Confirm ${label.toLowerCase()}?`;
      btn.classList.add('armed');
      timer = setTimeout(() => {
        armed = false;
        btn.textContent = label;
        btn.classList.remove('armed');
      }, 5000);
      return;
    }
    clearTimeout(timer);
    armed = false;
    btn.textContent = label;
    btn.classList.remove('armed');
    btn.disabled = true;
    try {
      await action();
    } finally {
      btn.disabled = false;
    }
  });
  return btn;
}

// busy disables a button while an async action runs, showing a label.
export async function busy(btn, label, action) {
  const old = btn.textContent;
  btn.disabled = true;
  if (label) btn.textContent = label;
  try {
    return await action();
  } finally {
    btn.disabled = false;
    btn.textContent = old;
  }
}
