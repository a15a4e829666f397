// The unmodified E2B SDK, for the scripts here (sdk.test.mjs, bench.mjs):
// loaded from COVE_E2B_SDK, the directory whose node_modules holds the
// e2b package, with *.{COVE_E2B_DOMAIN} resolved to this machine so the
// test needs no wildcard DNS.
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
export default require('e2b')
