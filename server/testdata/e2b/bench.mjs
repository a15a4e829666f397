// Times Sandbox.create to the first commands.run result through the
// unmodified E2B SDK, COVE_E2B_N times (the kill after each is not
// timed), and prints the durations in milliseconds as JSON on the last
// line. server/e2b_test.go's BenchmarkE2BCreateToFirstRun runs it; the
// environment is as for sdk.test.mjs.
import dns from 'node:dns'
import { createRequire } from 'node:module'
import path from 'node:path'

const domainHost = (process.env.COVE_E2B_DOMAIN ?? '').split(':')[0]
if (domainHost) {
  const lookup = dns.lookup
  dns.lookup = function (host, opts, cb) {
    if (typeof opts === 'function') {
      cb = opts
      opts = {}
    }
    if (host === domainHost || host.endsWith('.' + domainHost)) {
      if (opts && opts.all) return process.nextTick(cb, null, [{ address: '127.0.0.1', family: 4 }])
      return process.nextTick(cb, null, '127.0.0.1', 4)
    }
    return lookup.call(dns, host, opts, cb)
  }
}

const require = createRequire(path.join(process.env.COVE_E2B_SDK, 'package.json'))
const { Sandbox } = require('e2b')

const n = Number(process.env.COVE_E2B_N ?? 50)
const ms = []
for (let i = 0; i < n; i++) {
  const t0 = performance.now()
  const sbx = await Sandbox.create()
  const r = await sbx.commands.run('echo hi')
  ms.push(performance.now() - t0)
  if (r.stdout !== 'hi\n') throw new Error(`unexpected output ${JSON.stringify(r.stdout)}`)
  await sbx.kill()
}
console.log(JSON.stringify(ms))
