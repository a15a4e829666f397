// Processes the model polls with write_stdin: a terminal over Cove's PTY
// WebSocket (GET /v1/sandboxes/{id}/pty) for exec_command(tty=true), or
// the exec stream of a command that outlived its yield_time_ms; their
// output is buffered until the model asks for it.

import { UserError } from '@openai/agents-core';
import { SandboxPtyError } from '@openai/agents-core/sandbox';
import { elapsedSeconds, formatExecResponse, truncateOutput } from '@openai/agents-core/sandbox/internal';
import WebSocket from 'ws';
import type { CoveAPI, CoveExecResult } from './api.js';

const YIELD_MIN_MS = 250;
const YIELD_MAX_MS = 30_000;
const EMPTY_POLL_MIN_MS = 5_000;
const MAX_PROCESSES = 64;

/**
 * A running process and what it printed since the model last looked.
 * Subclasses feed output with append and report the end with finish.
 */
export abstract class LiveProcess {
  output = '';
  closed = false;
  exitCode: number | null = null;
  lastUsed = Date.now();
  protected readonly decoder = new TextDecoder();
  private readonly waiters = new Set<() => void>();

  /** write sends input to the process. */
  abstract write(chars: string): Promise<void>;

  /** close ends the process (if it still runs) and its connection. */
  abstract close(): void;

  protected append(bytes: Uint8Array): void {
    this.output += this.decoder.decode(bytes, { stream: true });
  }

  /** collect waits up to ms for the process to end, and takes its output. */
  async collect(ms: number): Promise<{ text: string; closed: boolean }> {
    if (!this.closed) {
      await new Promise<void>((resolve) => {
        const done = (): void => {
          clearTimeout(timer);
          this.waiters.delete(done);
          resolve();
        };
        const timer = setTimeout(done, ms);
        this.waiters.add(done);
      });
    }
    const text = this.output;
    this.output = '';
    this.lastUsed = Date.now();
    return { text, closed: this.closed };
  }

  protected finish(code: number): void {
    if (this.closed) return;
    this.output += this.decoder.decode();
    this.closed = true;
    this.exitCode = code;
    // Only the end wakes a waiter: the model asked to wait
    // yield_time_ms for output unless the process is done.
    for (const w of [...this.waiters]) w();
  }
}

/**
 * A command on Cove's exec stream that the model polls after its
 * yield_time_ms. It has no stdin: start a command with tty=true to type
 * into it.
 */
export class StreamProcess extends LiveProcess {
  private readonly abort: AbortController;

  constructor(api: CoveAPI, sandboxId: string, res: Response, abort: AbortController) {
    super();
    this.abort = abort;
    api.readExec(sandboxId, res, (_stream, data) => this.append(data)).then(
      (r: CoveExecResult) => {
        if (r.timedOut) this.output += '\n(the command timed out and was killed)\n';
        this.finish(r.exitCode ?? 1);
      },
      (error: unknown) => {
        if (!this.closed) this.output += `\n${(error as Error).message}\n`;
        this.finish(1);
      });
  }

  async write(): Promise<void> {
    throw new UserError('This command was started without tty, so it takes no input; start it with tty=true to type into it.');
  }

  close(): void {
    // Ending the stream makes the server kill the command.
    this.finish(this.exitCode ?? 1);
    this.abort.abort();
  }
}

/** A live terminal. */
export class PtyProcess extends LiveProcess {
  constructor(private readonly socket: WebSocket) {
    super();
    socket.on('message', (data: WebSocket.RawData, isBinary: boolean) => {
      const bytes = Buffer.isBuffer(data) ? data : Buffer.concat(Array.isArray(data) ? data : [Buffer.from(data)]);
      if (isBinary) {
        this.append(bytes);
        return;
      }
      try {
        const msg = JSON.parse(bytes.toString('utf8')) as { type?: string; exit_code?: number; error?: string };
        if (msg.type === 'exit') {
          this.finish(typeof msg.exit_code === 'number' ? msg.exit_code : 1);
        } else if (msg.error) {
          this.output += `\n${msg.error}\n`;
        }
      } catch {
        // Not a control message: ignore it.
      }
    });
    socket.on('close', () => this.finish(this.exitCode ?? 1));
    socket.on('error', () => this.finish(this.exitCode ?? 1));
  }

  /** open starts `cmd` (run by the sandbox's shell) on a new terminal. */
  static async open(api: CoveAPI, sandboxId: string, cmd: string, size = { cols: 80, rows: 24 }): Promise<PtyProcess> {
    const url = api.url(`/v1/sandboxes/${encodeURIComponent(sandboxId)}/pty`, {
      cmd, cols: String(size.cols), rows: String(size.rows),
    }).replace(/^http/, 'ws');
    const socket = new WebSocket(url, { headers: api.headers() });
    // Listen before the socket opens: ws delivers the first messages in
    // the same tick as the open event.
    const proc = new PtyProcess(socket);
    await new Promise<void>((resolve, reject) => {
      socket.once('open', () => resolve());
      socket.once('unexpected-response', (_req, res) => {
        let body = '';
        res.on('data', (c: Buffer) => { body += c.toString('utf8'); });
        res.on('end', () => {
          let message = body;
          try { message = (JSON.parse(body) as { message?: string }).message ?? body; } catch { /* plain text */ }
          reject(new SandboxPtyError(`Cove: the terminal did not open: ${message}`, { provider: 'cove', status: res.statusCode }));
        });
      });
      socket.once('error', (err) => reject(new SandboxPtyError(`Cove: the terminal did not open: ${err.message}`, { provider: 'cove' })));
    });
    return proc;
  }

  /** write sends keystrokes to the terminal. */
  async write(chars: string): Promise<void> {
    if (this.closed) {
      throw new UserError('the process has exited; its terminal takes no more input');
    }
    await new Promise<void>((resolve, reject) => this.socket.send(Buffer.from(chars, 'utf8'), { binary: true }, (err) => err ? reject(err) : resolve()));
  }

  /** resize changes the terminal's size. */
  resize(cols: number, rows: number): void {
    this.socket.send(JSON.stringify({ type: 'resize', cols, rows }));
  }

  close(): void {
    if (this.socket.readyState === WebSocket.OPEN || this.socket.readyState === WebSocket.CONNECTING) {
      this.socket.terminate();
    }
    this.finish(this.exitCode ?? 1);
  }
}

/** The live processes of one session, by the ids the model sees. */
export class PtyRegistry {
  private readonly procs = new Map<number, LiveProcess>();
  private next = 1000 + Math.floor(Math.random() * 1000);

  add(p: LiveProcess): number {
    if (this.procs.size >= MAX_PROCESSES) {
      const oldest = [...this.procs.entries()].sort((a, b) => a[1].lastUsed - b[1].lastUsed)[0];
      if (oldest) {
        oldest[1].close();
        this.procs.delete(oldest[0]);
      }
    }
    const id = this.next++;
    this.procs.set(id, p);
    return id;
  }

  get(id: number): LiveProcess | undefined {
    return this.procs.get(id);
  }

  closeAll(): void {
    for (const p of this.procs.values()) p.close();
    this.procs.clear();
  }

  /**
   * report waits for output as the shell tool asks, and formats it as the
   * SDK's exec_command and write_stdin answers: with the session id while
   * the process runs, with the exit code once it ended.
   */
  async report(id: number, start: number, yieldMs: number, maxOutputTokens?: number): Promise<string> {
    const p = this.procs.get(id);
    if (!p) {
      return formatExecResponse({ output: `write_stdin failed: session not found: ${id}`, wallTimeSeconds: 0, exitCode: 1 });
    }
    const got = await p.collect(yieldMs);
    const out = truncateOutput(got.text, maxOutputTokens);
    if (got.closed) {
      this.procs.delete(id);
    }
    return formatExecResponse({
      output: out.text,
      wallTimeSeconds: elapsedSeconds(start),
      sessionId: got.closed ? undefined : id,
      exitCode: got.closed ? p.exitCode : undefined,
      originalTokenCount: out.originalTokenCount,
    });
  }
}

export function clampYield(ms: number | undefined, fallback: number, emptyPoll = false): number {
  const v = Math.max(YIELD_MIN_MS, Math.min(YIELD_MAX_MS, ms ?? fallback));
  return emptyPoll ? Math.max(v, EMPTY_POLL_MIN_MS) : v;
}
