// The sandbox's daemon as the unmodified E2B JS SDK sees it (issue 15):
// a command's timeoutMs ends the command and everything it started, as
// envd's does, and an upload (files.write) gives watchDir the events
// envd's in-place write gives. server/e2b_guest_test.go starts the
// server and runs this with node in both routing modes; the environment
// is sdk.test.mjs's.
//
// Waits are bounded polls of what a user would see; nothing asserts on
// time.
import assert from 'node:assert/strict'
import crypto from 'node:crypto'
import { after, before, describe, test } from 'node:test'

import e2b from './e2b.mjs'
import { eventually } from './wait.mjs'

const mode = process.env.COVE_E2B_MODE
const { Sandbox, TimeoutError } = e2b

const runID = crypto.randomBytes(4).toString('hex')

// marker is a number no other process's command line holds: commands
// sleep that many seconds, so /proc tells whether any is left.
function marker() {
  return String(700000 + crypto.randomInt(99999))
}

describe(`E2B SDK: the sandbox's daemon (${mode} routing)`, () => {
  let sbx
  let home

  before(async () => {
    sbx = await Sandbox.create({ timeoutMs: 300_000, metadata: { suite: 'guest', run: runID } })
    home = (await sbx.commands.run('pwd')).stdout.trim()
  })
  after(async () => {
    await sbx?.kill().catch(() => {})
  })

  // left lists the command lines in the sandbox that hold m (read from
  // /proc, so nothing but the shell is needed; the scan itself holds m
  // only in its own command line, which it skips).
  async function left(m) {
    const scan = `for p in /proc/[0-9]*; do [ "$p" = /proc/$$ ] && continue; c=$(tr '\\0' ' ' < $p/cmdline 2>/dev/null); case "$c" in *${m}*) echo "$c";; esac; done`
    const out = (await sbx.commands.run(scan, { timeoutMs: 30_000 })).stdout
    return out.split('\n').filter((l) => l.trim() !== '' && !l.includes('/proc/[0-9]'))
  }

  async function noneLeft(what, m) {
    await eventually(`${what}: every process of the command ended`, async () => {
      const l = await left(m)
      if (l.length > 0) throw new Error(`still running: ${l.join('; ')}`)
      return true
    })
  }

  test('timeoutMs kills a foreground command and its children', async () => {
    const m = marker()
    // A child in the background and one in the foreground: the whole
    // process group goes.
    await assert.rejects(sbx.commands.run(`sleep ${m} & sleep ${Number(m) + 1}; wait`, { timeoutMs: 1500 }), TimeoutError)
    await noneLeft('foreground', m)
  })

  test('timeoutMs kills a background command and its children', async () => {
    const m = marker()
    const h = await sbx.commands.run(`sleep ${m} & sleep ${Number(m) + 1}; wait`, { background: true, timeoutMs: 1500 })
    assert.ok(h.pid > 0)
    await assert.rejects(h.wait(), TimeoutError)
    await noneLeft('background', m)
  })

  test('timeoutMs holds after the client disconnects; no timeoutMs outlives it', async () => {
    const killed = marker()
    const kept = marker()
    const a = await sbx.commands.run(`sleep ${killed}`, { background: true, timeoutMs: 2000 })
    const b = await sbx.commands.run(`sleep ${kept}`, { background: true, timeoutMs: 0 })
    await a.disconnect()
    await b.disconnect()
    await noneLeft('disconnected with a deadline', killed)
    // The deadline has passed and b, started without one, runs on. A
    // client that reattaches with a deadline of its own ends its stream
    // only, as envd's Connect does.
    assert.equal((await left(kept)).length, 1, 'a command without timeoutMs ended when its client disconnected')
    const again = await sbx.commands.connect(b.pid, { timeoutMs: 1000 })
    await assert.rejects(again.wait(), TimeoutError)
    assert.equal((await left(kept)).length, 1, "a reattached client's deadline killed the command")
    assert.ok((await sbx.commands.list()).some((p) => p.pid === b.pid))
    assert.equal(await sbx.commands.kill(b.pid), true)
    await noneLeft('killed', kept)
  })

  test("timeoutMs kills a PTY's shell and its jobs", async () => {
    const m = marker()
    const h = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {}, timeoutMs: 8000 })
    // An interactive shell gives each job a process group of its own,
    // and one that ignores SIGHUP outlives the terminal's hangup.
    const held = String(Number(m) + 1)
    await sbx.pty.sendInput(h.pid, new TextEncoder().encode(`sleep ${m} & (trap '' HUP; exec sleep ${held}) &\n`))
    await eventually('both jobs running', async () => (await left(m)).some((l) => l.startsWith(`sleep ${m} `)) && (await left(held)).some((l) => l.startsWith(`sleep ${held}`)), 8)
    await assert.rejects(h.wait(), TimeoutError)
    await noneLeft('pty', m)
  })

  // watched collects the events of a watch on dir until stop.
  async function watched(dir) {
    const events = []
    const handle = await sbx.files.watchDir(dir, (e) => events.push({ name: e.name, type: e.type }))
    return { events, handle }
  }

  // settle writes a file named `flag` and waits for its create event:
  // events come in order, so every event of what came before is in.
  async function settle(dir, events, flag) {
    await sbx.files.write(`${dir}/${flag}`, 'flag')
    await eventually(`the create event of ${flag}`, () => events.some((e) => e.name === flag && e.type === 'create'))
  }

  test('watchDir: files.write of a new file is a create and a write of it', async () => {
    const dir = `${home}/watch-new-${runID}`
    await sbx.files.makeDir(dir)
    const { events, handle } = await watched(dir)
    try {
      await sbx.files.write(`${dir}/new.txt`, 'first')
      await settle(dir, events, 'flag-1')
      const mine = events.filter((e) => e.name === 'new.txt').map((e) => e.type)
      assert.ok(mine.includes('create'), `events of new.txt: ${JSON.stringify(mine)}, want a create`)
      assert.ok(mine.includes('write'), `events of new.txt: ${JSON.stringify(mine)}, want a write`)
      assert.ok(mine.indexOf('create') < mine.indexOf('write'), `events of new.txt: ${JSON.stringify(mine)}, want the create first`)
      assert.deepEqual(events.filter((e) => !['new.txt', 'flag-1'].includes(e.name)), [], 'events on other names (temporary files)')
      assert.equal(await sbx.files.read(`${dir}/new.txt`), 'first')
    } finally {
      await handle.stop()
    }
  })

  test('watchDir: files.write over a file is a write of it, not a create', async () => {
    const dir = `${home}/watch-over-${runID}`
    await sbx.files.write(`${dir}/kept.txt`, 'old')
    const { events, handle } = await watched(dir)
    try {
      await sbx.files.write(`${dir}/kept.txt`, 'new content')
      await settle(dir, events, 'flag-2')
      const mine = events.filter((e) => e.name === 'kept.txt').map((e) => e.type)
      assert.ok(mine.includes('write'), `events of kept.txt: ${JSON.stringify(mine)}, want a write`)
      assert.ok(!mine.includes('create') && !mine.includes('remove') && !mine.includes('rename'), `events of kept.txt: ${JSON.stringify(mine)}, want no create, remove or rename`)
      assert.deepEqual(events.filter((e) => !['kept.txt', 'flag-2'].includes(e.name)), [], 'events on other names (temporary files)')
      assert.equal(await sbx.files.read(`${dir}/kept.txt`), 'new content')
    } finally {
      await handle.stop()
    }
  })

  test('watchDir (recursive): files.write of several files at once', async () => {
    const dir = `${home}/watch-many-${runID}`
    await sbx.files.makeDir(`${dir}/sub`)
    await sbx.files.write(`${dir}/sub/b.txt`, 'old')
    const events = []
    const handle = await sbx.files.watchDir(dir, (e) => events.push({ name: e.name, type: e.type }), { recursive: true })
    try {
      await sbx.files.write([
        { path: `${dir}/sub/a.txt`, data: 'a' },
        { path: `${dir}/sub/b.txt`, data: 'b' },
      ])
      await settle(dir, events, 'flag-3')
      const of = (n) => events.filter((e) => e.name === n).map((e) => e.type)
      assert.ok(of('sub/a.txt').includes('create') && of('sub/a.txt').includes('write'), `sub/a.txt: ${JSON.stringify(of('sub/a.txt'))}`)
      assert.ok(of('sub/b.txt').includes('write') && !of('sub/b.txt').includes('create'), `sub/b.txt: ${JSON.stringify(of('sub/b.txt'))}`)
      assert.deepEqual(events.filter((e) => !['sub/a.txt', 'sub/b.txt', 'flag-3'].includes(e.name)), [], 'events on other names')
    } finally {
      await handle.stop()
    }
  })
})
