// The client of the Cove API (/v1) on this server: the session, JSON
// calls, errors as thrown APIErrors, and readers of the two stream
// formats (NDJSON exec streams, Server-Sent Events of runs).

const sessionName = 'cove.session';

// The API key never stays in the page: signIn posts it once, and the
// server answers with a cookie scripts cannot read (HttpOnly, sent only
// to /v1) and a CSRF token, which every request sends back in the
// X-Cove-CSRF header (the cookie alone is refused). The token and who
// signed in (the key's prefix and team, not the key) are kept in
// sessionStorage (this tab, until it closes), or in localStorage when
// the user asked to stay signed in, as long as the cookie lasts.
export function getSession() {
  const raw = sessionStorage.getItem(sessionName) || localStorage.getItem(sessionName);
  if (!raw) return null;
  try {
    const s = JSON.parse(raw);
    if (!s.csrf || (s.expires_at && Date.parse(s.expires_at) < Date.now())) return null;
    return s;
  } catch {
    return null;
  }
}

function csrfToken() {
  const s = getSession();
  return s ? s.csrf : '';
}

// wsURL is the URL of a WebSocket on this server: a handshake cannot
// carry headers, so the CSRF token goes in the query (worth nothing
// without the cookie, which the browser adds).
export function wsURL(path, params) {
  const proto = location.protocol === 'https:' ? 'wss' : 'ws';
  return `${proto}://${location.host}${path}?${new URLSearchParams({...params, csrf: csrfToken()})}`;
}

// pendingSignOut is the last sign-out's request: a sign-in waits for it,
// or its answer (clearing the cookie) could land after the new one.
let pendingSignOut = Promise.resolve();

// signIn checks the key with the server and starts a session; it throws
// an APIError when the key is refused.
export async function signIn(key, remember) {
  await pendingSignOut;
  const resp = await request('POST', '/v1/session', {body: {key, remember}, anonymous: true});
  const s = await resp.json();
  forgetSession();
  (remember ? localStorage : sessionStorage).setItem(sessionName, JSON.stringify({
    csrf: s.csrf, expires_at: s.expires_at, prefix: s.key.prefix, team: s.key.team, admin: !!s.key.admin,
  }));
  return s;
}

// signOut ends the session: the page forgets its token at once, and
// the server clears the cookie (best effort: offline, the cookie is
// useless without the token and expires by itself).
export function signOut() {
  const req = request('DELETE', '/v1/session', {anonymous: true}).catch(() => {});
  forgetSession();
  pendingSignOut = req;
  return req;
}

export function forgetSession() {
  sessionStorage.removeItem(sessionName);
  localStorage.removeItem(sessionName);
}

// APIError is a failed request: the server's {code, message,
// request_id}, or a network failure (status 0, code "network").
export class APIError extends Error {
  constructor(status, code, message, requestId) {
    super(message);
    this.status = status;
    this.code = code;
    this.requestId = requestId;
  }
}

async function errorOf(resp) {
  const text = await resp.text().catch(() => '');
  try {
    const e = JSON.parse(text);
    if (e && e.message) return new APIError(resp.status, e.code || '', e.message, e.request_id || resp.headers.get('X-Request-Id'));
  } catch {
    // not JSON: a proxy's page, say
  }
  const detail = text.trim().slice(0, 200);
  return new APIError(resp.status, '', `${resp.status} ${resp.statusText}${detail ? ': ' + detail : ''}`, resp.headers.get('X-Request-Id'));
}

// request sends a request in the session and returns the response when
// it is a success; it throws an APIError otherwise. opts: body (an
// object is sent as JSON; a Blob, File or string as is), headers,
// signal, anonymous (a sign-in or sign-out: no session expected).
export async function request(method, path, opts = {}) {
  const headers = {...(opts.headers || {})};
  // Sign-in and sign-out send the header too: its presence proves the
  // request is this page's, not a form posted by another site.
  headers['X-Cove-CSRF'] = csrfToken() || '-';
  let body = opts.body;
  if (body !== undefined && body !== null && !(body instanceof Blob) && typeof body !== 'string' && !(body instanceof ArrayBuffer)) {
    body = JSON.stringify(body);
    headers['Content-Type'] = 'application/json';
  }
  let resp;
  try {
    resp = await fetch(path, {method, headers, body, signal: opts.signal, cache: 'no-store', credentials: 'same-origin'});
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new APIError(0, 'network', `cannot reach the Cove server (${e.message}); check that it is running, then try again`);
  }
  if (!resp.ok) {
    const err = await errorOf(resp);
    // The page moved on while the body was read (a sign-out, say): the
    // caller is gone, and a half-read error is no message to show.
    if (opts.signal && opts.signal.aborted) throw new DOMException('the request was aborted', 'AbortError');
    if (resp.status === 401 && !opts.anonymous) window.dispatchEvent(new CustomEvent('cove:unauthorized', {detail: err}));
    throw err;
  }
  return resp;
}

// api is request for JSON answers (null for 204).
export async function api(method, path, opts) {
  const resp = await request(method, path, opts);
  if (resp.status === 204) return null;
  const text = await resp.text();
  return text ? JSON.parse(text) : null;
}

// q builds a query string from an object, leaving out empty values.
export function q(params) {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') u.set(k, v);
  }
  const s = u.toString();
  return s ? `?${s}` : '';
}

// lines yields a streamed body's lines as they arrive.
export async function* lines(resp) {
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  try {
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buf += dec.decode(value, {stream: true});
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        yield buf.slice(0, i);
        buf = buf.slice(i + 1);
      }
    }
    buf += dec.decode();
    if (buf) yield buf;
  } finally {
    reader.releaseLock();
  }
}

// ndjson yields the JSON objects of an NDJSON stream.
export async function* ndjson(resp) {
  for await (const line of lines(resp)) {
    if (line.trim()) yield JSON.parse(line);
  }
}

// sse yields the events of a Server-Sent Events stream as {id, event,
// data} (EventSource cannot send the Authorization header, so the app
// reads the stream with fetch and parses it here).
export async function* sse(resp) {
  let ev = {id: null, event: 'message', data: []};
  for await (let line of lines(resp)) {
    if (line.endsWith('\r')) line = line.slice(0, -1);
    if (line === '') {
      if (ev.data.length) yield {id: ev.id, event: ev.event, data: ev.data.join('\n')};
      ev = {id: null, event: 'message', data: []};
      continue;
    }
    if (line.startsWith(':')) continue;
    const c = line.indexOf(':');
    const field = c < 0 ? line : line.slice(0, c);
    let value = c < 0 ? '' : line.slice(c + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') ev.data.push(value);
    else if (field === 'event') ev.event = value;
    else if (field === 'id') ev.id = value;
  }
}

// base64Bytes decodes the base64 of an ExecEvent's data.
export function base64Bytes(b64) {
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

// sizes are the server's presets (api.Sizes).
export const sizes = {
  small: {cpus: 1, memory: 512 << 20, disk: 2 * 1024 ** 3},
  medium: {cpus: 2, memory: 2 * 1024 ** 3, disk: 10 * 1024 ** 3},
  large: {cpus: 4, memory: 8 * 1024 ** 3, disk: 40 * 1024 ** 3},
};
