// A live Cove sandbox as the Agents SDK's SandboxSession: exec, files,
// the apply_patch editor, terminals, ports and workspace persistence, each
// a call to the Cove server's /v1 API.

import { applyDiff, UserError } from '@openai/agents-core';
import type { Editor, ToolOutputImage } from '@openai/agents-core';
import {
  Manifest,
  SandboxPathResolutionError,
  SandboxProviderError,
  SandboxSnapshotError,
  SandboxUnsupportedFeatureError,
  resolveSandboxArchiveLimits,
  validateSandboxArchiveLimits,
} from '@openai/agents-core/sandbox';
import type {
  Entry,
  ExecCommandArgs,
  ExposedPortEndpoint,
  ListDirectoryArgs,
  MaterializeEntryArgs,
  ReadFileArgs,
  SandboxArchiveLimits,
  SandboxDirectoryEntry,
  SandboxExecResult,
  SandboxSession,
  SandboxSessionLifecycleOptions,
  SandboxSessionState,
  ViewImageArgs,
  WorkspaceArchiveData,
  WorkspaceArchiveOptions,
  WriteStdinArgs,
} from '@openai/agents-core/sandbox';
import {
  elapsedSeconds,
  imageOutputFromBytes,
  materializeEnvironment,
  mergeManifestDelta,
  mergeManifestEntryDelta,
  shellQuote,
  truncateOutput,
} from '@openai/agents-core/sandbox/internal';
import { lstat, readdir, readFile } from 'node:fs/promises';
import { join as hostJoin, resolve as hostResolve } from 'node:path';
import { posix } from 'node:path';
import { CoveAPI, CoveAPIError } from './api.js';
import type { CoveCreateRequest, CoveExecResult, CoveFileInfo, CovePort, CoveSandbox, CoveSnapshot } from './api.js';
import { clampYield, PtyProcess, PtyRegistry, StreamProcess } from './pty.js';

/** How a session saves its workspace for persistWorkspace. */
export type CoveWorkspacePersistence = 'tar' | 'snapshot';

/** What a Cove session keeps, and what resumes it in another process. */
export interface CoveSandboxSessionState extends SandboxSessionState {
  /** The sandbox's id on the server (sb-...). */
  sandboxId: string;
  /** The Cove server's URL; the API key is never stored here. */
  server: string;
  /** The create request that made the sandbox, reused to restore it. */
  createRequest: CoveCreateRequest;
  /** Stop the sandbox, keeping its disk, when the session ends (instead of deleting it). */
  stopOnExit: boolean;
  workspacePersistence: CoveWorkspacePersistence;
  /** Ports resolveExposedPort may expose; none means any. */
  configuredExposedPorts?: number[];
  /** Expose ports without a token. */
  publicPorts?: boolean;
  environment: Record<string, string>;
}

/** The marker of a native snapshot reference, as persistWorkspace returns it. */
const SNAPSHOT_REF_PREFIX = 'COVE_SANDBOX_SNAPSHOT_V1\n';

/** encodeSnapshotRef is what persistWorkspace returns for a native snapshot. */
export function encodeSnapshotRef(snapshotId: string): Uint8Array {
  return new TextEncoder().encode(SNAPSHOT_REF_PREFIX + JSON.stringify({ snapshot_id: snapshotId }));
}

/** decodeSnapshotRef reads a native snapshot reference; undefined for a tar. */
export function decodeSnapshotRef(data: WorkspaceArchiveData): string | undefined {
  const bytes = toBytes(data);
  const head = new TextDecoder().decode(bytes.subarray(0, SNAPSHOT_REF_PREFIX.length));
  if (head !== SNAPSHOT_REF_PREFIX) return undefined;
  try {
    const v = JSON.parse(new TextDecoder().decode(bytes.subarray(SNAPSHOT_REF_PREFIX.length))) as { snapshot_id?: unknown };
    return typeof v.snapshot_id === 'string' && v.snapshot_id ? v.snapshot_id : undefined;
  } catch {
    return undefined;
  }
}

function toBytes(data: WorkspaceArchiveData): Uint8Array {
  if (typeof data === 'string') return Buffer.from(data, 'binary');
  if (data instanceof Uint8Array) return data;
  return new Uint8Array(data);
}

/** Options for CoveSandboxSession.execStream. */
export type CoveExecOptions = {
  /** Working directory: absolute, or relative to the workspace root (the default). */
  workdir?: string;
  env?: Record<string, string>;
  runAs?: string;
  timeoutSeconds?: number;
  /** Bytes for the command's stdin, then EOF. */
  stdin?: string | Uint8Array;
  onStdout?: (data: Uint8Array) => void;
  onStderr?: (data: Uint8Array) => void;
};

/**
 * The file operations of one user: the sandbox's own through the file
 * API, another (runAs) through commands run as that user, so the
 * sandbox's permissions decide what it may touch.
 */
type Files = {
  read(abs: string): Promise<Uint8Array>;
  write(abs: string, content: Uint8Array): Promise<void>;
  mkdir(abs: string): Promise<void>;
  remove(abs: string): Promise<void>;
  stat(abs: string): Promise<'file' | 'dir' | 'other' | undefined>;
  list(abs: string): Promise<SandboxDirectoryEntry[]>;
};

function notFound(abs: string): CoveAPIError {
  return new CoveAPIError(404, 'not_found', `${abs} does not exist in the sandbox`);
}

/** A Cove sandbox bound to the Agents SDK's session interface. */
export class CoveSandboxSession implements SandboxSession<CoveSandboxSessionState> {
  state: CoveSandboxSessionState;
  private readonly api: CoveAPI;
  private readonly ptys = new PtyRegistry();
  private archiveLimits?: SandboxArchiveLimits | null;

  constructor(args: { api: CoveAPI; state: CoveSandboxSessionState; archiveLimits?: SandboxArchiveLimits | null }) {
    this.api = args.api;
    this.state = args.state;
    this.setArchiveLimits(args.archiveLimits);
  }

  /** The sandbox's id on the Cove server. */
  get sandboxId(): string {
    return this.state.sandboxId;
  }

  private path(suffix = ''): string {
    return `/v1/sandboxes/${encodeURIComponent(this.state.sandboxId)}${suffix}`;
  }

  setArchiveLimits(limits?: SandboxArchiveLimits | null): void {
    validateSandboxArchiveLimits(limits);
    this.archiveLimits = limits;
  }

  supportsPty(): boolean {
    return true;
  }

  // ---- commands ----

  /**
   * execStream runs a shell command line, streaming its output to the
   * callbacks as it arrives, and returns how it ended.
   */
  async execStream(cmd: string, opts: CoveExecOptions = {}): Promise<CoveExecResult> {
    const stdin = opts.stdin === undefined ? undefined
      : Buffer.from(typeof opts.stdin === 'string' ? Buffer.from(opts.stdin, 'utf8') : opts.stdin).toString('base64');
    // The server keeps a working directory inside the workspace; the
    // model's paths are checked here first (exec, execCommand).
    const root = this.state.manifest.root;
    const dir = !opts.workdir ? root : posix.normalize(opts.workdir.startsWith('/') ? opts.workdir : posix.join(root, opts.workdir));
    return await this.api.exec(this.state.sandboxId, {
      cmd, shell: true, dir,
      env: { ...this.state.environment, ...opts.env },
      user: opts.runAs,
      stdin,
      timeout_seconds: opts.timeoutSeconds,
    }, (stream, data) => (stream === 'stdout' ? opts.onStdout : opts.onStderr)?.(data));
  }

  async exec(args: ExecCommandArgs): Promise<SandboxExecResult> {
    const start = Date.now();
    const r = await this.execStream(shellLine(args), { workdir: this.resolveWorkdir(args.workdir), runAs: args.runAs });
    const stdout = new TextDecoder().decode(r.stdout);
    const stderr = new TextDecoder().decode(r.stderr);
    const out = truncateOutput(joinOutput(stdout, stderr), args.maxOutputTokens);
    return {
      output: out.text, stdout, stderr, wallTimeSeconds: elapsedSeconds(start),
      exitCode: r.exitCode, originalTokenCount: out.originalTokenCount,
    };
  }

  /**
   * execCommand is the shell tool's exec_command: it answers after the
   * command ends or after yield_time_ms, whichever comes first; a command
   * still running then gets a session id that write_stdin polls (and,
   * with tty=true, types into).
   */
  async execCommand(args: ExecCommandArgs): Promise<string> {
    if (args.tty) {
      return await this.execPty(args);
    }
    const start = Date.now();
    const abort = new AbortController();
    const res = await this.api.startExec(this.state.sandboxId, {
      cmd: shellLine(args), shell: true,
      dir: this.resolveWorkdir(args.workdir),
      env: this.state.environment,
      user: args.runAs,
    }, abort.signal);
    const id = this.ptys.add(new StreamProcess(this.api, this.state.sandboxId, res, abort));
    return await this.ptys.report(id, start, clampYield(args.yieldTimeMs, 10_000), args.maxOutputTokens);
  }

  /**
   * openPty starts a command (default: the sandbox's shell) on a new
   * terminal; write keystrokes to it and read its output.
   */
  async openPty(cmd?: string, size?: { cols: number; rows: number }): Promise<PtyProcess> {
    return await PtyProcess.open(this.api, this.state.sandboxId, cmd ?? '', size);
  }

  private async execPty(args: ExecCommandArgs): Promise<string> {
    if (args.runAs) {
      throw new SandboxUnsupportedFeatureError('CoveSandboxClient tty=true does not run as another user yet; run without tty or without runAs.', {
        provider: 'cove', feature: 'tty.runAs',
      });
    }
    const start = Date.now();
    const env = Object.entries(this.state.environment).map(([k, v]) => shellQuote(`${k}=${v}`)).join(' ');
    const line = `cd ${shellQuote(this.resolveWorkdir(args.workdir))} && exec env ${env} ${args.shell ? shellLine(args) : `/bin/sh -c ${shellQuote(args.cmd)}`}`;
    const proc = await PtyProcess.open(this.api, this.state.sandboxId, line);
    const id = this.ptys.add(proc);
    return await this.ptys.report(id, start, clampYield(args.yieldTimeMs, 10_000), args.maxOutputTokens);
  }

  async writeStdin(args: WriteStdinArgs): Promise<string> {
    const start = Date.now();
    const proc = this.ptys.get(args.sessionId);
    const chars = args.chars ?? '';
    if (proc && chars) {
      await proc.write(chars);
    }
    return await this.ptys.report(args.sessionId, start, clampYield(args.yieldTimeMs, 250, chars === ''), args.maxOutputTokens);
  }

  // ---- files ----

  /** resolvePath makes a tool's path absolute, inside the workspace or a granted path. */
  resolvePath(path: string, forWrite = false): string {
    const root = this.state.manifest.root;
    if (path.includes('\0')) {
      throw new SandboxPathResolutionError(`Sandbox path ${JSON.stringify(path)} has a NUL byte.`, { path });
    }
    const abs = posix.normalize(path.startsWith('/') ? path : posix.join(root, path));
    if (isUnder(abs, root)) return abs;
    for (const grant of this.state.manifest.extraPathGrants) {
      if (isUnder(abs, grant.path)) {
        if (forWrite && grant.readOnly) {
          throw new SandboxPathResolutionError(`Sandbox path ${abs} is granted read-only.`, { path: abs });
        }
        return abs;
      }
    }
    throw new SandboxPathResolutionError(`Sandbox path ${path} is outside the workspace ${root}.`, { path, root });
  }

  resolveWorkdir(workdir?: string): string {
    return workdir ? this.resolvePath(workdir) : this.state.manifest.root;
  }

  /** files is the file operations of runAs, or of the sandbox's user. */
  private files(runAs?: string): Files {
    return runAs ? this.filesAs(runAs) : this.apiFiles;
  }

  private readonly apiFiles: Files = {
    read: async (abs) => await this.api.bytes('GET', this.path('/files'), { query: { path: abs } }),
    write: async (abs, content) => {
      const parent = posix.dirname(abs);
      if (parent !== '/') await this.apiFiles.mkdir(parent);
      await this.api.drop('PUT', this.path('/files'), { query: { path: abs }, body: content });
    },
    mkdir: async (abs) => await this.api.drop('POST', this.path('/files/mkdir'), { query: { path: abs } }),
    remove: async (abs) => await this.api.drop('DELETE', this.path('/files'), { query: { path: abs } }),
    stat: async (abs) => {
      try {
        const fi = await this.api.json<CoveFileInfo>('GET', this.path('/files/stat'), { query: { path: abs } });
        return fi.type === 'file' || fi.type === 'dir' ? fi.type : 'other';
      } catch (error) {
        if (error instanceof CoveAPIError && error.status === 404) return undefined;
        throw error;
      }
    },
    list: async (abs) => {
      const list = await this.api.json<{ files: CoveFileInfo[] }>('GET', this.path('/files/list'), { query: { path: abs } });
      return list.files.map((f) => ({ name: f.name, path: f.path, type: f.type === 'file' ? 'file' : f.type === 'dir' ? 'dir' : 'other' }));
    },
  };

  private filesAs(user: string): Files {
    const run = async (cmd: string, stdin?: Uint8Array) => {
      const r = await this.execStream(cmd, { runAs: user, stdin });
      return { ok: r.exitCode === 0, out: r.stdout, err: new TextDecoder().decode(r.stderr).trim() };
    };
    const check = async (what: string, cmd: string, stdin?: Uint8Array) => {
      const r = await run(cmd, stdin);
      if (!r.ok) {
        throw new SandboxProviderError(`CoveSandboxClient could not ${what} as ${user}: ${r.err}`, { provider: 'cove', user });
      }
      return r.out;
    };
    const files: Files = {
      read: async (abs) => {
        if ((await files.stat(abs)) === undefined) throw notFound(abs);
        return await check(`read ${abs}`, `cat -- ${shellQuote(abs)}`);
      },
      write: async (abs, content) => {
        await check(`write ${abs}`, `mkdir -p -- ${shellQuote(posix.dirname(abs))} && cat > ${shellQuote(abs)}`, content);
      },
      mkdir: async (abs) => { await check(`make ${abs}`, `mkdir -p -- ${shellQuote(abs)}`); },
      remove: async (abs) => { await check(`remove ${abs}`, `rm -rf -- ${shellQuote(abs)}`); },
      stat: async (abs) => {
        const q = shellQuote(abs);
        const r = await run(`if [ -d ${q} ]; then echo dir; elif [ -f ${q} ]; then echo file; elif [ -e ${q} ] || [ -L ${q} ]; then echo other; fi`);
        const t = new TextDecoder().decode(r.out).trim();
        return t === 'dir' || t === 'file' || t === 'other' ? t : undefined;
      },
      list: async (abs) => {
        const out = new TextDecoder().decode(await check(`list ${abs}`, `find ${shellQuote(abs)} -mindepth 1 -maxdepth 1 -printf '%y\\t%f\\0'`));
        return out.split('\0').filter(Boolean).map((entry) => {
          const tab = entry.indexOf('\t');
          const y = entry.slice(0, tab);
          const name = entry.slice(tab + 1);
          return { name, path: posix.join(abs, name), type: y === 'f' ? 'file' as const : y === 'd' ? 'dir' as const : 'other' as const };
        });
      },
    };
    return files;
  }

  async readFile(args: ReadFileArgs): Promise<Uint8Array> {
    const bytes = await this.files(args.runAs).read(this.resolvePath(args.path));
    return typeof args.maxBytes === 'number' && bytes.byteLength > args.maxBytes ? bytes.subarray(0, args.maxBytes) : bytes;
  }

  /** readBytes reads a file by its absolute path. */
  async readBytes(abs: string): Promise<Uint8Array> {
    return await this.apiFiles.read(abs);
  }

  /** writeBytes writes a file by its absolute path, making its parents. */
  async writeBytes(abs: string, content: string | Uint8Array): Promise<void> {
    await this.apiFiles.write(abs, typeof content === 'string' ? new TextEncoder().encode(content) : content);
  }

  async mkdir(abs: string): Promise<void> {
    await this.apiFiles.mkdir(abs);
  }

  async remove(abs: string): Promise<void> {
    await this.apiFiles.remove(abs);
  }

  async pathExists(path: string, runAs?: string): Promise<boolean> {
    return (await this.files(runAs).stat(this.resolvePath(path))) !== undefined;
  }

  async directoryExists(path: string, runAs?: string): Promise<boolean> {
    return (await this.files(runAs).stat(this.resolvePath(path))) === 'dir';
  }

  async listDir(args: ListDirectoryArgs): Promise<SandboxDirectoryEntry[]> {
    return await this.files(args.runAs).list(this.resolvePath(args.path));
  }

  async viewImage(args: ViewImageArgs): Promise<ToolOutputImage> {
    return imageOutputFromBytes(args.path, await this.readFile({ path: args.path, runAs: args.runAs }));
  }

  createEditor(runAs?: string): Editor {
    const fs = this.files(runAs);
    const text = (s: string) => new TextEncoder().encode(s);
    return {
      createFile: async (op) => {
        const abs = this.resolvePath(op.path, true);
        if (await fs.stat(abs)) {
          throw new UserError(`Cannot create file because it already exists: ${op.path}`);
        }
        await fs.write(abs, text(applyDiff('', op.diff, 'create')));
        return {};
      },
      updateFile: async (op) => {
        const abs = this.resolvePath(op.path, true);
        const dest = op.moveTo ? this.resolvePath(op.moveTo, true) : abs;
        await fs.write(dest, text(applyDiff(new TextDecoder().decode(await fs.read(abs)), op.diff)));
        if (dest !== abs) await fs.remove(abs);
        return {};
      },
      deleteFile: async (op) => {
        await fs.remove(this.resolvePath(op.path, true));
        return {};
      },
    };
  }

  // ---- manifest ----

  async applyManifest(manifest: Manifest, runAs?: string): Promise<void> {
    const environment = await materializeEnvironment(manifest, this.state.environment);
    await this.provisionAccounts(manifest);
    for (const { absolutePath, entry } of manifest.iterEntries()) {
      await this.materialize(absolutePath, entry, this.files(runAs));
    }
    this.state.manifest = mergeManifestDelta(this.state.manifest, manifest);
    this.state.environment = { ...this.state.environment, ...environment };
  }

  async materializeEntry(args: MaterializeEntryArgs): Promise<void> {
    const root = this.state.manifest.root;
    const logical = args.path.startsWith('/') ? posix.relative(root, args.path) : args.path;
    const single = new Manifest({ root, entries: { [logical]: args.entry } });
    for (const { absolutePath, entry } of single.iterEntries()) {
      await this.materialize(absolutePath, entry, this.files(args.runAs));
    }
    this.state.manifest = mergeManifestEntryDelta(this.state.manifest, logical, args.entry);
  }

  /**
   * provisionAccounts creates the manifest's users and groups that the
   * sandbox lacks (as its root, with useradd and groupadd), and waits
   * until its daemon can run commands as each user.
   */
  private async provisionAccounts(manifest: Manifest): Promise<void> {
    const users = new Set(manifest.users.map((u) => u.name));
    for (const g of manifest.groups) for (const u of g.users ?? []) users.add(u.name);
    if (users.size === 0 && manifest.groups.length === 0) return;
    const q = shellQuote;
    const lines = [
      ...manifest.groups.map((g) => `getent group ${q(g.name)} >/dev/null 2>&1 || groupadd ${q(g.name)}`),
      ...[...users].map((u) => `id -u ${q(u)} >/dev/null 2>&1 || useradd -U -M -s /usr/sbin/nologin ${q(u)}`),
      ...manifest.groups.flatMap((g) => (g.users ?? []).map((u) => `usermod -aG ${q(g.name)} ${q(u.name)}`)),
    ];
    const r = await this.execStream(lines.join(' && '), { runAs: 'root' });
    if (r.exitCode !== 0) {
      throw new SandboxProviderError(`CoveSandboxClient could not create the manifest's users and groups (the template needs useradd and groupadd): ${new TextDecoder().decode(r.stderr).trim()}`, {
        provider: 'cove',
      });
    }
    // The daemon re-reads /etc/passwd every few seconds.
    for (const u of users) {
      let last: unknown;
      for (let i = 0; ; i++) {
        try {
          const r = await this.execStream('true', { runAs: u });
          if (r.exitCode === 0) break;
          last = new Error(new TextDecoder().decode(r.stderr));
        } catch (error) {
          last = error;
        }
        if (i >= 150) {
          throw new SandboxProviderError(`CoveSandboxClient made user ${u}, but commands cannot run as it: ${(last as Error).message}`, { provider: 'cove', user: u });
        }
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
  }

  /** materialize makes one entry (not its children: iterEntries yields those). */
  private async materialize(abs: string, entry: Entry, fs: Files): Promise<void> {
    this.resolvePath(abs, true);
    switch (entry.type) {
      case 'dir':
        await fs.mkdir(abs);
        return;
      case 'file':
        await fs.write(abs, typeof entry.content === 'string' ? new TextEncoder().encode(entry.content) : entry.content);
        return;
      case 'local_file':
        await fs.write(abs, await readFile(hostResolve(entry.src)));
        return;
      case 'local_dir':
        await this.uploadDir(hostResolve(entry.src), abs, fs);
        return;
      case 'git_repo': {
        const url = `https://${entry.host ?? 'github.com'}/${entry.repo}.git`;
        const branch = entry.ref ? `--branch ${shellQuote(entry.ref)} ` : '';
        const r = await this.execStream(`git clone --depth 1 ${branch}${shellQuote(url)} ${shellQuote(abs)}`);
        if (r.exitCode !== 0) {
          throw new SandboxProviderError(`CoveSandboxClient could not clone ${entry.repo} (does the sandbox's network allow it?): ${new TextDecoder().decode(r.stderr)}`, {
            provider: 'cove', path: abs,
          });
        }
        return;
      }
      default:
        throw new SandboxUnsupportedFeatureError(`CoveSandboxClient does not support ${entry.type} manifest entries yet.`, {
          provider: 'cove', feature: `entry.${entry.type}`, path: abs,
        });
    }
  }

  /** uploadDir copies a host directory's files (not its symlinks) into the sandbox. */
  private async uploadDir(src: string, dest: string, fs: Files): Promise<void> {
    await fs.mkdir(dest);
    for (const name of await readdir(src)) {
      const from = hostJoin(src, name);
      const to = posix.join(dest, name);
      const st = await lstat(from);
      if (st.isDirectory()) {
        await this.uploadDir(from, to, fs);
      } else if (st.isFile()) {
        await fs.write(to, await readFile(from));
      }
    }
  }

  // ---- persistence ----

  /**
   * persistWorkspace saves the workspace: as a tar of the workspace root,
   * or, with workspacePersistence "snapshot", as a Cove snapshot on the
   * server, returned as a small reference that hydrateWorkspace restores
   * (a tar when the manifest has ephemeral entries).
   */
  async persistWorkspace(): Promise<Uint8Array> {
    // Ephemeral entries (credentials, caches) are not part of what is
    // kept; a snapshot cannot leave them out, so a tar is made instead.
    const ephemeral = [...this.state.manifest.ephemeralPersistencePaths()];
    if (this.state.workspacePersistence === 'snapshot' && ephemeral.length === 0) {
      const sn = await this.api.json<CoveSnapshot>('POST', this.path('/snapshots'));
      return encodeSnapshotRef(sn.id);
    }
    const tar = await this.api.bytes('GET', this.path('/tar'), { query: { path: this.state.manifest.root } });
    return ephemeral.length ? dropMembers(tar, (name) => ephemeral.some((p) => name === p || name.startsWith(`${p}/`))) : tar;
  }

  /**
   * hydrateWorkspace restores what persistWorkspace saved: a tar replaces
   * the workspace of this sandbox; a snapshot reference makes a new
   * sandbox from the snapshot (same options) and this session moves to it,
   * ending the old one.
   */
  async hydrateWorkspace(data: WorkspaceArchiveData, options: WorkspaceArchiveOptions = {}): Promise<void> {
    const snapshotId = decodeSnapshotRef(data);
    if (snapshotId) {
      await this.replaceFromSnapshot(snapshotId);
      return;
    }
    const bytes = toBytes(data);
    checkArchive(bytes, resolveSandboxArchiveLimits(options.archiveLimits === undefined ? this.archiveLimits : options.archiveLimits));
    await this.api.drop('PUT', this.path('/tar'), { query: { path: this.state.manifest.root }, body: bytes, contentType: 'application/x-tar' });
  }

  private async replaceFromSnapshot(snapshotId: string): Promise<void> {
    const sb = await this.api.json<CoveSandbox>('POST', `/v1/snapshots/${encodeURIComponent(snapshotId)}/restore`, {
      json: this.state.createRequest,
    });
    const old = this.state.sandboxId;
    this.ptys.closeAll();
    this.state.sandboxId = sb.id;
    delete this.state.exposedPorts;
    await this.api.drop('DELETE', `/v1/sandboxes/${encodeURIComponent(old)}`).catch(() => {});
  }

  // ---- ports ----

  async resolveExposedPort(port: number): Promise<ExposedPortEndpoint> {
    const configured = this.state.configuredExposedPorts;
    if (configured && configured.length > 0 && !configured.includes(port)) {
      throw new SandboxProviderError(`Port ${port} is not among the exposed ports this session was created with (${configured.join(', ')}).`, {
        provider: 'cove', port,
      });
    }
    const p = await this.api.json<CovePort>('POST', this.path(`/ports/${port}`), { json: { public: this.state.publicPorts === true } });
    const url = new URL(p.url || p.path_url, this.api.baseURL);
    if (p.token) url.searchParams.set('cove_token', p.token);
    const tls = url.protocol === 'https:';
    const endpoint: ExposedPortEndpoint = {
      host: url.hostname,
      port: url.port ? Number(url.port) : tls ? 443 : 80,
      tls,
      url: url.toString(),
      ...(url.search ? { query: url.search.slice(1) } : {}),
    };
    this.state.exposedPorts = { ...this.state.exposedPorts, [String(port)]: endpoint };
    return endpoint;
  }

  // ---- lifecycle ----

  /** info is the sandbox as the server describes it now. */
  async info(): Promise<CoveSandbox> {
    return await this.api.json<CoveSandbox>('GET', this.path());
  }

  async running(): Promise<boolean> {
    try {
      return (await this.info()).state === 'running';
    } catch {
      return false;
    }
  }

  /** start resumes the sandbox when it is stopped. */
  async start(): Promise<void> {
    if ((await this.info()).state !== 'running') {
      await this.api.drop('POST', this.path('/resume'));
    }
  }

  async shutdown(): Promise<void> {
    this.ptys.closeAll();
  }

  /**
   * delete ends the sandbox when the SDK cleans up: it stops it, keeping
   * its disk, when the session was made with stopOnExit, and deletes it
   * otherwise.
   */
  async delete(_options?: SandboxSessionLifecycleOptions): Promise<void> {
    this.ptys.closeAll();
    if (this.state.stopOnExit) {
      await this.stopKeepingDisk();
      return;
    }
    await this.api.drop('DELETE', this.path()).catch((error: unknown) => {
      if (!(error instanceof CoveAPIError && error.status === 404)) throw error;
    });
  }

  async close(): Promise<void> {
    await this.delete({ reason: 'close' });
  }

  /** stopKeepingDisk stops the sandbox; resume() or start() brings it back with its files. */
  async stopKeepingDisk(): Promise<void> {
    try {
      await this.api.drop('POST', this.path('/stop'));
    } catch (error) {
      // Already stopped is fine.
      if (!(error instanceof CoveAPIError && error.coveCode === 'state')) throw error;
    }
  }
}

/**
 * checkArchive holds a tar to the SDK's archive limits (its size, its
 * members, the bytes they unpack to) before any of it is sent; the server
 * checks each member's name and type itself.
 */
export function checkArchive(tar: Uint8Array, limits: ReturnType<typeof resolveSandboxArchiveLimits>): void {
  if (!limits) return;
  const fail = (what: string) => {
    throw new SandboxSnapshotError(`The workspace archive ${what}; nothing was restored.`, { provider: 'cove' });
  };
  if (limits.maxInputBytes !== null && tar.byteLength > limits.maxInputBytes) {
    fail(`is ${tar.byteLength} bytes, over the limit of ${limits.maxInputBytes}`);
  }
  let members = 0;
  let extracted = 0;
  for (let off = 0; off + 512 <= tar.byteLength;) {
    const header = tar.subarray(off, off + 512);
    if (header.every((b) => b === 0)) break;
    const field = new TextDecoder().decode(header.subarray(124, 136)).replace(/\0.*$/s, '').trim();
    const size = (header[124]! & 0x80) !== 0 ? Number.MAX_SAFE_INTEGER : parseInt(field || '0', 8);
    if (!Number.isFinite(size) || size < 0) fail('is not a valid tar');
    const type = String.fromCharCode(header[156]!);
    if (type !== 'x' && type !== 'g' && type !== 'L' && type !== 'K') {
      members++;
      extracted += size;
    }
    if (limits.maxMembers !== null && members > limits.maxMembers) fail(`has more than ${limits.maxMembers} members`);
    if (limits.maxExtractedBytes !== null && extracted > limits.maxExtractedBytes) fail(`unpacks to more than ${limits.maxExtractedBytes} bytes`);
    off += 512 + Math.ceil(size / 512) * 512;
  }
}

/**
 * dropMembers copies a tar without the members whose path (relative to
 * the archive's root, PAX and GNU long names included) drop accepts.
 */
export function dropMembers(tar: Uint8Array, drop: (name: string) => boolean): Uint8Array {
  const out: Uint8Array[] = [];
  let pending: Uint8Array[] = [];
  let longName: string | undefined;
  const str = (b: Uint8Array) => new TextDecoder().decode(b).replace(/\0.*$/s, '');
  for (let off = 0; off + 512 <= tar.byteLength;) {
    const header = tar.subarray(off, off + 512);
    if (header.every((b) => b === 0)) {
      out.push(tar.subarray(off));
      break;
    }
    const size = parseInt(str(header.subarray(124, 136)).trim() || '0', 8);
    const end = off + 512 + Math.ceil(size / 512) * 512;
    const block = tar.subarray(off, end);
    const data = tar.subarray(off + 512, off + 512 + size);
    const type = String.fromCharCode(header[156]!);
    off = end;
    if (type === 'x' || type === 'L') {
      pending.push(block);
      if (type === 'L') longName = str(data);
      else longName = /(?:^|\n)\d+ path=([^\n]*)\n/.exec(new TextDecoder().decode(data))?.[1] ?? longName;
      continue;
    }
    if (type === 'g') {
      out.push(block);
      continue;
    }
    let name = longName;
    if (name === undefined) {
      name = str(header.subarray(0, 100));
      const prefix = str(header.subarray(345, 500));
      if (str(header.subarray(257, 263)).startsWith('ustar') && prefix) name = `${prefix}/${name}`;
    }
    name = name.replace(/^(\.\/)+/, '').replace(/\/+$/, '');
    if (!drop(name)) out.push(...pending, block);
    pending = [];
    longName = undefined;
  }
  return Buffer.concat(out);
}

function isUnder(path: string, root: string): boolean {
  const r = posix.normalize(root);
  return path === r || path.startsWith(r.endsWith('/') ? r : `${r}/`);
}

function joinOutput(stdout: string, stderr: string): string {
  return [stdout, stderr].filter((s) => s.trim().length > 0).join('\n');
}

/** shellLine is the command line exec_command asked for, under its shell. */
function shellLine(args: ExecCommandArgs): string {
  if (!args.shell) return args.cmd;
  return `${shellQuote(args.shell)} ${args.login === false ? '-c' : '-lc'} ${shellQuote(args.cmd)}`;
}
