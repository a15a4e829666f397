// The OpenAI Agents SDK's E2B sandbox client (the pinned
// @openai/agents-extensions, unmodified) against Cove: native snapshot
// persistence (workspacePersistence: 'snapshot', which calls
// createSnapshot and then creates a sandbox from the snapshot) and
// resolveExposedPort. server/e2b_control_test.go runs it; the environment
// is control.test.mjs's, with COVE_AGENTS_SDK the directory whose
// node_modules holds the Agents SDK.
import assert from 'node:assert/strict'
import path from 'node:path'
import { test } from 'node:test'
import { pathToFileURL } from 'node:url'

import './resolve.mjs' // *.{COVE_E2B_DOMAIN} resolves to this machine
import { eventually } from './wait.mjs'

const modules = path.join(process.env.COVE_AGENTS_SDK, 'node_modules')
const load = (file) => import(pathToFileURL(path.join(modules, file)).href)
const { E2BSandboxClient } = await load('@openai/agents-extensions/dist/sandbox/e2b/index.mjs')
const { Manifest } = await load('@openai/agents-core/dist/sandbox/index.mjs')

const decode = (bytes) => new TextDecoder().decode(bytes)

test('workspacePersistence snapshot: a new sandbox gets the workspace back', async () => {
  const client = new E2BSandboxClient({ workspacePersistence: 'snapshot', timeout: 300 })
  const manifest = new Manifest({ entries: { 'notes.txt': { type: 'file', content: 'from the manifest' } } })
  const session = await client.create(manifest)
  let fresh
  try {
    await session.execCommand({ cmd: `echo written by the agent > ${manifest.root}/made.txt` })
    const archive = await session.persistWorkspace()
    fresh = await client.create(new Manifest())
    await fresh.hydrateWorkspace(archive)
    assert.notEqual(fresh.state.sandboxId, session.state.sandboxId)
    assert.equal(decode(await fresh.readFile({ path: `${manifest.root}/made.txt` })), 'written by the agent\n')
    assert.equal(decode(await fresh.readFile({ path: `${manifest.root}/notes.txt` })), 'from the manifest')
  } finally {
    await fresh?.close().catch(() => {})
    await session.close().catch(() => {})
  }
})

test('resolveExposedPort reaches the port', async () => {
  const client = new E2BSandboxClient({ timeout: 300, exposedPorts: [8125] })
  const session = await client.create(new Manifest())
  try {
    await session.execCommand({ cmd: 'mkdir -p /tmp/www8125 && echo hello through resolveExposedPort > /tmp/www8125/hi.txt' })
    await session.execCommand({ cmd: 'cd /tmp/www8125 && (nohup python3 -m http.server 8125 --bind 127.0.0.1 >/dev/null 2>&1 &)' })
    const ep = await session.resolveExposedPort(8125)
    // A host with a port is plain HTTP to the Agents SDK; here the test's
    // TLS server serves that port with TLS, so COVE_E2B_PORT_SCHEME says.
    const url = `${process.env.COVE_E2B_PORT_SCHEME}://${ep.host}:${ep.port}/hi.txt`
    const got = await eventually(`GET ${url}`, async () => {
      const res = await fetch(url)
      const body = `${res.status} ${await res.text()}`
      if (res.status !== 200) throw new Error(body)
      return body
    }, 30)
    assert.equal(got, '200 hello through resolveExposedPort\n')
    if (process.env.COVE_E2B_LOCAL_DOMAIN) assert.equal(ep.tls, false)
  } finally {
    await session.close().catch(() => {})
  }
})
