// Sandbox logs and metrics through the unmodified E2B JS SDK
// (server/e2b_logs_test.go runs it in both routing modes; the
// environment is as for sdk.test.mjs). getMetrics is the SDK's; the SDK
// has no method for a sandbox's logs, so they are read with its own API
// client, as E2B's dashboard does. Waits are bounded polls; nothing
// asserts on time.
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'

import e2b from './e2b.mjs'
import { eventually } from './wait.mjs'

const mode = process.env.COVE_E2B_MODE
const { Sandbox, ApiClient, ConnectionConfig, SandboxNotFoundError } = e2b

const api = new ApiClient(new ConnectionConfig({}))

async function logs(sandboxID, query = {}) {
  const res = await api.api.GET('/v2/sandboxes/{sandboxID}/logs', { params: { path: { sandboxID }, query } })
  assert.equal(res.response.status, 200, JSON.stringify(res.error))
  return res.data.logs
}

const latest = async (sbx) => (await sbx.getMetrics()).at(-1)

describe(`E2B logs and metrics against Cove (${mode} routing)`, () => {
  let sbx
  before(async () => {
    sbx = await Sandbox.create({ timeoutMs: 300_000 })
  })
  after(async () => {
    await sbx?.kill().catch(() => {})
  })

  test('getMetrics: CPU, memory and disk of the sandbox', async () => {
    const first = await latest(sbx)
    assert.ok(first, 'getMetrics returns a sample')
    assert.ok(first.timestamp instanceof Date && !isNaN(first.timestamp))
    assert.ok(first.cpuCount >= 1, `cpuCount ${first.cpuCount}`)
    assert.ok(first.memTotal > 0 && first.memUsed > 0, `memory ${first.memUsed} of ${first.memTotal}`)
    assert.ok(first.diskTotal > 0 && first.diskUsed > 0, `disk ${first.diskUsed} of ${first.diskTotal}`)

    // A busy command shows as CPU use.
    const yes = await sbx.commands.run('yes > /dev/null', { background: true, timeoutMs: 0 })
    const busy = await eventually('CPU use while yes runs', async () => {
      const m = await latest(sbx)
      return m.cpuUsedPct > 0 && m.memUsed > 0 && m
    })
    assert.ok(busy.cpuUsedPct <= 100, `cpuUsedPct ${busy.cpuUsedPct}`)
    await yes.kill()

    // A file written shows as disk used.
    await sbx.files.write('big.bin', new Uint8Array(8 << 20).map((_, i) => i * 7919))
    await eventually('the file in diskUsed', async () => (await latest(sbx)).diskUsed >= first.diskUsed + (8 << 20))

    // The history and the static form.
    const all = await Sandbox.getMetrics(sbx.sandboxId)
    assert.ok(all.length >= 2, `history of ${all.length}`)
    const none = await sbx.getMetrics({ start: new Date(Date.now() - 3600_000), end: new Date(Date.now() - 1800_000) })
    assert.deepEqual(none, [])
  })

  test('GET /sandboxes/metrics gives the newest sample of each', async () => {
    const res = await api.api.GET('/sandboxes/metrics', { params: { query: { sandbox_ids: [sbx.sandboxId, 'sb-000000000000'] } } })
    assert.equal(res.response.status, 200, JSON.stringify(res.error))
    assert.deepEqual(Object.keys(res.data.sandboxes), [sbx.sandboxId])
    assert.ok(res.data.sandboxes[sbx.sandboxId].memTotal > 0)
  })

  test('logs show the commands started and how they ended', async () => {
    await sbx.commands.run('echo logged-7 && exit 4').catch(() => {})
    const entries = await eventually('the command in the logs', async () => {
      const l = await logs(sbx.sandboxId, { direction: 'forward' })
      return l.some((e) => e.message === 'process ended' && e.fields.exit_code === '4') && l
    })
    const started = entries.find((e) => e.message === 'process started' && e.fields.cmd.includes('echo logged-7'))
    assert.ok(started, JSON.stringify(entries))
    assert.match(started.fields.pid, /^\d+$/)
    assert.ok(entries.some((e) => e.message === 'process started' && e.fields.cmd.includes('yes > /dev/null')))
    for (let i = 1; i < entries.length; i++) assert.ok(entries[i - 1].timestamp <= entries[i].timestamp)

    const warnings = await logs(sbx.sandboxId, { level: 'warn' })
    assert.ok(warnings.length > 0 && warnings.every((e) => e.level === 'warn' || e.level === 'error'))
    const newest = await logs(sbx.sandboxId, { limit: 1 })
    assert.equal(newest.length, 1)

    const v1 = await api.api.GET('/sandboxes/{sandboxID}/logs', { params: { path: { sandboxID: sbx.sandboxId } } })
    assert.equal(v1.response.status, 200)
    assert.equal(v1.data.logs.length, v1.data.logEntries.length)
    assert.ok(v1.data.logs.some((l) => l.line.includes('logged-7')))
  })

  test('unknown sandboxes are not found', async () => {
    await assert.rejects(Sandbox.getMetrics('sb-000000000000'), SandboxNotFoundError)
    const res = await api.api.GET('/v2/sandboxes/{sandboxID}/logs', { params: { path: { sandboxID: 'sb-000000000000' } } })
    assert.equal(res.response.status, 404)
    assert.equal(res.error.code, 404)
  })
})
