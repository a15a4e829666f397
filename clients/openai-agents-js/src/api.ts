// The Cove server's own HTTP API (/v1), as this client uses it. The wire
// types mirror package api of the Cove repository (api/api.go); the server
// describes the same routes at /openapi.json.

import { SandboxProviderError } from '@openai/agents-core/sandbox';

/** A sandbox's network policy (api.Network). */
export type CoveNetwork = {
  /** none (loopback only), internet (public addresses) or allow (only `allow`). */
  mode: 'none' | 'internet' | 'allow';
  /** Addresses, CIDRs or host names, each with an optional ":port", for mode allow. */
  allow?: string[];
};

/** The body of POST /v1/sandboxes (api.CreateSandbox). */
export type CoveCreateRequest = {
  template?: string;
  size?: string;
  cpus?: number;
  memory_bytes?: number;
  disk_bytes?: number;
  pids?: number;
  env?: Record<string, string>;
  ttl_seconds?: number;
  idle_timeout_seconds?: number;
  on_expire?: 'stop' | 'delete';
  labels?: Record<string, string>;
  user?: string;
  root?: string;
  network?: CoveNetwork;
  /** Not in the server's API yet: a server that does not know it answers 400. */
  isolation?: string;
};

/** A sandbox as the server describes it (api.Sandbox). */
export type CoveSandbox = {
  id: string;
  state: string;
  template: string;
  root: string;
  user?: string;
  labels?: Record<string, string>;
};

/** A saved workspace (api.Snapshot). */
export type CoveSnapshot = { id: string; sandbox_id: string; size: number; created_at: string };

/** An exposed port (api.Port). */
export type CovePort = { port: number; public: boolean; url?: string; path_url: string; token?: string };

/** A file's description (api.FileInfo). */
export type CoveFileInfo = { name: string; path: string; type: 'file' | 'dir' | 'symlink' | string; size: number };

/** The body of POST /v1/sandboxes/{id}/exec (api.Exec). */
export type CoveExecRequest = {
  cmd: string;
  args?: string[];
  shell?: boolean;
  dir?: string;
  env?: Record<string, string>;
  user?: string;
  /** Base64, as Go's []byte. */
  stdin?: string;
  timeout_seconds?: number;
};

/** What an exec ended with. */
export type CoveExecResult = {
  exitCode: number | null;
  stdout: Uint8Array;
  stderr: Uint8Array;
  timedOut: boolean;
  signal?: string;
};

/** An error the server answered ({code, message, request_id}). */
export class CoveAPIError extends SandboxProviderError {
  readonly status: number;
  readonly coveCode: string;
  constructor(status: number, code: string, message: string, requestId?: string) {
    super(`Cove: ${message}`, { provider: 'cove', status, code, requestId });
    this.status = status;
    this.coveCode = code;
    // The SDK's path probes and editors treat ENOENT as "not found".
    if (status === 404) {
      (this as { code?: unknown }).code = 'ENOENT';
    }
  }
}

/** A client of one Cove server, authenticated with one API key. */
export class CoveAPI {
  readonly baseURL: string;
  readonly apiKey: string;

  constructor(baseURL: string, apiKey: string) {
    this.baseURL = baseURL.replace(/\/+$/, '');
    this.apiKey = apiKey;
  }

  headers(extra: Record<string, string> = {}): Record<string, string> {
    return { Authorization: `Bearer ${this.apiKey}`, ...extra };
  }

  url(path: string, query?: Record<string, string | undefined>): string {
    const u = new URL(this.baseURL + path);
    for (const [k, v] of Object.entries(query ?? {})) {
      if (v !== undefined) u.searchParams.set(k, v);
    }
    return u.toString();
  }

  /** request sends a request and throws CoveAPIError on an error status. */
  async request(method: string, path: string, opts: {
    query?: Record<string, string | undefined>;
    json?: unknown;
    body?: Uint8Array;
    contentType?: string;
    signal?: AbortSignal;
  } = {}): Promise<Response> {
    const headers = this.headers();
    let body: BodyInit | undefined;
    if (opts.json !== undefined) {
      headers['Content-Type'] = 'application/json';
      body = JSON.stringify(opts.json);
    } else if (opts.body !== undefined) {
      headers['Content-Type'] = opts.contentType ?? 'application/octet-stream';
      body = opts.body as unknown as BodyInit;
    }
    let res: Response;
    try {
      res = await fetch(this.url(path, opts.query), { method, headers, body, signal: opts.signal });
    } catch (error) {
      throw new SandboxProviderError(`Cove: cannot reach ${this.baseURL}: ${(error as Error).message}`, {
        provider: 'cove', method, path,
      });
    }
    if (!res.ok) {
      throw await errorFrom(res);
    }
    return res;
  }

  async json<T>(method: string, path: string, opts: Parameters<CoveAPI['request']>[2] = {}): Promise<T> {
    const res = await this.request(method, path, opts);
    return (await res.json()) as T;
  }

  async bytes(method: string, path: string, opts: Parameters<CoveAPI['request']>[2] = {}): Promise<Uint8Array> {
    const res = await this.request(method, path, opts);
    return new Uint8Array(await res.arrayBuffer());
  }

  /** drop sends a request whose answer has no body. */
  async drop(method: string, path: string, opts: Parameters<CoveAPI['request']>[2] = {}): Promise<void> {
    const res = await this.request(method, path, opts);
    await res.body?.cancel();
  }

  /**
   * exec runs a command and reads its NDJSON event stream to the end,
   * handing each chunk of output to onOutput as it arrives. Aborting
   * signal ends the stream, and the server then kills the command.
   */
  async exec(id: string, req: CoveExecRequest,
    onOutput?: (stream: 'stdout' | 'stderr', data: Uint8Array) => void, signal?: AbortSignal): Promise<CoveExecResult> {
    return await this.readExec(id, await this.startExec(id, req, signal), onOutput);
  }

  /** startExec starts a command; it throws if the server refuses it. */
  async startExec(id: string, req: CoveExecRequest, signal?: AbortSignal): Promise<Response> {
    return await this.request('POST', `/v1/sandboxes/${encodeURIComponent(id)}/exec`, { json: req, signal });
  }

  /** readExec reads a started command's event stream to its exit. */
  async readExec(id: string, res: Response,
    onOutput?: (stream: 'stdout' | 'stderr', data: Uint8Array) => void): Promise<CoveExecResult> {
    const out: Uint8Array[] = [];
    const err: Uint8Array[] = [];
    let result: CoveExecResult | undefined;
    for await (const ev of ndjson(res)) {
      switch (ev.type) {
        case 'stdout':
        case 'stderr': {
          const data = Buffer.from(String(ev.data ?? ''), 'base64');
          (ev.type === 'stdout' ? out : err).push(data);
          onOutput?.(ev.type, data);
          break;
        }
        case 'exit':
          result = {
            exitCode: typeof ev.exit_code === 'number' ? ev.exit_code : null,
            stdout: Buffer.concat(out), stderr: Buffer.concat(err),
            timedOut: ev.timed_out === true,
            signal: typeof ev.signal === 'string' ? ev.signal : undefined,
          };
          break;
        case 'error':
          throw new CoveAPIError(res.status, String(ev.code ?? 'internal'), String(ev.error ?? 'the command stream ended early'));
      }
    }
    if (!result) {
      throw new SandboxProviderError('Cove: the exec stream ended without an exit event', { provider: 'cove', sandboxId: id });
    }
    return result;
  }
}

async function errorFrom(res: Response): Promise<CoveAPIError> {
  const text = await res.text().catch(() => '');
  try {
    const e = JSON.parse(text) as { code?: string; message?: string; request_id?: string };
    return new CoveAPIError(res.status, e.code ?? String(res.status), e.message ?? text, e.request_id);
  } catch {
    return new CoveAPIError(res.status, String(res.status), text || res.statusText);
  }
}

/** ndjson yields the JSON objects of a newline-delimited response body. */
async function* ndjson(res: Response): AsyncGenerator<Record<string, unknown>> {
  if (!res.body) return;
  const decoder = new TextDecoder();
  let buf = '';
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    buf += decoder.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl).trim();
      buf = buf.slice(nl + 1);
      if (line) yield JSON.parse(line) as Record<string, unknown>;
    }
  }
  buf += decoder.decode();
  if (buf.trim()) yield JSON.parse(buf) as Record<string, unknown>;
}
