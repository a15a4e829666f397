// Drives a Cove server with the unmodified E2B JS SDK (server/e2b_test.go
// starts the server and runs this with node). The environment says where:
//
//   COVE_E2B_SDK     the directory whose node_modules holds the e2b package
//   COVE_E2B_MODE    "domain": envd and ports by host name under
//                    COVE_E2B_DOMAIN (resolved to 127.0.0.1 by e2b.mjs, TLS with
//                    a test CA in NODE_EXTRA_CA_CERTS); "header": one URL,
//                    E2B_SANDBOX_URL, and the E2b-Sandbox-* headers
//   E2B_API_URL, E2B_API_KEY, E2B_SANDBOX_URL as the SDK reads them
//
// Waits are bounded polls of what a user would see; nothing asserts on
// time.
import assert from 'node:assert/strict'
import crypto from 'node:crypto'
import { after, before, describe, test } from 'node:test'

import e2b from './e2b.mjs'
import { eventually, portFetch } from './wait.mjs'

const mode = process.env.COVE_E2B_MODE
const {
  Sandbox,
  CommandExitError,
  AuthenticationError,
  SandboxNotFoundError,
  NotFoundError,
  TimeoutError,
  InvalidArgumentError,
} = e2b

const runID = crypto.randomBytes(4).toString('hex')
const made = []
async function create(opts = {}) {
  const sbx = await Sandbox.create({ timeoutMs: 300_000, ...opts })
  made.push(sbx)
  return sbx
}

after(async () => {
  for (const sbx of made) await sbx.kill().catch(() => {})
})

describe(`E2B SDK against Cove (${mode} routing)`, () => {
  let sbx
  let home

  before(async () => {
    sbx = await create({ metadata: { suite: 'sdk', run: runID }, envs: { GREETING: 'hi from create' } })
    home = (await sbx.commands.run('pwd')).stdout.trim()
  })

  test('Sandbox.create gives a running sandbox', async () => {
    assert.match(sbx.sandboxId, /\S/)
    assert.equal(await sbx.isRunning(), true)
    const info = await sbx.getInfo()
    assert.equal(info.sandboxId, sbx.sandboxId)
    assert.equal(info.templateId, 'base')
    assert.equal(info.state, 'running')
    assert.equal(info.metadata.run, runID)
  })

  test('commands.run: stdout, stderr, exit code, envs', async () => {
    const r = await sbx.commands.run('echo out; echo err >&2; echo "$GREETING/$EXTRA"', { envs: { EXTRA: 'per command' } })
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'out\nhi from create/per command\n')
    assert.equal(r.stderr, 'err\n')
  })

  test('commands.run: a failing command raises CommandExitError', async () => {
    await assert.rejects(sbx.commands.run('echo bad >&2; exit 3'), (err) => {
      assert.ok(err instanceof CommandExitError, `got ${err}`)
      assert.equal(err.exitCode, 3)
      assert.equal(err.stderr, 'bad\n')
      return true
    })
  })

  test('background command: listed, reattached, killed', async () => {
    // It prints only once the file appears, so its output comes while the
    // reattached handle is the reader.
    const flag = `${home}/go-${runID}`
    const h = await sbx.commands.run(`while [ ! -e ${flag} ]; do sleep 0.05; done; echo after-reattach; sleep 600`, { background: true })
    assert.ok(h.pid > 0)
    const listed = await sbx.commands.list()
    assert.ok(listed.some((p) => p.pid === h.pid), `pid ${h.pid} not in ${JSON.stringify(listed)}`)
    await h.disconnect()

    let seen = ''
    const again = await sbx.commands.connect(h.pid, { onStdout: (d) => (seen += d) })
    assert.equal(again.pid, h.pid)
    await sbx.files.write(flag, '')
    await eventually('output of the reattached command', () => seen.includes('after-reattach'))

    assert.equal(await sbx.commands.kill(h.pid), true)
    await assert.rejects(again.wait(), CommandExitError)
    await eventually('the killed command gone from the list', async () => !(await sbx.commands.list()).some((p) => p.pid === h.pid))
  })

  test('stdin', async () => {
    const h = await sbx.commands.run('cat', { background: true, stdin: true })
    await sbx.commands.sendStdin(h.pid, 'hello ')
    await sbx.commands.sendStdin(h.pid, 'stdin\n')
    await sbx.commands.closeStdin(h.pid)
    const r = await h.wait()
    assert.equal(r.stdout, 'hello stdin\n')
  })

  test('files: write, read, list, exists, makeDir, rename, remove', async () => {
    const dir = `${home}/files-${runID}`
    assert.equal(await sbx.files.makeDir(dir), true)
    assert.equal(await sbx.files.makeDir(dir), false)
    const info = await sbx.files.write(`${dir}/a.txt`, 'alpha')
    assert.equal(info.name, 'a.txt')
    assert.equal(await sbx.files.read(`${dir}/a.txt`), 'alpha')
    await sbx.files.write(`${dir}/sub/b.txt`, 'beta')
    const names = (await sbx.files.list(dir)).map((e) => `${e.name}:${e.type}`).sort()
    assert.deepEqual(names, ['a.txt:file', 'sub:dir'])
    assert.equal(await sbx.files.exists(`${dir}/a.txt`), true)
    assert.equal(await sbx.files.exists(`${dir}/nope`), false)
    await sbx.files.rename(`${dir}/a.txt`, `${dir}/c.txt`)
    assert.equal(await sbx.files.exists(`${dir}/a.txt`), false)
    assert.equal(await sbx.files.read(`${dir}/c.txt`), 'alpha')
    await sbx.files.remove(`${dir}/sub`)
    assert.equal(await sbx.files.exists(`${dir}/sub/b.txt`), false)
    await assert.rejects(sbx.files.read(`${dir}/missing.txt`), NotFoundError)
    // What the API wrote, commands see.
    assert.equal((await sbx.commands.run(`cat ${dir}/c.txt`)).stdout, 'alpha')
  })

  test('files: a 50 MB file comes back byte for byte', async () => {
    const data = crypto.randomBytes(50 << 20)
    const want = crypto.createHash('sha256').update(data).digest('hex')
    const p = `${home}/big-${runID}.bin`
    // Generous timeouts (the SDK's default is 60 s): a busy machine
    // (the test suite's other packages run meanwhile) moves 50 MB slowly.
    const slow = { requestTimeoutMs: 600_000 }
    await sbx.files.write(p, data, slow)
    const got = await sbx.files.read(p, { format: 'bytes', ...slow })
    assert.equal(got.length, data.length)
    assert.equal(crypto.createHash('sha256').update(got).digest('hex'), want)
    assert.equal((await sbx.commands.run(`sha256sum ${p}`, { timeoutMs: 600_000, ...slow })).stdout.split(' ')[0], want)
    await sbx.files.remove(p)
  })

  test('files: watchDir reports changes', async () => {
    const dir = `${home}/watch-${runID}`
    await sbx.files.makeDir(dir)
    const events = []
    const handle = await sbx.files.watchDir(dir, (e) => events.push(e))
    await sbx.files.write(`${dir}/new.txt`, 'x')
    await sbx.commands.run(`rm ${dir}/new.txt`)
    await eventually('create and remove events', () =>
      events.some((e) => e.name === 'new.txt' && e.type === 'create') && events.some((e) => e.name === 'new.txt' && e.type === 'remove'),
    )
    await handle.stop()
  })

  test('getHost(port) reaches an HTTP server in the sandbox', async () => {
    const dir = `${home}/www-${runID}`
    await sbx.files.write(`${dir}/hello.txt`, 'hello from the sandbox')
    const server = await sbx.commands.run('python3 -m http.server 8123 --bind 127.0.0.1', { background: true, cwd: dir })
    const body = await eventually('the app answering', async () => {
      const res = await portFetch(sbx, 8123, '/hello.txt')
      return res.status === 200 ? res.text() : undefined
    })
    assert.equal(body, 'hello from the sandbox')
    await server.kill()
  })

  test('signed file URLs', { skip: mode !== 'domain' && 'E2B_SANDBOX_URL routing needs the routing headers, which a bare URL does not carry' }, async () => {
    const p = `${home}/signed-${runID}.txt`
    const up = await sbx.uploadUrl(p)
    const form = new FormData()
    form.append('file', new Blob(['signed upload']), 'signed.txt')
    const res = await fetch(up, { method: 'POST', body: form })
    assert.equal(res.status, 200, await res.text())
    const down = await fetch(await sbx.downloadUrl(p))
    assert.equal(await down.text(), 'signed upload')
    const tampered = new URL(await sbx.downloadUrl(p))
    tampered.searchParams.set('path', `${home}/other.txt`)
    assert.equal((await fetch(tampered)).status, 401)
  })

  test('setTimeout, and the sandbox ends when it passes', async () => {
    const short = await create({ timeoutMs: 120_000 })
    const before = (await short.getInfo()).endAt
    await short.setTimeout(240_000)
    assert.ok((await short.getInfo()).endAt > before)
    await short.setTimeout(1_000)
    await eventually('the sandbox gone after its timeout', async () => {
      try {
        await Sandbox.getInfo(short.sandboxId)
        return false
      } catch (err) {
        if (err instanceof SandboxNotFoundError) return true
        throw err
      }
    })
    assert.equal(await short.isRunning(), false)
    await assert.rejects(short.commands.run('true'), SandboxNotFoundError)
    await assert.rejects(short.files.read('x'), TimeoutError)
  })

  test('pause, then connect: the files are still there', async () => {
    const p = await create()
    await p.files.write('kept.txt', 'kept across the pause')
    assert.equal(await p.pause(), true)
    assert.equal(await p.pause(), false) // already paused
    assert.equal((await p.getInfo()).state, 'paused')
    // A paused sandbox's envd: the errors the SDK raises against E2B.
    await assert.rejects(p.files.read('kept.txt'), TimeoutError)
    await assert.rejects(p.commands.run('true'), SandboxNotFoundError)
    const back = await Sandbox.connect(p.sandboxId)
    assert.equal(back.sandboxId, p.sandboxId)
    assert.equal((await back.getInfo()).state, 'running')
    assert.equal(await back.files.read('kept.txt'), 'kept across the pause')
    assert.equal((await back.commands.run('cat kept.txt')).stdout, 'kept across the pause')
  })

  test('Sandbox.list with metadata filters', async () => {
    const group = `g-${runID}`
    const a = await create({ metadata: { group, n: '1' } })
    const b = await create({ metadata: { group, n: '2' } })
    const ids = async (query) => {
      const out = []
      const pages = Sandbox.list({ query, limit: 100 })
      while (pages.hasNext) out.push(...(await pages.nextItems()).map((s) => s.sandboxId))
      return out.sort()
    }
    assert.deepEqual(await ids({ metadata: { group } }), [a.sandboxId, b.sandboxId].sort())
    assert.deepEqual(await ids({ metadata: { group, n: '2' } }), [b.sandboxId])
    await a.pause()
    assert.deepEqual(await ids({ metadata: { group }, state: ['paused'] }), [a.sandboxId])
    assert.deepEqual(await ids({ metadata: { group }, state: ['running'] }), [b.sandboxId])
    const first = Sandbox.list({ query: { metadata: { group } }, limit: 1 })
    const page = await first.nextItems()
    assert.equal(page.length, 1)
    assert.equal(first.hasNext, true)
  })

  test('kill', async () => {
    const k = await create()
    assert.equal(await k.kill(), true)
    assert.equal(await k.kill(), false)
    await assert.rejects(Sandbox.getInfo(k.sandboxId), SandboxNotFoundError)
    await assert.rejects(k.commands.run('true'), SandboxNotFoundError)
    await assert.rejects(k.files.list('.'), TimeoutError)
  })

  test('errors: wrong key, unknown sandbox, bad input', async () => {
    const wrongKey = 'e2b_' + '0'.repeat(40)
    await assert.rejects(Sandbox.create({ apiKey: wrongKey }), AuthenticationError)
    await assert.rejects(Sandbox.list({ apiKey: wrongKey }).nextItems(), AuthenticationError)
    await assert.rejects(Sandbox.connect('nosuchsandbox'), SandboxNotFoundError)
    await assert.rejects(Sandbox.getInfo('nosuchsandbox'), SandboxNotFoundError)
    assert.equal(await Sandbox.kill('nosuchsandbox'), false)
    await assert.rejects(sbx.files.write(`${home}/m.txt`, 'x', { metadata: { k: 'v' } }), InvalidArgumentError)
  })
})
