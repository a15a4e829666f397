// The unmodified OpenAI Agents SDK and its E2B sandbox client, for the
// scripts here: loaded as ES modules from COVE_AGENTS_SDK, the directory
// whose node_modules holds them (scripts/deps.sh installs them), so the
// E2B client's own import('e2b') finds the same e2b package. Host names
// under COVE_E2B_DOMAIN resolve to this machine, so the test needs no
// wildcard DNS.
import fs from 'node:fs'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import '../e2b/resolve.mjs' // *.{COVE_E2B_DOMAIN} resolves to this machine

// load imports the ES module entry of pkg's export subpath ('.',
// './sandbox', ...) from the installed packages.
async function load(pkg, subpath = '.') {
  const dir = path.join(process.env.COVE_AGENTS_SDK, 'node_modules', pkg)
  const manifest = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'))
  // Without "exports", Node resolves the bare name to "main", as the E2B
  // client's import('e2b') does.
  let entry = manifest.exports ? manifest.exports[subpath] : manifest.main
  while (entry && typeof entry === 'object') entry = entry.import ?? entry.default
  if (typeof entry !== 'string') throw new Error(`${pkg} has no ES module export ${subpath}`)
  return import(pathToFileURL(path.join(dir, entry)).href)
}

export const agents = await load('@openai/agents')
export const sandbox = await load('@openai/agents', './sandbox')
export const e2bClient = await load('@openai/agents-extensions', './sandbox/e2b')
export const e2b = await load('e2b')
