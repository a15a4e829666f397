// The unmodified E2B SDK, for the scripts here (sdk.test.mjs, bench.mjs):
// loaded from COVE_E2B_SDK, the directory whose node_modules holds the
// e2b package, with *.{COVE_E2B_DOMAIN} resolved to this machine so the
// test needs no wildcard DNS.
import { createRequire } from 'node:module'
import path from 'node:path'
import './resolve.mjs' // *.{COVE_E2B_DOMAIN} resolves to this machine

const require = createRequire(path.join(process.env.COVE_E2B_SDK, 'package.json'))
export default require('e2b')
