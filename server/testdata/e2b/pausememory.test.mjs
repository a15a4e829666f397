// Pause with memory through the unmodified E2B SDK
// (server/e2b_pausememory_test.go runs this with node, in both routing
// modes; the environment is sdk.test.mjs's). A sandbox made with
// metadata cove.isolation=gvisor runs on Cove's gVisor tier, where
// pause keeps processes and memory as E2B's does: after pause and
// connect, a background server still answers and a counter goes on from
// where it was, in the same process; pause({keepMemory: false}) keeps
// the disk only; fork copies the processes; autoPause at the timeout keeps memory too, and traffic
// resumes it with its processes (autoResume).
//
// Waits are bounded polls of what a user would see; nothing asserts on
// time.
import assert from 'node:assert/strict'
import crypto from 'node:crypto'
import { after, describe, test } from 'node:test'

import e2b from './e2b.mjs'
import { eventually, portFetch } from './wait.mjs'

const mode = process.env.COVE_E2B_MODE
const { Sandbox } = e2b

const runID = crypto.randomBytes(4).toString('hex')
const made = []
async function create(opts = {}) {
  const sbx = await Sandbox.create({ metadata: { 'cove.isolation': 'gvisor', suite: 'pausememory', run: runID }, ...opts })
  made.push(sbx)
  return sbx
}

after(async () => {
  for (const sbx of made) await sbx.kill().catch(() => {})
})

const state = async (sbx) => (await Sandbox.getInfo(sbx.sandboxId)).state

// coveView is the sandbox as Cove's own API shows it (an e2b_ key is a
// team key there too).
async function coveView(id) {
  const res = await fetch(`${process.env.E2B_API_URL}/v1/sandboxes/${id}`, {
    headers: { Authorization: `Bearer ${process.env.E2B_API_KEY}` },
  })
  const text = await res.text()
  assert.equal(res.status, 200, text)
  return JSON.parse(text)
}

// The counter: a token only this process's memory holds, and a count it
// keeps in a shell variable, written to a file every 0.1 s.
const loop = `tok=$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \\n'); i=0; while :; do i=$((i+1)); echo "$tok $i" > /tmp/counter; sleep 0.1; done`

async function counter(sbx) {
  return eventually('the counter', async () => {
    const [tok, n] = (await sbx.commands.run('cat /tmp/counter')).stdout.trim().split(' ')
    return Number(n) > 0 ? { tok, n: Number(n) } : undefined
  })
}

// startWork starts the counter and a web server in the background.
async function startWork(sbx) {
  // In the workspace, on the sandbox's disk (its /tmp is memory).
  const www = `${(await sbx.commands.run('pwd')).stdout.trim()}/www`
  await sbx.files.write(`${www}/hello.txt`, 'served from memory')
  const loopH = await sbx.commands.run(loop, { background: true, timeoutMs: 0 })
  const web = await sbx.commands.run(`python3 -m http.server 8125 --bind 127.0.0.1 --directory ${www}`, { background: true, timeoutMs: 0 })
  await eventually('the web server answering', async () => (await portFetch(sbx, 8125, '/hello.txt')).status === 200)
  return { loop: loopH.pid, web: web.pid, www, before: await counter(sbx) }
}

// stillThere checks the processes of startWork run on where they were.
async function stillThere(sbx, work) {
  const pids = (await sbx.commands.list()).map((p) => p.pid)
  assert.ok(pids.includes(work.loop) && pids.includes(work.web), `processes ${pids}, want ${work.loop} and ${work.web}`)
  const res = await portFetch(sbx, 8125, '/hello.txt')
  assert.equal(res.status, 200)
  assert.equal(await res.text(), 'served from memory')
  const now = await eventually('the count going on', async () => {
    const c = await counter(sbx)
    return c.n > work.before.n ? c : undefined
  })
  assert.equal(now.tok, work.before.tok, 'the counter was started again, not kept')
}

describe(`pause with memory on the gvisor tier (${mode} routing)`, () => {
  test('metadata cove.isolation=gvisor makes a gvisor sandbox', async () => {
    const sbx = await create()
    assert.equal((await coveView(sbx.sandboxId)).isolation, 'gvisor')
    assert.equal((await sbx.getInfo()).metadata['cove.isolation'], undefined)
  })

  test('betaPause, then connect: the same processes, with their memory', async () => {
    const sbx = await create()
    const work = await startWork(sbx)
    assert.equal(await sbx.betaPause(), true)
    assert.equal(await state(sbx), 'paused')
    assert.equal((await coveView(sbx.sandboxId)).paused, true)
    const back = await Sandbox.connect(sbx.sandboxId)
    assert.equal(await state(back), 'running')
    await stillThere(back, work)
  })

  test('pause({keepMemory: false}) keeps the disk only', async () => {
    const sbx = await create()
    const work = await startWork(sbx)
    assert.equal(await sbx.pause({ keepMemory: false }), true)
    assert.ok(!(await coveView(sbx.sandboxId)).paused, 'paused with memory')
    const back = await Sandbox.connect(sbx.sandboxId)
    const pids = (await back.commands.list()).map((p) => p.pid)
    assert.ok(!pids.includes(work.loop), `the counter ${work.loop} runs after a pause without memory: ${pids}`)
    assert.equal(await back.files.read(`${work.www}/hello.txt`), 'served from memory') // the disk is kept
  })

  test('fork({count: 2}) copies the running processes', async () => {
    const sbx = await create()
    const work = await startWork(sbx)
    const forks = await sbx.fork({ count: 2, timeoutMs: 120_000 })
    assert.equal(forks.length, 2)
    for (const f of forks) {
      made.push(f)
      assert.notEqual(f.sandboxId, sbx.sandboxId)
      assert.equal((await coveView(f.sandboxId)).isolation, 'gvisor')
      // Its own copy of the counter, going on from the source's count.
      const c = await eventually('the copy counting', async () => {
        const c = await counter(f)
        return c.n > work.before.n ? c : undefined
      })
      assert.equal(c.tok, work.before.tok, 'the copy started its counter afresh')
    }
    await stillThere(sbx, work) // the source goes on
  })

  test('autoPause keeps memory, and traffic resumes the processes', async () => {
    const sbx = await create({ lifecycle: { onTimeout: 'pause', autoResume: true } })
    const work = await startWork(sbx)
    await sbx.setTimeout(1_000)
    // E2B's state says paused from the timeout on; Cove's record says
    // so once the lifecycle loop has saved its memory.
    await eventually('paused with its memory at its timeout', async () => (await coveView(sbx.sandboxId)).paused)
    assert.equal(await state(sbx), 'paused')
    await stillThere(sbx, work) // the first call resumes it
    assert.equal(await state(sbx), 'running')
  })
})
