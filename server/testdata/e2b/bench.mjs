// Times Sandbox.create to the first commands.run result through the
// unmodified E2B SDK, COVE_E2B_N times (the kill after each is not
// timed), and prints the durations in milliseconds as JSON on the last
// line. server/e2b_test.go's BenchmarkE2BCreateToFirstRun runs it; the
// environment is as for sdk.test.mjs.
import e2b from './e2b.mjs'

const { Sandbox } = e2b

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
