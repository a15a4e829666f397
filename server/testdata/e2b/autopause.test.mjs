// Auto-pause and auto-resume through the unmodified E2B SDK
// (server/e2b_autopause_test.go runs this with node, in both routing
// modes; the environment is sdk.test.mjs's). A sandbox made to pause at
// its timeout and resume on traffic is paused with its disk when the
// timeout passes, and a command, a file read, a port request, a signed
// URL or a connect runs it again with its files; without autoResume the
// SDK gets the errors it gets today; onTimeout kill deletes.
//
// Waits are bounded polls of what a user would see; nothing asserts on
// time.
import assert from 'node:assert/strict'
import crypto from 'node:crypto'
import { after, describe, test } from 'node:test'

import e2b from './e2b.mjs'
import { eventually, portFetch } from './wait.mjs'

const mode = process.env.COVE_E2B_MODE
const { Sandbox, SandboxNotFoundError, TimeoutError } = e2b

const runID = crypto.randomBytes(4).toString('hex')
const made = []
async function create(opts = {}) {
  const sbx = await Sandbox.create({ metadata: { suite: 'autopause', run: runID }, ...opts })
  made.push(sbx)
  return sbx
}

after(async () => {
  for (const sbx of made) await sbx.kill().catch(() => {})
})

const state = async (sbx) => (await Sandbox.getInfo(sbx.sandboxId)).state

// pausedByTimeout gives a running sandbox a short timeout and waits until
// it is paused, as getInfo and list show it.
async function pausedByTimeout(sbx) {
  await sbx.setTimeout(1_000)
  await eventually('paused at its timeout', async () => (await state(sbx)) === 'paused')
  const listed = await Sandbox.list({ query: { metadata: { run: runID }, state: ['paused'] }, limit: 100 }).nextItems()
  assert.ok(listed.some((s) => s.sandboxId === sbx.sandboxId), `${sbx.sandboxId} not listed as paused`)
}

describe(`auto-pause and auto-resume (${mode} routing)`, () => {
  test('the SDK default options: kill at the timeout', async () => {
    const sbx = await create()
    assert.deepEqual((await sbx.getInfo()).lifecycle, { onTimeout: 'kill', autoResume: false })
  })

  test("the Agents SDK E2B client's default options are taken", async () => {
    // @openai/agents-extensions: lifecycle { onTimeout: 'pause', autoResume };
    // the object form sends autoPauseMemory too.
    for (const lifecycle of [
      { onTimeout: 'pause', autoResume: true },
      { onTimeout: { action: 'pause', keepMemory: true }, autoResume: true },
    ]) {
      const sbx = await create({ lifecycle })
      assert.deepEqual((await sbx.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: true })
      assert.equal((await sbx.commands.run('echo ok')).stdout, 'ok\n')
    }
  })

  test('paused at the timeout, resumed by traffic with the disk kept', async () => {
    const sbx = await create({ timeoutMs: 3_000, lifecycle: { onTimeout: 'pause', autoResume: true } })
    await sbx.files.write('kept.txt', 'kept across pauses')
    await eventually('paused at its timeout', async () => (await state(sbx)) === 'paused')

    // A command resumes it; its timeout starts afresh (at least five
    // minutes after a resume by traffic, as on E2B).
    assert.equal((await sbx.commands.run('cat kept.txt')).stdout, 'kept across pauses')
    const info = await sbx.getInfo()
    assert.equal(info.state, 'running')
    assert.ok(info.endAt.getTime() > Date.now() + 4 * 60_000, `ends at ${info.endAt.toISOString()}`)

    await pausedByTimeout(sbx)
    assert.equal(await sbx.files.read('kept.txt'), 'kept across pauses')
    assert.equal(await state(sbx), 'running')

    // A port: the sandbox runs again (its processes ended at the pause,
    // so nothing listens until it is started again).
    await pausedByTimeout(sbx)
    const res = await portFetch(sbx, 8123, '/kept.txt')
    assert.equal(res.status, 502, await res.text())
    assert.equal(await state(sbx), 'running')
    const server = await sbx.commands.run('python3 -m http.server 8123 --bind 127.0.0.1', { background: true })
    const body = await eventually('the app answering', async () => {
      const r = await portFetch(sbx, 8123, '/kept.txt')
      return r.status === 200 ? r.text() : undefined
    })
    assert.equal(body, 'kept across pauses')
    await server.kill()

    // An explicit pause resumes the same way.
    assert.equal(await sbx.pause(), true)
    assert.equal(await state(sbx), 'paused')
    assert.equal(await sbx.isRunning(), true) // /health with the token
    assert.equal(await state(sbx), 'running')

    await pausedByTimeout(sbx)
    const back = await Sandbox.connect(sbx.sandboxId)
    assert.equal(await back.files.read('kept.txt'), 'kept across pauses')
  })

  test('a signed file URL resumes it', { skip: mode !== 'domain' && 'E2B_SANDBOX_URL routing needs the routing headers, which a bare URL does not carry' }, async () => {
    const sbx = await create({ lifecycle: { onTimeout: 'pause', autoResume: true } })
    await sbx.files.write('signed.txt', 'read by URL')
    await pausedByTimeout(sbx)
    const res = await fetch(await sbx.downloadUrl('signed.txt'))
    assert.equal(await res.text(), 'read by URL')
    assert.equal(await state(sbx), 'running')
  })

  test('without autoResume, traffic gets the paused errors and resumes nothing', async () => {
    const sbx = await create({ timeoutMs: 2_000, lifecycle: { onTimeout: 'pause' } })
    await sbx.files.write('kept.txt', 'still here')
    await eventually('paused at its timeout', async () => (await state(sbx)) === 'paused')
    assert.equal((await sbx.getInfo()).lifecycle.autoResume, false)
    await assert.rejects(sbx.files.read('kept.txt'), TimeoutError)
    await assert.rejects(sbx.commands.run('true'), SandboxNotFoundError)
    assert.equal(await sbx.isRunning(), false)
    assert.equal(await state(sbx), 'paused')
    const back = await Sandbox.connect(sbx.sandboxId)
    assert.equal(await back.files.read('kept.txt'), 'still here')
  })

  test('onTimeout kill deletes at the timeout', async () => {
    const sbx = await create({ timeoutMs: 2_000, lifecycle: { onTimeout: 'kill' } })
    await eventually('gone after its timeout', async () => {
      try {
        await Sandbox.getInfo(sbx.sandboxId)
        return false
      } catch (err) {
        if (err instanceof SandboxNotFoundError) return true
        throw err
      }
    })
    await assert.rejects(sbx.commands.run('true'), SandboxNotFoundError)
  })
})
