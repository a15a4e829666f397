// Package @cove-sandbox/openai-agents: Cove sandboxes for the OpenAI
// Agents SDK's SandboxAgent, through SandboxRunConfig's client.
export { CoveSandboxClient, createRequest } from './client.js';
export type { CoveIsolation, CoveSandboxClientOptions, CoveSize } from './client.js';
export { CoveSandboxSession, decodeSnapshotRef, encodeSnapshotRef } from './session.js';
export type { CoveExecOptions, CoveSandboxSessionState, CoveWorkspacePersistence } from './session.js';
export { CoveAPI, CoveAPIError } from './api.js';
export type { CoveCreateRequest, CoveExecResult, CoveNetwork, CoveSandbox } from './api.js';
export { PtyProcess } from './pty.js';
