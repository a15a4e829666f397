// CoveSandboxClient: the Agents SDK's SandboxClient for a Cove server.

import {
  Manifest,
  normalizeSandboxClientCreateArgs,
  SandboxConfigurationError,
  SandboxUnsupportedFeatureError,
} from '@openai/agents-core/sandbox';
import type {
  SandboxArchiveLimits,
  SandboxClient,
  SandboxClientCreateArgs,
  SandboxClientOptions,
  SandboxClientResumeOptions,
} from '@openai/agents-core/sandbox';
import {
  deserializeManifest,
  materializeEnvironment,
  serializeManifestRecord,
} from '@openai/agents-core/sandbox/internal';
import { CoveAPI, CoveAPIError } from './api.js';
import type { CoveCreateRequest, CoveNetwork, CoveSandbox } from './api.js';
import { CoveSandboxSession } from './session.js';
import type { CoveSandboxSessionState, CoveWorkspacePersistence } from './session.js';

/** Cove's sizes: small (1 CPU, 512 MiB, 2 GiB disk), medium (2, 2 GiB, 10 GiB), large (4, 8 GiB, 40 GiB). */
export type CoveSize = 'small' | 'medium' | 'large';

/**
 * How a sandbox is isolated. Cove's server runs every sandbox on its
 * native tier today and refuses a create that names a tier (400); the
 * option is here so code can ask for a stronger tier once the server has
 * one.
 */
export type CoveIsolation = 'native' | 'gvisor' | 'microvm';

/** Options of CoveSandboxClient, for the client and for each run. */
export interface CoveSandboxClientOptions extends SandboxClientOptions {
  /** The Cove server's URL; default $COVE_SERVER. */
  server?: string;
  /** An API key of the team the sandboxes belong to; default $COVE_API_KEY. */
  apiKey?: string;
  /** The template (root filesystem) to start from; the server's default when absent. */
  template?: string;
  size?: CoveSize;
  /** CPUs, 0.1 to 64; overrides the size's. */
  cpus?: number;
  /** Memory in bytes; overrides the size's. */
  memoryBytes?: number;
  /** Disk in bytes; overrides the size's. */
  diskBytes?: number;
  /** Most processes and threads at once; overrides the size's. */
  pids?: number;
  /** Seconds the sandbox lives after it starts; the server's default (30 min) when absent. */
  ttlSeconds?: number;
  /** Stop the sandbox after this many seconds with no process, stream or port connection. */
  idleTimeoutSeconds?: number;
  /** What the TTL and idle timeout do: stop (keep the disk; default) or delete. */
  onExpire?: 'stop' | 'delete';
  /**
   * When the SDK ends the session, stop the sandbox keeping its disk
   * rather than delete it, so its session state can resume it later.
   */
  stopOnExit?: boolean;
  /** What the sandbox may reach: none (the default), internet, or only a list. */
  network?: CoveNetwork['mode'] | CoveNetwork;
  /** Ports resolveExposedPort may expose; any when absent. */
  exposedPorts?: number[];
  /** Expose ports without a token. */
  publicPorts?: boolean;
  /** Environment variables of every command (the manifest's are added). */
  env?: Record<string, string>;
  /** Labels to find the sandbox by. */
  labels?: Record<string, string>;
  /** The user commands run as; the template's unprivileged user when absent. */
  user?: string;
  isolation?: CoveIsolation;
  /** persistWorkspace as a tar (default) or a Cove snapshot on the server. */
  workspacePersistence?: CoveWorkspacePersistence;
  archiveLimits?: SandboxArchiveLimits | null;
}

/**
 * A SandboxClient whose sandboxes live on a Cove server, for
 * `run(agent, input, { sandbox: { client: new CoveSandboxClient() } })`.
 */
export class CoveSandboxClient implements SandboxClient<CoveSandboxClientOptions, CoveSandboxSessionState> {
  readonly backendId = 'cove';
  private readonly options: CoveSandboxClientOptions;

  constructor(options: CoveSandboxClientOptions = {}) {
    this.options = options;
  }

  /**
   * api is the server this client talks to. A session state names its
   * server too, but only to be checked against this one: state can come
   * from anywhere, and the API key must never follow it to another host.
   */
  private api(options: CoveSandboxClientOptions = {}, stateServer?: string): CoveAPI {
    const url = options.server ?? this.options.server ?? process.env.COVE_SERVER;
    const key = options.apiKey ?? this.options.apiKey ?? process.env.COVE_API_KEY;
    if (!url) {
      throw new SandboxConfigurationError('CoveSandboxClient needs the Cove server\'s URL: pass { server } or set COVE_SERVER.');
    }
    if (!key) {
      throw new SandboxConfigurationError('CoveSandboxClient needs an API key: pass { apiKey } or set COVE_API_KEY (`cove key create` makes one).');
    }
    const api = new CoveAPI(url, key);
    if (stateServer !== undefined && new URL(stateServer).href !== new URL(api.baseURL).href) {
      throw new SandboxConfigurationError(`This session state belongs to the Cove server ${stateServer}, but the client talks to ${api.baseURL}; configure the client for that server to resume it.`);
    }
    return api;
  }

  async create(args?: SandboxClientCreateArgs<CoveSandboxClientOptions> | Manifest, manifestOptions?: CoveSandboxClientOptions): Promise<CoveSandboxSession> {
    const a = normalizeSandboxClientCreateArgs(args, manifestOptions);
    if (a.snapshot && a.snapshot.type !== 'noop') {
      throw new SandboxUnsupportedFeatureError('CoveSandboxClient keeps workspaces with workspacePersistence ("tar" or "snapshot") and persistWorkspace/hydrateWorkspace, not core snapshot specs.', {
        provider: 'cove', feature: 'snapshot',
      });
    }
    const opts = { ...this.options, ...a.options };
    const api = this.api(opts);
    const environment = await materializeEnvironment(a.manifest, opts.env);
    const req = createRequest(opts, a.manifest.root, environment);
    const sb = await api.json<CoveSandbox>('POST', '/v1/sandboxes', { json: req });
    const session = new CoveSandboxSession({
      api,
      archiveLimits: a.archiveLimits ?? opts.archiveLimits,
      state: {
        manifest: new Manifest({ root: a.manifest.root }),
        sandboxId: sb.id,
        server: api.baseURL,
        createRequest: req,
        stopOnExit: opts.stopOnExit === true,
        workspacePersistence: persistence(opts.workspacePersistence),
        configuredExposedPorts: opts.exposedPorts,
        publicPorts: opts.publicPorts,
        environment,
      },
    });
    try {
      await session.mkdir(a.manifest.root);
      await session.applyManifest(a.manifest);
    } catch (error) {
      await api.drop('DELETE', `/v1/sandboxes/${encodeURIComponent(sb.id)}`).catch(() => {});
      throw error;
    }
    return session;
  }

  /**
   * resume reconnects to the sandbox of a session state, resuming it when
   * it was stopped. When the sandbox is gone, it makes a new one with the
   * same options and manifest.
   */
  async resume(state: CoveSandboxSessionState, options: SandboxClientResumeOptions<CoveSandboxClientOptions> = {}): Promise<CoveSandboxSession> {
    const api = this.api(options.clientOptions, state.server);
    let sb: CoveSandbox | undefined;
    try {
      sb = await api.json<CoveSandbox>('GET', `/v1/sandboxes/${encodeURIComponent(state.sandboxId)}`);
    } catch (error) {
      if (!(error instanceof CoveAPIError && error.status === 404)) throw error;
    }
    if (sb) {
      if (sb.state !== 'running') {
        await api.drop('POST', `/v1/sandboxes/${encodeURIComponent(sb.id)}/resume`);
      }
      return new CoveSandboxSession({ api, state, archiveLimits: options.archiveLimits ?? this.options.archiveLimits });
    }
    const session = await this.create({ manifest: state.manifest, options: { ...optionsFromState(state), ...options.clientOptions } });
    return session;
  }

  async delete(state: CoveSandboxSessionState): Promise<void> {
    const api = this.api({}, state.server);
    await api.drop('DELETE', `/v1/sandboxes/${encodeURIComponent(state.sandboxId)}`).catch((error: unknown) => {
      if (!(error instanceof CoveAPIError && error.status === 404)) throw error;
    });
  }

  /** A session made with stopOnExit keeps its sandbox, so its state is worth saving. */
  canPersistOwnedSessionState(state: CoveSandboxSessionState): boolean {
    return state.stopOnExit;
  }

  async serializeSessionState(state: CoveSandboxSessionState): Promise<Record<string, unknown>> {
    return {
      sandboxId: state.sandboxId,
      server: state.server,
      createRequest: stripEnv(state.createRequest),
      stopOnExit: state.stopOnExit,
      workspacePersistence: state.workspacePersistence,
      configuredExposedPorts: state.configuredExposedPorts,
      publicPorts: state.publicPorts,
      // The manifest's variables are kept with it; these are the
      // client's own env option, needed to remake a lost sandbox.
      environment: nonManifestEnv(state),
      manifest: serializeManifestRecord(state.manifest),
      ...(state.exposedPorts ? { exposedPorts: state.exposedPorts } : {}),
    };
  }

  async deserializeSessionState(raw: Record<string, unknown>): Promise<CoveSandboxSessionState> {
    const sandboxId = raw.sandboxId;
    const server = raw.server;
    if (typeof sandboxId !== 'string' || !sandboxId || typeof server !== 'string' || !server) {
      throw new SandboxConfigurationError('Cove session state needs sandboxId and server.');
    }
    const manifest = deserializeManifest(raw.manifest as Record<string, unknown>);
    const saved = isStringRecord(raw.environment) ? raw.environment : {};
    const environment = await materializeEnvironment(manifest, { ...this.options.env, ...saved });
    const createRequest = (typeof raw.createRequest === 'object' && raw.createRequest ? raw.createRequest : {}) as CoveCreateRequest;
    return {
      manifest,
      sandboxId,
      server,
      createRequest: { ...createRequest, ...(Object.keys(environment).length ? { env: environment } : {}) },
      stopOnExit: raw.stopOnExit === true,
      workspacePersistence: persistence(raw.workspacePersistence),
      configuredExposedPorts: Array.isArray(raw.configuredExposedPorts) ? raw.configuredExposedPorts.filter((p): p is number => typeof p === 'number') : undefined,
      publicPorts: raw.publicPorts === true,
      environment,
      ...(raw.exposedPorts && typeof raw.exposedPorts === 'object' ? { exposedPorts: raw.exposedPorts as CoveSandboxSessionState['exposedPorts'] } : {}),
    };
  }
}

/** createRequest turns options into the body of POST /v1/sandboxes. */
export function createRequest(o: CoveSandboxClientOptions, root: string, env: Record<string, string>): CoveCreateRequest {
  const req: CoveCreateRequest = {};
  if (o.template) req.template = o.template;
  if (o.size) req.size = o.size;
  if (o.cpus !== undefined) req.cpus = o.cpus;
  if (o.memoryBytes !== undefined) req.memory_bytes = o.memoryBytes;
  if (o.diskBytes !== undefined) req.disk_bytes = o.diskBytes;
  if (o.pids !== undefined) req.pids = o.pids;
  if (o.ttlSeconds !== undefined) req.ttl_seconds = o.ttlSeconds;
  if (o.idleTimeoutSeconds !== undefined) req.idle_timeout_seconds = o.idleTimeoutSeconds;
  if (o.onExpire) req.on_expire = o.onExpire;
  if (o.labels && Object.keys(o.labels).length) req.labels = o.labels;
  if (o.user) req.user = o.user;
  if (o.isolation) req.isolation = o.isolation;
  if (root && root !== '/workspace') req.root = root;
  if (o.network) req.network = typeof o.network === 'string' ? { mode: o.network } : o.network;
  if (Object.keys(env).length) req.env = env;
  return req;
}

function optionsFromState(s: CoveSandboxSessionState): CoveSandboxClientOptions {
  const r = s.createRequest;
  return {
    template: r.template, size: r.size as CoveSize | undefined, cpus: r.cpus, memoryBytes: r.memory_bytes,
    diskBytes: r.disk_bytes, pids: r.pids, ttlSeconds: r.ttl_seconds, idleTimeoutSeconds: r.idle_timeout_seconds,
    onExpire: r.on_expire, labels: r.labels, user: r.user, isolation: r.isolation as CoveIsolation | undefined,
    network: r.network, env: nonManifestEnv(s), stopOnExit: s.stopOnExit,
    workspacePersistence: s.workspacePersistence, exposedPorts: s.configuredExposedPorts, publicPorts: s.publicPorts,
  };
}

function persistence(v: unknown): CoveWorkspacePersistence {
  if (v === undefined || v === 'tar') return 'tar';
  if (v === 'snapshot') return 'snapshot';
  throw new SandboxConfigurationError(`workspacePersistence ${JSON.stringify(v)}: use "tar" or "snapshot".`);
}

function nonManifestEnv(s: CoveSandboxSessionState): Record<string, string> {
  return Object.fromEntries(Object.entries(s.environment).filter(([k]) => !(k in s.manifest.environment)));
}

/** stripEnv drops env values from the saved create request: secrets stay out of run state. */
function stripEnv(r: CoveCreateRequest): CoveCreateRequest {
  const { env: _env, ...rest } = r;
  return rest;
}

function isStringRecord(v: unknown): v is Record<string, string> {
  return typeof v === 'object' && v !== null && Object.values(v).every((x) => typeof x === 'string');
}
