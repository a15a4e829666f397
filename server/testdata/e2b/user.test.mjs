// E2B's defaults for users and paths, with the unmodified E2B JS SDK
// (server/e2b_user_test.go starts the server and runs this with node, in
// both routing modes; see sdk.test.mjs for the environment). Besides that:
//
//   COVE_V1_SANDBOX  a sandbox made through Cove's /v1 API, which keeps
//                    its workspace as the working directory
import assert from 'node:assert/strict'
import crypto from 'node:crypto'
import { after, before, describe, test } from 'node:test'

import e2b from './e2b.mjs'
import { eventually } from './wait.mjs'

const { Sandbox, CommandExitError } = e2b
const mode = process.env.COVE_E2B_MODE
const runID = crypto.randomBytes(4).toString('hex')

describe(`E2B users and paths on Cove (${mode} routing)`, () => {
  let sbx

  before(async () => {
    sbx = await Sandbox.create({ timeoutMs: 300_000, metadata: { suite: 'user', run: runID } })
  })
  after(async () => {
    await sbx?.kill().catch(() => {})
  })

  test('the default user is user, at home in /home/user', async () => {
    assert.equal((await sbx.commands.run('whoami')).stdout.trim(), 'user')
    assert.equal((await sbx.commands.run('pwd')).stdout.trim(), '/home/user')
    assert.equal((await sbx.commands.run('echo $HOME')).stdout.trim(), '/home/user')
    assert.equal((await sbx.commands.run('stat -c %U /home/user')).stdout.trim(), 'user')
    assert.equal((await sbx.commands.run('id -u')).stdout.trim(), '1000')
  })

  test('relative file paths resolve in /home/user, owned by user', async () => {
    await sbx.files.write('rel.txt', 'relative')
    assert.equal(await sbx.files.read('/home/user/rel.txt'), 'relative')
    assert.equal(await sbx.files.read('rel.txt'), 'relative')
    assert.equal((await sbx.commands.run('stat -c %U /home/user/rel.txt')).stdout.trim(), 'user')
    assert.equal(await sbx.files.exists('rel.txt'), true)
    await sbx.files.makeDir('reldir/sub')
    assert.equal((await sbx.commands.run('stat -c %U /home/user/reldir/sub')).stdout.trim(), 'user')
    const names = (await sbx.files.list('.')).map((e) => e.path)
    assert.ok(names.includes('/home/user/rel.txt'), `list('.') gave ${names}`)
    // A relative cwd is under /home/user too.
    assert.equal((await sbx.commands.run('pwd', { cwd: 'reldir' })).stdout.trim(), '/home/user/reldir')
  })

  test('root on request', async () => {
    const r = await sbx.commands.run('id -u; whoami; pwd', { user: 'root' })
    assert.equal(r.stdout, '0\nroot\n/home/user\n')
    await sbx.files.write(`/tmp/root-${runID}.txt`, 'x', { user: 'root' })
    assert.equal((await sbx.commands.run(`stat -c %U /tmp/root-${runID}.txt`)).stdout.trim(), 'root')
  })

  test('sudo works for user, without a password', async () => {
    assert.equal((await sbx.commands.run('sudo whoami')).stdout.trim(), 'root')
    assert.equal((await sbx.commands.run('sudo -n true')).exitCode, 0)
    assert.equal((await sbx.commands.run('sudo id -u')).stdout.trim(), '0')
    // stdin, the exit code and the working directory pass through.
    assert.equal((await sbx.commands.run('echo piped | sudo cat')).stdout, 'piped\n')
    await assert.rejects(sbx.commands.run('sudo sh -c "exit 7"'), (err) => {
      assert.ok(err instanceof CommandExitError, `got ${err}`)
      assert.equal(err.exitCode, 7)
      return true
    })
    assert.equal((await sbx.commands.run('sudo pwd', { cwd: '/tmp' })).stdout.trim(), '/tmp')
    // What root writes through sudo is root's.
    await sbx.commands.run('sudo sh -c "echo hi > /etc/cove-sudo-test"')
    assert.equal((await sbx.commands.run('stat -c %U /etc/cove-sudo-test')).stdout.trim(), 'root')
    // -u names another user.
    assert.equal((await sbx.commands.run('sudo -u user whoami', { user: 'root' })).stdout.trim(), 'user')
  })

  test('sudo in a PTY: the terminal passes through, Ctrl-C reaches the command', async () => {
    let out = ''
    const dec = new TextDecoder()
    const h = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => (out += dec.decode(d)) })
    const send = (s) => sbx.pty.sendInput(h.pid, new TextEncoder().encode(s))
    await send('pwd; sudo sh -c "id -u; tty >/dev/null && echo on-a-tty"\n')
    await eventually('sudo output in the PTY', () => out.includes('0\r\non-a-tty'))
    assert.ok(out.includes('/home/user'), out)
    // Ctrl-C ends a command run with sudo, and the shell goes on.
    await send('sudo sleep 600; echo after-sleep-$?\n')
    await eventually('the sleep under sudo', async () => (await sbx.commands.run('pgrep -x sleep || true')).stdout.trim() !== '')
    await send('\x03')
    await eventually('Ctrl-C through sudo', () => out.includes('after-sleep-130'))
    await eventually('the sleep gone', async () => (await sbx.commands.run('pgrep -x sleep || true')).stdout.trim() === '')
    await send('exit\n')
    await h.wait().catch(() => {})
  })

  test('a /v1 sandbox keeps its workspace', { skip: !process.env.COVE_V1_SANDBOX }, async () => {
    const v1 = await Sandbox.connect(process.env.COVE_V1_SANDBOX)
    assert.equal((await v1.commands.run('pwd')).stdout.trim(), '/workspace')
    assert.equal((await v1.commands.run('whoami')).stdout.trim(), 'user')
    await v1.files.write(`v1-${runID}.txt`, 'v1')
    assert.equal(await v1.files.read(`/workspace/v1-${runID}.txt`), 'v1')
  })
})
