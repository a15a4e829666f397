// Drives a Cove server with the unmodified OpenAI Agents SDK as its
// sandbox tutorial does: a SandboxAgent with a Manifest, run by a Runner
// whose sandbox client is @openai/agents-extensions' E2BSandboxClient.
// server/agents_sdk_test.go starts Cove and a fake model and runs this
// with node. Nothing here points the SDKs anywhere: the environment does,
// as it would for a user.
//
//   COVE_AGENTS_SDK  the directory whose node_modules holds the SDKs
//   COVE_E2B_MODE    "domain" (envd and ports by host name under
//                    COVE_E2B_DOMAIN, TLS with a test CA) or "header"
//                    (E2B_SANDBOX_URL and the E2b-Sandbox-* headers)
//   E2B_API_URL, E2B_API_KEY, E2B_DOMAIN, E2B_SANDBOX_URL as e2b reads them
//   OPENAI_BASE_URL, OPENAI_API_KEY as openai reads them (the fake model)
//
// Each prompt names a scenario, "[name]", whose answers the Go test
// scripts; a model answer "TOOL OUTPUT:\n..." repeats what the last tool
// call returned. Waits are bounded polls; nothing asserts on time.
import assert from 'node:assert/strict'
import path from 'node:path'
import { after, describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'

import { agents, e2b, e2bClient, sandbox } from './agents.mjs'
import { eventually } from '../e2b/wait.mjs'

const { Runner } = agents
const { Manifest, SandboxAgent, Capabilities, localDir } = sandbox
const { E2BSandboxClient } = e2bClient

const mode = process.env.COVE_E2B_MODE

const here = path.dirname(fileURLToPath(import.meta.url))

// manifest is the tutorials' small workspace: files given inline and a
// repository copied from this machine.
function manifest(extra = {}) {
  return new Manifest({
    environment: { INVOICE_REGION: 'eu' },
    entries: {
      repo: localDir({ src: path.join(here, 'repo') }),
      'README.md': { type: 'file', content: '# Renewal Notes\n\nA tiny account review packet.\n' },
      'notes/todo.md': { type: 'file', content: 'first line\nsecond line\n' },
    },
    ...extra,
  })
}

function agent(name = 'Cove sandbox assistant', extra = {}) {
  return new SandboxAgent({
    ...extra,
    name,
    instructions: 'Inspect the sandbox workspace before answering.',
    defaultManifest: manifest(),
    capabilities: Capabilities.default(),
  })
}

// Sandboxes a test made, killed at the end whatever happened.
const made = new Set()
after(async () => {
  for (const id of made) await e2b.Sandbox.kill(id).catch(() => {})
})

async function runningIDs() {
  const ids = new Set()
  const paginator = e2b.Sandbox.list({ query: { state: ['running', 'paused'] } })
  while (paginator.hasNext) for (const info of await paginator.nextItems()) ids.add(info.sandboxId)
  return ids
}

// open makes a developer-owned session, as the docs' "Own the sandbox
// session lifecycle" does, and remembers its sandbox for cleanup.
async function open(client, m = manifest()) {
  const session = await client.create({ manifest: m })
  made.add(session.state.sandboxId)
  return session
}

// ask runs the agent on a live session and returns its final output.
async function ask(session, prompt) {
  const result = await new Runner({ workflowName: 'cove' }).run(agent(), prompt, { sandbox: { session } })
  return result.finalOutput
}

describe(`Agents SDK through E2BSandboxClient (${mode} routing)`, () => {
  test('SDK-owned session with the client default options: commands, then the sandbox is gone', async () => {
    const before = await runningIDs()
    const runner = new Runner({ workflowName: 'cove', sandbox: { client: new E2BSandboxClient() } })
    const result = await runner.run(agent(), '[cmd] Summarize this workspace.')
    assert.match(result.finalOutput, /# Renewal Notes/)
    assert.match(result.finalOutput, /user=\S+ cwd=\/workspace region=eu/)
    const left = [...(await runningIDs())].filter((id) => !before.has(id))
    assert.deepEqual(left, [], 'the runner closes the sandbox it made')
  })

  test('SDK-owned session with onTimeout pause and autoResume', async () => {
    const client = new E2BSandboxClient({ onTimeout: 'pause', autoResume: true })
    const result = await new Runner({ workflowName: 'cove', sandbox: { client } }).run(agent(), '[cmd] Summarize.')
    assert.match(result.finalOutput, /# Renewal Notes/)
  })

  test('developer-owned session: follow-ups, apply_patch and a PTY on one live sandbox', async () => {
    const session = await open(new E2BSandboxClient())
    try {
      assert.match(await ask(session, '[write] Write a result file.'), /result\.txt/)
      assert.match(await ask(session, '[patch] Patch the todo list.'), /status: completed/)
      const read = await ask(session, '[read] Show the files.')
      assert.match(read, /from-the-agent/)
      assert.match(read, /second line, patched/)
      assert.match(await ask(session, '[pty] Answer the prompt.'), /got-hello/)
      const interrupted = await ask(session, '[interrupt] Start a long job, then stop it.')
      assert.match(interrupted, /alive-42/, 'the shell answers after Ctrl-C')
      assert.doesNotMatch(interrupted, /not-interrupted/)
    } finally {
      await session.close()
    }
    await eventually('the sandbox is killed on close', async () => !(await runningIDs()).has(session.state.sandboxId))
  })

  test('the docs tutorial: read the task, apply_patch the fix, run the targeted test (streamed)', async () => {
    const session = await open(new E2BSandboxClient())
    try {
      const result = await new Runner({ workflowName: 'cove' }).run(agent(), '[fix] Open repo/task.md, fix the issue, run the test.', {
        sandbox: { session },
        stream: true,
      })
      let streamed = ''
      for await (const chunk of result.toTextStream()) streamed += chunk
      await result.completed
      assert.match(result.finalOutput, /PASS total\.sh/)
      assert.match(streamed, /PASS total\.sh/)
    } finally {
      await session.close()
    }
  })

  test('view_image reads an image from the sandbox', async () => {
    const session = await open(new E2BSandboxClient())
    try {
      assert.match(await ask(session, '[image] Look at the picture.'), /data:image\/png;base64,iVBORw0KGgo/)
    } finally {
      await session.close()
    }
  })

  test('tar persistence restores the workspace into a new sandbox', async () => {
    const client = new E2BSandboxClient()
    const first = await open(client)
    let archive
    try {
      await ask(first, '[write] Write a result file.')
      archive = await first.persistWorkspace()
      assert.ok(archive.byteLength > 0)
    } finally {
      await first.close()
    }
    const second = await open(client, manifest({ entries: {} }))
    try {
      assert.notEqual(second.state.sandboxId, first.state.sandboxId)
      await second.hydrateWorkspace(archive)
      assert.match(await ask(second, '[read] Show the files.'), /from-the-agent[\s\S]*second line/)
    } finally {
      await second.close()
    }
  })

  test('snapshot persistence (workspacePersistence: snapshot) restores into a new sandbox', async () => {
    const client = new E2BSandboxClient({ workspacePersistence: 'snapshot' })
    const first = await open(client)
    let ref
    try {
      await ask(first, '[write] Write a result file.')
      ref = await first.persistWorkspace()
    } finally {
      await first.close()
    }
    const second = await open(client, manifest({ entries: {} }))
    try {
      await second.hydrateWorkspace(ref)
      made.add(second.state.sandboxId)
      assert.notEqual(second.state.sandboxId, first.state.sandboxId)
      assert.match(await ask(second, '[read] Show the files.'), /from-the-agent[\s\S]*second line/)
    } finally {
      await second.close()
    }
  })

  test('serialized session state resumes the same live sandbox', async () => {
    const client = new E2BSandboxClient()
    const session = await open(client)
    try {
      await ask(session, '[write] Write a result file.')
      const saved = JSON.stringify(await client.serializeSessionState(session.state))
      const resumed = await client.resume(await client.deserializeSessionState(JSON.parse(saved)))
      assert.equal(resumed.state.sandboxId, session.state.sandboxId)
      assert.match(await ask(resumed, '[read] Show the files.'), /from-the-agent/)
    } finally {
      await session.close()
    }
  })

  test('a saved state whose sandbox is gone resumes into a new sandbox with the manifest', async () => {
    const client = new E2BSandboxClient()
    const session = await open(client)
    const saved = JSON.stringify(await client.serializeSessionState(session.state))
    await session.close()
    const resumed = await client.resume(await client.deserializeSessionState(JSON.parse(saved)))
    made.add(resumed.state.sandboxId)
    try {
      assert.notEqual(resumed.state.sandboxId, session.state.sandboxId)
      assert.match(await ask(resumed, '[cmd] Summarize.'), /# Renewal Notes/)
    } finally {
      await resumed.close()
    }
  })

  test('metadata and allowInternetAccess reach the sandbox', async () => {
    const session = await open(new E2BSandboxClient({ metadata: { purpose: 'agents-test' }, allowInternetAccess: true }))
    try {
      const info = await e2b.Sandbox.getInfo(session.state.sandboxId)
      assert.equal(info.metadata.purpose, 'agents-test')
    } finally {
      await session.close()
    }
  })

  test('secure: false (no envd access token) still runs the agent', async () => {
    const session = await open(new E2BSandboxClient({ secure: false }))
    try {
      assert.match(await ask(session, '[cmd] Summarize.'), /# Renewal Notes/)
    } finally {
      await session.close()
    }
  })

  test('runAs root: the agent commands run as root', async () => {
    const session = await open(new E2BSandboxClient())
    try {
      const result = await new Runner({ workflowName: 'cove' }).run(agent('root', { runAs: 'root' }), '[whoami] Who are you?', {
        sandbox: { session },
      })
      assert.match(result.finalOutput, /whoami=root home=\/root/)
      assert.match(result.finalOutput, /root\s+root\s+\d+ .* mine/)
    } finally {
      await session.close()
    }
  })

  test('pauseOnExit: close pauses, resume from the saved state brings the workspace back', async () => {
    const client = new E2BSandboxClient({ pauseOnExit: true })
    const session = await open(client)
    await ask(session, '[write] Write a result file.')
    const saved = JSON.stringify(await client.serializeSessionState(session.state))
    await session.close()
    const info = await e2b.Sandbox.getInfo(session.state.sandboxId)
    assert.equal(info.state, 'paused')
    const resumed = await client.resume(await client.deserializeSessionState(JSON.parse(saved)))
    try {
      assert.equal(resumed.state.sandboxId, session.state.sandboxId)
      assert.match(await ask(resumed, '[read] Show the files.'), /from-the-agent/)
    } finally {
      resumed.state.pauseOnExit = false
      await resumed.close()
    }
  })

  test('an exposed port resolves to an endpoint that reaches the server in the sandbox', async () => {
    const session = await open(new E2BSandboxClient({ exposedPorts: [8080] }))
    try {
      assert.match(await ask(session, '[serve] Serve the site.'), /started/)
      const ep = await session.resolveExposedPort(8080)
      assert.ok(ep.host, `endpoint ${JSON.stringify(ep)}`)
      const url = `${ep.tls ? 'https' : 'http'}://${ep.host}:${ep.port}/index.html`
      const get = async (u) => {
        const res = await fetch(u)
        return res.ok && (await res.text())
      }
      let body
      try {
        body = await eventually(`GET ${url}`, () => get(url), 30)
      } catch (err) {
        // Say whether the port is reached with the other scheme, so a
        // failure tells a scheme mix-up from a routing one.
        const other = `${ep.tls ? 'http' : 'https'}://${ep.host}:${ep.port}/index.html`
        const alt = await get(other).catch((e) => `error ${e.cause?.code ?? e.message}`)
        assert.fail(`${err.message}; endpoint ${JSON.stringify(ep)}; ${other} gives ${JSON.stringify(alt)}`)
      }
      assert.match(body, /served-by-cove/)
    } finally {
      await session.close()
    }
  })

  // The timeout is short so the test waits little, long enough that a
  // run after resuming (which sets the same timeout again) ends before it.
  test('a pause longer than the timeout (onTimeout pause, no auto-resume), then resume from the saved state', async () => {
    const client = new E2BSandboxClient({ timeout: 10, onTimeout: 'pause' })
    const session = await open(client)
    await ask(session, '[write] Write a result file.')
    const saved = JSON.stringify(await client.serializeSessionState(session.state))
    await eventually('the sandbox pauses at its timeout', async () => (await e2b.Sandbox.getInfo(session.state.sandboxId)).state === 'paused', 120)
    const resumed = await client.resume(await client.deserializeSessionState(JSON.parse(saved)))
    try {
      assert.equal(resumed.state.sandboxId, session.state.sandboxId)
      assert.match(await ask(resumed, '[read] Show the files.'), /from-the-agent/)
    } finally {
      await resumed.close()
    }
  })

  test('a pause longer than the timeout, then the next run resumes the sandbox', async () => {
    const session = await open(new E2BSandboxClient({ timeout: 10, onTimeout: 'pause', autoResume: true }))
    try {
      await ask(session, '[write] Write a result file.')
      await eventually('the sandbox pauses at its timeout', async () => (await e2b.Sandbox.getInfo(session.state.sandboxId)).state === 'paused', 120)
      assert.match(await ask(session, '[read] Show the files.'), /from-the-agent/)
    } finally {
      await session.close()
    }
  })
})
