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
import { after, describe, test } from 'node:test'

import { agents, e2b, e2bClient, sandbox } from './agents.mjs'

const { Runner } = agents
const { Manifest, SandboxAgent, Capabilities } = sandbox
const { E2BSandboxClient } = e2bClient

const mode = process.env.COVE_E2B_MODE

// manifest is the tutorial's small workspace.
function manifest() {
  return new Manifest({
    entries: {
      'README.md': { type: 'file', content: '# Renewal Notes\n\nA tiny account review packet.\n' },
      'notes/todo.md': { type: 'file', content: 'first line\nsecond line\n' },
    },
  })
}

function agent(name = 'Cove sandbox assistant') {
  return new SandboxAgent({
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

describe(`Agents SDK through E2BSandboxClient (${mode} routing)`, () => {
  test('SDK-owned session: the tutorial run with the client default options', async () => {
    const runner = new Runner({ workflowName: 'cove', sandbox: { client: new E2BSandboxClient() } })
    const result = await runner.run(agent(), '[cmd] Summarize this workspace.')
    assert.match(result.finalOutput, /# Renewal Notes/)
    assert.match(result.finalOutput, /user=\S+ cwd=\S+/)
    console.log(result.finalOutput)
  })
})
