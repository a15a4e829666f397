// The E2B control plane's snapshots, forks and hosts for ports, driven by
// the unmodified E2B JS SDK (server/e2b_control_test.go starts the server
// and runs this with node). The environment, beside sdk.test.mjs's:
//
//   COVE_E2B_PORT_SCHEME  the scheme of getHost(port)'s URLs: https with
//                         --domain and TLS, http for the local set-up
//                         (no --domain: localhost:PORT)
//   COVE_E2B_LOCAL_DOMAIN when set, the domain create must answer
//
// Waits are bounded polls; nothing asserts on time.
import assert from 'node:assert/strict'
import crypto from 'node:crypto'
import { after, describe, test } from 'node:test'

import e2b from './e2b.mjs'
import { eventually } from './wait.mjs'

const { Sandbox } = e2b
const mode = process.env.COVE_E2B_MODE
const scheme = process.env.COVE_E2B_PORT_SCHEME
const runID = crypto.randomBytes(4).toString('hex')

const made = []
function keep(sbx) {
  made.push(sbx)
  return sbx
}
after(async () => {
  for (const sbx of made) await sbx.kill().catch(() => {})
})

// root is the sandbox's workspace root, as Cove's own API says it (the E2B
// API has no word for it). A snapshot keeps it with the rest of the disk
// (snapdisk.test.mjs).
async function root(sbx) {
  const res = await fetch(`${process.env.E2B_API_URL}/v1/sandboxes/${sbx.sandboxId}`, {
    headers: { Authorization: `Bearer ${process.env.E2B_API_KEY}` },
  })
  assert.equal(res.status, 200)
  return (await res.json()).root
}

describe(`E2B control plane against Cove (${mode} routing)`, () => {
  test('a snapshot makes new sandboxes with its files, and is deleted', async () => {
    const sbx = keep(await Sandbox.create({ timeoutMs: 300_000 }))
    const file = `${await root(sbx)}/snap-${runID}.txt`
    await sbx.files.write(file, 'kept by the snapshot')
    const snap = await sbx.createSnapshot()
    assert.match(snap.snapshotId, /\S/)
    assert.deepEqual(snap.names, [])

    const all = await Sandbox.listSnapshots().nextItems()
    assert.ok(all.some((s) => s.snapshotId === snap.snapshotId), `listSnapshots: ${JSON.stringify(all)}`)
    const mine = await sbx.listSnapshots().nextItems()
    assert.deepEqual(mine.map((s) => s.snapshotId), [snap.snapshotId])

    // The snapshot outlives its sandbox.
    await sbx.kill()
    const from = keep(await Sandbox.create(snap.snapshotId, { timeoutMs: 300_000 }))
    assert.equal(await from.files.read(file), 'kept by the snapshot')
    assert.equal((await from.commands.run(`cat ${file}`)).stdout, 'kept by the snapshot')

    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false)
    await assert.rejects(Sandbox.create(snap.snapshotId), (err) => /not found/i.test(err.message))
  })

  test('fork with count 2 gives two running copies', async () => {
    const sbx = keep(await Sandbox.create({ timeoutMs: 300_000 }))
    const file = `${await root(sbx)}/fork-${runID}.txt`
    await sbx.files.write(file, 'from the parent')
    const forks = await sbx.fork({ count: 2, timeoutMs: 120_000 })
    assert.equal(forks.length, 2)
    const ids = new Set([sbx.sandboxId])
    for (const f of forks) {
      assert.ok(f instanceof Sandbox, `a fork failed: ${f}`)
      keep(f)
      assert.ok(!ids.has(f.sandboxId), `fork id ${f.sandboxId} is not new`)
      ids.add(f.sandboxId)
      assert.equal(await f.files.read(file), 'from the parent')
      // A fork is a sandbox of its own: what it writes the parent does not see.
      await f.files.write(file, `from ${f.sandboxId}`)
    }
    assert.equal(await sbx.files.read(file), 'from the parent')
    for (const f of forks) assert.equal(await f.files.read(file), `from ${f.sandboxId}`)
  })

  test('getHost(port) gives a URL that reaches the port', async () => {
    const sbx = keep(await Sandbox.create({ timeoutMs: 300_000 }))
    if (process.env.COVE_E2B_LOCAL_DOMAIN) {
      assert.equal(sbx.sandboxDomain, process.env.COVE_E2B_LOCAL_DOMAIN)
      assert.equal((await Sandbox.connect(sbx.sandboxId)).sandboxDomain, process.env.COVE_E2B_LOCAL_DOMAIN)
    }
    const dir = `/tmp/www-${runID}`
    await sbx.files.write(`${dir}/hello.txt`, 'hello through getHost')
    const server = await sbx.commands.run('python3 -m http.server 8124 --bind 127.0.0.1', { background: true, cwd: dir })
    const url = `${scheme}://${sbx.getHost(8124)}/hello.txt`
    const body = await eventually(`GET ${url}`, async () => {
      const res = await fetch(url)
      return res.status === 200 ? res.text() : undefined
    })
    assert.equal(body, 'hello through getHost')
    await server.kill()
  })
})
