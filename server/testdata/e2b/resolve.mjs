// Imported for its effect: host names under COVE_E2B_DOMAIN (the name
// itself and *.{COVE_E2B_DOMAIN}) resolve to this machine, so the tests
// need no wildcard DNS. e2b.mjs and ../agents/agents.mjs import it.
import dns from 'node:dns'

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
