// CoveSandboxClient with the real @openai/agents against a real Cove
// server. server/agentsjs_client_test.go starts the server and a scripted
// model (agent/model/fake) and runs this file with:
//   COVE_SERVER, COVE_API_KEY  the server and a team's key
//   OPENAI_BASE_URL            the scripted model (Chat Completions)
// The model's script: exec_command, then apply_patch, then "done".
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { OpenAIChatCompletionsModel, run, setTracingDisabled } from '@openai/agents';
import { Manifest, SandboxAgent, file, filesystem, shell } from '@openai/agents/sandbox';
import { CoveAPI, CoveSandboxClient, decodeSnapshotRef } from '../dist/index.js';

setTracingDisabled(true);

const api = new CoveAPI(process.env.COVE_SERVER, process.env.COVE_API_KEY);
const made = new Set();

// Every sandbox a test makes is deleted at the end, whatever happened.
after(async () => {
  for (const id of made) {
    await api.drop('DELETE', `/v1/sandboxes/${id}`).catch(() => {});
  }
});

function track(session) {
  made.add(session.sandboxId);
  return session;
}

const text = (bytes) => new TextDecoder().decode(bytes);

function agent() {
  const client = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: 'sk-test' });
  return new SandboxAgent({
    name: 'coder',
    instructions: 'Work in the sandbox.',
    model: new OpenAIChatCompletionsModel(client, 'gpt-test'),
    capabilities: [shell(), filesystem()],
  });
}

function manifest() {
  return new Manifest({ entries: { 'README.md': file({ content: 'read me\n' }) } });
}

async function state(id) {
  return (await api.json('GET', `/v1/sandboxes/${id}`)).state;
}

test('a SandboxAgent run execs and patches in a Cove sandbox', async () => {
  const client = new CoveSandboxClient({ labels: { test: 'agents-js' } });
  const session = track(await client.create({ manifest: manifest() }));
  const result = await run(agent(), 'Make the files.', { sandbox: { session } });
  assert.equal(result.finalOutput, 'done');
  const outputs = result.newItems.filter((i) => i.type === 'tool_call_output_item').map((i) => JSON.stringify(i.output));
  assert.match(outputs[0], /read me/, 'exec_command ran in the workspace, where the manifest put README.md');
  assert.match(outputs[1], /Patch applied|Created|hello/i);
  assert.equal(text(await session.readFile({ path: 'shell.txt' })), 'from-shell\n');
  assert.equal(text(await session.readFile({ path: 'notes/hello.txt' })), 'hello from apply_patch');
  const info = await session.info();
  assert.equal(info.labels.test, 'agents-js');
  await session.delete();
  await assert.rejects(api.json('GET', `/v1/sandboxes/${session.sandboxId}`), /not found/);

  // A sandbox the runner makes itself is deleted when the run ends.
  const before = (await api.json('GET', '/v1/sandboxes')).sandboxes.length;
  const owned = await run(agent(), 'Make the files.', { sandbox: { client, manifest: manifest() } });
  assert.equal(owned.finalOutput, 'done');
  assert.equal((await api.json('GET', '/v1/sandboxes')).sandboxes.length, before);
});

test('stopOnExit keeps the disk, and serialized session state resumes the same sandbox', async () => {
  const client = new CoveSandboxClient({ stopOnExit: true });
  const session = track(await client.create({ manifest: manifest() }));
  await session.execStream('echo kept > kept.txt');
  const saved = JSON.parse(JSON.stringify(await client.serializeSessionState(session.state)));
  assert.equal(saved.sandboxId, session.sandboxId);
  await session.delete({ reason: 'cleanup' });
  assert.equal(await state(session.sandboxId), 'stopped');

  // State names its server; the key never follows it elsewhere.
  await assert.rejects(client.resume(await client.deserializeSessionState({ ...saved, server: 'http://evil.example' })), /belongs to the Cove server/);
  const resumed = await client.resume(await client.deserializeSessionState(saved));
  assert.equal(resumed.sandboxId, session.sandboxId, 'the same sandbox, not a new one');
  assert.equal(await state(resumed.sandboxId), 'running');
  assert.equal(text(await resumed.readFile({ path: 'kept.txt' })), 'kept\n');
  assert.equal(text(await resumed.readFile({ path: 'README.md' })), 'read me\n');

  // The SDK's own path: SandboxRunConfig.sessionState.
  const result = await run(agent(), 'Make the files.', { sandbox: { client, sessionState: resumed.state } });
  assert.equal(result.finalOutput, 'done');
  await resumed.start(); // the runner's cleanup stopped it again (stopOnExit)
  assert.equal(text(await resumed.readFile({ path: 'notes/hello.txt' })), 'hello from apply_patch');
  assert.equal(text(await resumed.readFile({ path: 'kept.txt' })), 'kept\n');

  // A state whose sandbox is gone makes a new one, with its manifest.
  await client.delete(resumed.state);
  const remade = track(await client.resume(await client.deserializeSessionState(saved)));
  assert.notEqual(remade.sandboxId, session.sandboxId);
  assert.equal(text(await remade.readFile({ path: 'README.md' })), 'read me\n');
  assert.equal(await remade.pathExists('kept.txt'), false);
  await client.delete(remade.state);
});

test('a sandbox the runner makes is stopped on exit with its disk (stopOnExit), and RunState names it', async () => {
  const client = new CoveSandboxClient({ stopOnExit: true });
  const result = await run(agent(), 'Make the files.', { sandbox: { client, manifest: manifest() } });
  assert.equal(result.finalOutput, 'done');
  const saved = result.state._sandbox?.sessionState;
  assert.equal(saved?.backendId, 'cove');
  const id = saved.providerState.sandboxId;
  assert.match(id, /^sb-/, JSON.stringify(saved));
  made.add(id);
  assert.equal(await state(id), 'stopped', 'the runner\'s cleanup stopped the sandbox rather than deleting it');

  const again = await client.resume(await client.deserializeSessionState(saved.providerState));
  assert.equal(again.sandboxId, id);
  assert.equal(text(await again.readFile({ path: 'shell.txt' })), 'from-shell\n');
  assert.equal(text(await again.readFile({ path: 'notes/hello.txt' })), 'hello from apply_patch');
  await again.stopKeepingDisk();
  assert.equal(await state(id), 'stopped');
  await client.delete(again.state);
});

test('exec streams output, reports exit codes, stdin and timeouts', async () => {
  const client = new CoveSandboxClient({ env: { GREETING: 'hi' } });
  const session = track(await client.create({ manifest: manifest() }));
  const chunks = [];
  const r = await session.execStream('echo $GREETING; echo oops >&2; exit 3', { onStdout: (d) => chunks.push(text(d)) });
  assert.equal(r.exitCode, 3);
  assert.equal(chunks.join(''), 'hi\n');
  assert.equal(text(r.stderr), 'oops\n');
  const cat = await session.execStream('cat', { stdin: 'piped' });
  assert.equal(text(cat.stdout), 'piped');
  const slow = await session.execStream('sleep 30', { timeoutSeconds: 1 });
  assert.equal(slow.timedOut, true);
  const out = await session.execCommand({ cmd: 'pwd' });
  assert.match(out, /\/workspace/);
  assert.match(out, /Process exited with code 0/);
  // A command that outlives yield_time_ms gets a session id to poll (it
  // waits for a file only this test makes, so it cannot end before).
  const long = await session.execCommand({ cmd: 'echo started; while [ ! -e go ]; do sleep 0.1; done; echo finished', yieldTimeMs: 250 });
  const id = Number(/session ID (\d+)/.exec(long)?.[1]);
  assert.ok(id > 0, long);
  await assert.rejects(session.writeStdin({ sessionId: id, chars: 'x' }), /without tty/);
  await session.execStream('touch go');
  let rest = long;
  for (let i = 0; i < 30 && !/Process exited/.test(rest); i++) {
    rest += await session.writeStdin({ sessionId: id, chars: '', yieldTimeMs: 1000 });
  }
  assert.match(rest, /started[\s\S]*finished/);
  assert.match(rest, /Process exited with code 0/);
  await session.delete();
});

test('runAs: files, the editor and commands act as that user', async () => {
  const client = new CoveSandboxClient();
  const session = track(await client.create({ manifest: manifest() }));
  const me = text((await session.execStream('id -un')).stdout).trim();
  assert.equal(text((await session.execStream('id -un', { runAs: 'root' })).stdout).trim(), 'root');
  const editor = session.createEditor('root');
  await editor.createFile({ type: 'create_file', path: 'owned/by-root.txt', diff: '+as root\n' });
  assert.equal(text((await session.execStream('stat -c %U owned/by-root.txt')).stdout).trim(), 'root');
  assert.equal(text(await session.readFile({ path: 'owned/by-root.txt', runAs: 'root' })), 'as root');
  assert.equal(await session.pathExists('owned/by-root.txt', 'root'), true);
  assert.equal(await session.directoryExists('owned', 'root'), true);
  assert.deepEqual((await session.listDir({ path: 'owned', runAs: 'root' })).map((e) => [e.name, e.type]), [['by-root.txt', 'file']]);
  await assert.rejects(session.readFile({ path: 'nope.txt', runAs: me }), /does not exist/);
  // The sandbox's permissions decide: its own user cannot change root's file.
  await assert.rejects(session.createEditor(me).deleteFile({ type: 'delete_file', path: 'owned/by-root.txt' }), /could not remove/);
  await session.createEditor('root').deleteFile({ type: 'delete_file', path: 'owned/by-root.txt' });
  assert.equal(await session.pathExists('owned/by-root.txt'), false);
  await session.delete();
});

test('a SandboxAgent with runAs gets its user made and runs its commands as it', async () => {
  const client = new CoveSandboxClient();
  const base = agent();
  const runner = new SandboxAgent({ name: base.name, instructions: base.instructions, model: base.model, capabilities: [shell(), filesystem()], runAs: 'agent' });
  const result = await run(runner, 'whoami', { sandbox: { client, manifest: manifest() } });
  assert.equal(result.finalOutput, 'done');
  const outputs = result.newItems.filter((i) => i.type === 'tool_call_output_item').map((i) => JSON.stringify(i.output));
  assert.match(outputs[0], /Process exited with code 0.*agent/s);
});

test('tar persistence restores the workspace into a new sandbox', async () => {
  const client = new CoveSandboxClient();
  const withSecret = new Manifest({ entries: {
    'README.md': file({ content: 'read me\n' }),
    'secret.txt': file({ content: 'not kept\n', ephemeral: true }),
  } });
  const first = track(await client.create({ manifest: withSecret }));
  assert.equal(await first.pathExists('secret.txt'), true);
  await first.execStream('mkdir -p src && echo tarred > src/a.txt');
  const tar = await first.persistWorkspace();
  assert.equal(decodeSnapshotRef(tar), undefined);
  assert.ok(tar.byteLength > 512);
  await first.delete();

  const second = track(await client.create({ manifest: new Manifest() }));
  assert.notEqual(second.sandboxId, first.sandboxId);
  // The SDK's archive limits are held before anything is sent.
  await assert.rejects(second.hydrateWorkspace(tar, { archiveLimits: { maxMembers: 1 } }), /more than 1 members/);
  await assert.rejects(second.hydrateWorkspace(tar, { archiveLimits: { maxExtractedBytes: 4 } }), /unpacks to more than 4 bytes/);
  assert.equal(await second.pathExists('src/a.txt'), false);
  await second.hydrateWorkspace(tar);
  assert.equal(text(await second.readFile({ path: 'src/a.txt' })), 'tarred\n');
  assert.equal(text(await second.readFile({ path: 'README.md' })), 'read me\n');
  assert.equal(await second.pathExists('secret.txt'), false, 'an ephemeral entry is not persisted');
  await second.delete();
});

test('snapshot persistence saves a Cove snapshot and restores it', async () => {
  const client = new CoveSandboxClient({ workspacePersistence: 'snapshot' });
  const first = track(await client.create({ manifest: manifest() }));
  await first.execStream('echo snapped > s.txt');
  const ref = await first.persistWorkspace();
  const sid = decodeSnapshotRef(ref);
  assert.match(sid, /.+/);
  const snaps = await api.json('GET', '/v1/snapshots');
  assert.ok(snaps.snapshots.some((s) => s.id === sid), 'the snapshot is on the server');
  await first.execStream('rm s.txt');

  const old = first.sandboxId;
  await first.hydrateWorkspace(ref);
  track(first);
  assert.notEqual(first.sandboxId, old, 'restored into a new sandbox');
  assert.equal(text(await first.readFile({ path: 's.txt' })), 'snapped\n');
  await assert.rejects(api.json('GET', `/v1/sandboxes/${old}`), /not found/, 'the old sandbox is gone');
  await first.delete();
  await api.drop('DELETE', `/v1/snapshots/${sid}`);

  // Ephemeral entries cannot be left out of a snapshot: a tar is made.
  const eph = track(await client.create({ manifest: new Manifest({ entries: { 'token': file({ content: 't', ephemeral: true }) } }) }));
  const saved = await eph.persistWorkspace();
  assert.equal(decodeSnapshotRef(saved), undefined);
  assert.equal((await api.json('GET', '/v1/snapshots')).snapshots.length, 0);
  await eph.delete();
});

test('exec_command with tty=true opens a terminal that write_stdin drives', async () => {
  const client = new CoveSandboxClient({ env: { GREETING: "it's me" } });
  const session = track(await client.create({ manifest: manifest() }));
  const first = await session.execCommand({ cmd: 'read line; echo "got:$line:$GREETING"; tty', tty: true, yieldTimeMs: 500 });
  const id = Number(/session ID (\d+)/i.exec(first)?.[1]);
  assert.ok(id > 0, `a running session id in: ${first}`);
  let out = await session.writeStdin({ sessionId: id, chars: 'typed\n', yieldTimeMs: 1000 });
  for (let i = 0; i < 20 && !/Process exited with code/.test(out); i++) {
    out += await session.writeStdin({ sessionId: id, chars: '', yieldTimeMs: 1000 });
  }
  assert.match(out, /got:typed:it's me/);
  assert.match(out, /\/dev\/pts\//, 'the command ran on a terminal');
  assert.match(out, /Process exited with code 0/);
  const pty = await session.openPty('stty size');
  const end = await pty.collect(30_000);
  assert.equal(end.closed, true);
  assert.match(end.text, /24 80/);
  await session.delete();
});

test('ports, network and options reach the server', async () => {
  const client = new CoveSandboxClient({ network: { mode: 'allow', allow: ['1.1.1.1:443'] }, ttlSeconds: 600, idleTimeoutSeconds: 300, size: 'small', exposedPorts: [8080] });
  const session = track(await client.create({ manifest: manifest() }));
  const info = await api.json('GET', `/v1/sandboxes/${session.sandboxId}`);
  assert.deepEqual(info.network, { mode: 'allow', allow: ['1.1.1.1:443'] });
  assert.equal(info.idle_timeout_seconds, 300);
  const ep = await session.resolveExposedPort(8080);
  assert.ok(ep.url.includes(session.sandboxId), ep.url);
  await assert.rejects(session.resolveExposedPort(9090), /not among the exposed ports/);
  await session.delete();

  const sized = track(await new CoveSandboxClient({ cpus: 0.5, memoryBytes: 256 << 20, diskBytes: 1 << 30, onExpire: 'delete', template: info.template }).create({ manifest: manifest() }));
  const s2 = await sized.info();
  assert.equal(s2.cpus, 0.5);
  assert.equal(s2.memory_bytes, 256 << 20);
  assert.equal(s2.disk_bytes, 1 << 30);
  assert.equal(s2.on_expire, 'delete');
  assert.equal(s2.template, info.template);
  await sized.delete();
  // A tier the server does not offer is refused with the server's message.
  await assert.rejects(new CoveSandboxClient({ isolation: 'microvm' }).create({ manifest: manifest() }), /isolation/);
});
