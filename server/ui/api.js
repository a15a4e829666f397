// The client of the Cove API (/v1) on this server: the key, JSON calls,
// errors as thrown APIErrors, and readers of the two stream formats
// (NDJSON exec streams, Server-Sent Events of runs).

const keyName = 'cove.apiKey';

// The key lives in sessionStorage (this tab, until it closes), or in
// localStorage when the user asked to stay signed in.
export function getKey() {
  return sessionStorage.getItem(keyName) || localStorage.getItem(keyName) || '';
}

export function setKey(key, remember) {
  clearKey();
  (remember ? localStorage : sessionStorage).setItem(keyName, key);
}

export function clearKey() {
  sessionStorage.removeItem(keyName);
  localStorage.removeItem(keyName);
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

// request sends a request with the key and returns the response when it
// is a success; it throws an APIError otherwise. opts: body (an object
// is sent as JSON; a Blob, File or string as is), headers, signal, key.
export async function request(method, path, opts = {}) {
  const headers = {...(opts.headers || {})};
  const key = opts.key ?? getKey();
  if (key) headers.Authorization = `Bearer ${key}`;
  let body = opts.body;
  if (body !== undefined && body !== null && !(body instanceof Blob) && typeof body !== 'string' && !(body instanceof ArrayBuffer)) {
    body = JSON.stringify(body);
    headers['Content-Type'] = 'application/json';
  }
  let resp;
  try {
    resp = await fetch(path, {method, headers, body, signal: opts.signal, cache: 'no-store'});
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new APIError(0, 'network', `cannot reach the Cove server (${e.message}); check that it is running, then try again`);
  }
  if (!resp.ok) {
    const err = await errorOf(resp);
    // The page moved on while the body was read (a sign-out, say): the
    // caller is gone, and a half-read error is no message to show.
    if (opts.signal && opts.signal.aborted) throw new DOMException('the request was aborted', 'AbortError');
    if (resp.status === 401 && !opts.key) window.dispatchEvent(new CustomEvent('cove:unauthorized', {detail: err}));
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

// sizes are the server's presets (server/api Sizes).
export const sizes = {
  small: {cpus: 1, memory: 512 << 20, disk: 2 * 1024 ** 3},
  medium: {cpus: 2, memory: 2 * 1024 ** 3, disk: 10 * 1024 ** 3},
  large: {cpus: 4, memory: 8 * 1024 ** 3, disk: 40 * 1024 ** 3},
};
