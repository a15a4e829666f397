// An E2B snapshot keeps the whole sandbox, with the unmodified E2B JS SDK
// (server/e2b_snapdisk_test.go starts the server and runs this with node,
// in both routing modes; see sdk.test.mjs for the environment): a file
// written by a relative path (in /home/user), files root wrote outside
// the home, with sudo and as user root, and what sudo installed.
import assert from 'node:assert/strict'
import crypto from 'node:crypto'
import { after, describe, test } from 'node:test'

import e2b from './e2b.mjs'

const { Sandbox } = e2b
const mode = process.env.COVE_E2B_MODE
const runID = crypto.randomBytes(4).toString('hex')

const made = []
function keep(sbx) {
  made.push(sbx)
  return sbx
}
const snapshots = []
after(async () => {
  for (const sbx of made) await sbx.kill().catch(() => {})
  for (const id of snapshots) await Sandbox.deleteSnapshot(id).catch(() => {})
})

describe(`E2B snapshots of the whole sandbox on Cove (${mode} routing)`, () => {
  test('a snapshot keeps home, root-written files and the user', async () => {
    const sbx = keep(await Sandbox.create({ timeoutMs: 300_000 }))
    await sbx.files.write('notes.txt', `notes ${runID}`)
    await sbx.commands.run(`echo sudo-${runID} > /etc/cove-sudo`, { user: 'root' })
    await sbx.commands.run(`sudo sh -c 'echo marker-${runID} > /etc/cove-marker'`)
    // A "package": a program root installed outside the home (the test
    // template's /usr is the host's, read-only, so in /opt).
    await sbx.commands.run(`sudo sh -c 'mkdir -p /opt/cove/bin && printf "#!/bin/sh\\necho installed\\n" > /opt/cove/bin/cove-tool && chmod 755 /opt/cove/bin/cove-tool'`)
    const snap = await sbx.createSnapshot()
    snapshots.push(snap.snapshotId)
    assert.match(snap.snapshotId, /^snap-/)

    const mine = await sbx.listSnapshots().nextItems()
    assert.deepEqual(mine.map((s) => s.snapshotId), [snap.snapshotId])
    const all = await Sandbox.listSnapshots().nextItems()
    assert.ok(all.some((s) => s.snapshotId === snap.snapshotId), `listSnapshots: ${JSON.stringify(all)}`)
    // The snapshot is no sandbox.
    const listed = await Sandbox.list().nextItems()
    assert.deepEqual(listed.map((s) => s.sandboxId).sort(), [sbx.sandboxId])

    await sbx.kill()
    const a = keep(await Sandbox.create(snap.snapshotId, { timeoutMs: 300_000, envs: { SNAP_RUN: runID } }))
    const b = keep(await Sandbox.create(snap.snapshotId, { timeoutMs: 300_000 }))
    for (const s of [a, b]) {
      assert.equal(await s.files.read('notes.txt'), `notes ${runID}`)
      assert.equal(await s.files.read('/home/user/notes.txt'), `notes ${runID}`)
      assert.equal((await s.commands.run('cat /etc/cove-marker /etc/cove-sudo')).stdout, `marker-${runID}\nsudo-${runID}\n`)
      assert.equal((await s.commands.run('/opt/cove/bin/cove-tool')).stdout, 'installed\n')
      assert.equal((await s.commands.run('whoami; pwd')).stdout, 'user\n/home/user\n')
    }
    assert.equal((await a.commands.run('echo $SNAP_RUN')).stdout, `${runID}\n`)

    // Two sandboxes from one snapshot are independent.
    await a.files.write('notes.txt', 'changed in a')
    await a.commands.run('sudo rm /etc/cove-marker')
    assert.equal(await b.files.read('notes.txt'), `notes ${runID}`)
    assert.equal((await b.commands.run('cat /etc/cove-marker')).stdout, `marker-${runID}\n`)

    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false)
    await assert.rejects(Sandbox.create(snap.snapshotId), (err) => /not found/i.test(err.message))
    assert.ok(!(await Sandbox.listSnapshots().nextItems()).some((s) => s.snapshotId === snap.snapshotId))
    // What was made from it stays.
    assert.equal(await b.files.read('notes.txt'), `notes ${runID}`)
  })
})
