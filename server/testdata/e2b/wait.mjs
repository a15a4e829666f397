// Helpers the SDK-driven tests share (the e2b and agents suites).
import assert from 'node:assert/strict'

// eventually polls fn until it returns a truthy value, for at most
// `seconds`; the last error or value is in the failure message. It is a
// bound on what a user would wait for, never a timing assertion.
export async function eventually(what, fn, seconds = 60) {
  const end = Date.now() + seconds * 1000
  let last
  for (;;) {
    try {
      const v = await fn()
      if (v) return v
      last = v
    } catch (err) {
      last = err
    }
    if (Date.now() > end) assert.fail(`${what}: not within ${seconds}s (last: ${last})`)
    await new Promise((r) => setTimeout(r, 100))
  }
}

// portFetch fetches urlPath from a port of a sandbox the way the routing
// mode in COVE_E2B_MODE reaches ports: by host name (getHost, https) or
// through E2B_SANDBOX_URL with the E2b-Sandbox-* headers.
export function portFetch(sbx, port, urlPath, init = {}) {
  if (process.env.COVE_E2B_MODE === 'domain') return fetch(`https://${sbx.getHost(port)}${urlPath}`, init)
  const headers = { ...(init.headers ?? {}), 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': String(port) }
  return fetch(`${process.env.E2B_SANDBOX_URL}${urlPath}`, { ...init, headers })
}
