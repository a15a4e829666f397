// The Cove web UI: a single-page app with hash routes. Each view gets a
// fresh <main> and an AbortSignal that ends when the user leaves it, so
// its streams and timers stop with it.

import {APIError, getSession, signIn, signOut as endSession} from './api.js';
import {busy, clearError, h, showError, showNotice} from './dom.js';
import {sandboxesView, sandboxView} from './sandboxes.js';
import {chatView, runView} from './chat.js';
import {usageView} from './usage.js';
import {settingsView} from './settings.js';

const routes = [
  {re: /^\/signin$/, view: signInView, public: true},
  {re: /^\/sandboxes$/, view: sandboxesView, nav: 'sandboxes'},
  {re: /^\/sandboxes\/([^/]+)$/, view: sandboxView, nav: 'sandboxes'},
  {re: /^\/chat$/, view: chatView, nav: 'chat'},
  {re: /^\/runs\/([^/]+)$/, view: runView, nav: 'chat'},
  {re: /^\/usage$/, view: usageView, nav: 'usage'},
  {re: /^\/settings$/, view: settingsView, nav: 'settings'},
];

let current = null; // {controller, cleanups}
// carried is an error to show on the next page (navigating clears the
// banner of the last one).
let carried = null;

// route is the hash's path and query: "#/chat?sandbox=sb-1" is
// {path: "/chat", params: {sandbox: "sb-1"}}.
function parseHash() {
  const raw = decodeURI(location.hash.replace(/^#/, '')) || '/sandboxes';
  const [path, query] = raw.split('?');
  return {path, params: new URLSearchParams(query || '')};
}

export function go(hash) {
  if (location.hash === hash) render();
  else location.hash = hash;
}

async function render() {
  if (current) {
    current.controller.abort();
    for (const f of current.cleanups) {
      try {
        f();
      } catch (e) {
        console.error(e);
      }
    }
  }
  clearError();
  showNotice('');
  if (carried) {
    showError(carried);
    carried = null;
  }
  const {path, params} = parseHash();
  const r = routes.find((r) => r.re.test(path));
  const signedIn = !!getSession();
  updateChrome(signedIn, r && r.nav);
  if (!signedIn && !(r && r.public)) {
    sessionStorage.setItem('cove.next', location.hash || '#/sandboxes');
    location.replace('#/signin');
    return;
  }
  const main = document.getElementById('main');
  const fresh = h('main', {id: 'main', tabindex: '-1'});
  main.replaceWith(fresh);
  const controller = new AbortController();
  const ctx = {main: fresh, signal: controller.signal, params, cleanups: [], onLeave: (f) => ctx.cleanups.push(f)};
  current = {controller, cleanups: ctx.cleanups};
  if (!r) {
    fresh.append(h('h1', {}, 'Not found'), h('p', {}, 'There is no page at ', h('code', {}, path), '. ', h('a', {href: '#/sandboxes'}, 'Go to the sandboxes.')));
    return;
  }
  try {
    await r.view(ctx, ...path.match(r.re).slice(1).map(decodeURIComponent));
  } catch (e) {
    if (e.name === 'AbortError' || controller.signal.aborted) return;
    showError(e);
    if (!fresh.querySelector('h1')) fresh.append(h('h1', {}, 'Something went wrong'));
    fresh.append(h('p', {class: 'error-text'}, e.message || String(e)));
  }
  const h1 = fresh.querySelector('h1');
  if (h1 && document.activeElement === document.body) {
    h1.tabIndex = -1;
    h1.focus({preventScroll: true});
  }
}

function updateChrome(signedIn, nav) {
  document.getElementById('nav').hidden = !signedIn;
  document.getElementById('who').hidden = !signedIn;
  const sess = getSession();
  document.getElementById('who-key').textContent = sess ? `key ${sess.prefix}… · team ${sess.team}` : '';
  for (const a of document.querySelectorAll('#nav a')) {
    if (a.dataset.nav === nav) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
}

function signInView(ctx) {
  const {main} = ctx;
  const input = h('input', {id: 'key', name: 'key', type: 'password', autocomplete: 'off', spellcheck: 'false', placeholder: 'cove_…', required: true, 'aria-describedby': 'key-help'});
  const remember = h('input', {id: 'remember', type: 'checkbox'});
  const msg = h('p', {id: 'signin-error', class: 'error-text', role: 'alert', hidden: true});
  const submit = h('button', {type: 'submit', class: 'primary'}, 'Sign in');
  const form = h('form', {class: 'card narrow', id: 'signin'},
    h('h1', {}, 'Sign in to Cove'),
    h('label', {for: 'key'}, 'API key'),
    input,
    h('p', {id: 'key-help', class: 'muted small'}, 'The admin key is printed once when cove serve first starts; ', h('code', {}, 'cove key create'), ' makes more.'),
    h('label', {class: 'check'}, remember, ' Stay signed in on this device'),
    msg,
    submit);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const key = input.value.trim();
    msg.hidden = true;
    clearError();
    if (!key) {
      msg.textContent = 'Paste an API key (it starts with cove_).';
      msg.hidden = false;
      return;
    }
    await busy(submit, 'Signing in…', async () => {
      try {
        await signIn(key, remember.checked);
        input.value = '';
        const next = sessionStorage.getItem('cove.next');
        sessionStorage.removeItem('cove.next');
        go(next && next !== '#/signin' ? next : '#/sandboxes');
      } catch (err) {
        msg.textContent = `Sign-in failed: ${err.message}`;
        msg.hidden = false;
        showError(err, 'Sign-in failed');
        input.focus();
        input.select();
      }
    });
  });
  main.append(form);
  input.focus();
}

function signOut(reason) {
  // The server is told (it clears the cookie); the page leaves at once.
  endSession();
  updateChrome(false);
  carried = reason || null;
  go('#/signin');
}

document.getElementById('signout').addEventListener('click', () => signOut());

// A key revoked (or a session ended) while signed in: back to the
// sign-in page, saying why.
window.addEventListener('cove:unauthorized', (e) => {
  if (!getSession()) return;
  sessionStorage.setItem('cove.next', location.hash);
  signOut(new APIError(401, 'unauthorized', `Your API key was refused (${e.detail.message}); sign in again`));
});

// No failure goes unseen: anything uncaught ends in the banner.
window.addEventListener('error', (e) => showError(e.error || e.message, 'Unexpected error'));
window.addEventListener('unhandledrejection', (e) => showError(e.reason, 'Unexpected error'));

window.addEventListener('hashchange', render);
render();
