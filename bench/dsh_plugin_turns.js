/**
 * The node half of bench/dsh_plugin.py: host turns in the real DSH loop with
 * and without acpmem-dsh, timed from the host's side.
 *
 *   node bench/dsh_plugin_turns.js VAULT SESSIONS_ROOT CWD TURNS
 *
 * Each turn is a session of its own (the index is asked for once per session),
 * in which the scripted model calls memory_commit and then answers. Prints one
 * JSON object: the host's start-up time, per turn the first system-prompt assembly of the session (the
 * index call is in it), the memory_commit as the loop saw it (its tool/call to
 * its tool/result), and the system prompt and tool bytes, with and without
 * the plugin.
 */

import { host, say, call } from '../integrations/dsh/tests/support/harness.js'

const [vault, root, cwd, turnsText] = process.argv.slice(2)
const turns = Number(turnsText)

async function run(withPlugin) {
  const script = []
  for (let i = 0; i < turns; i += 1) {
    script.push(withPlugin ? call(['memory_commit', { type: 'decision', note: `bench decision ${i}`, importance: 5 }]) : say('no memory'))
    if (withPlugin) script.push(say('noted'))
  }
  const mountStarted = performance.now()
  const h = await host({ root, plugin: withPlugin ? { vault } : undefined, script })
  const mountMs = performance.now() - mountStarted
  const assemblies = []
  h.ctx.on('system-prompt/assemble', async (assembly, context, next) => {
    const started = performance.now()
    const result = await next()
    if (context?.agent !== undefined) assemblies.push({ session: context.agent.session.id, ms: performance.now() - started })
    return result
  }, true)
  const out = { mountMs, firstAssemblyMs: [], commitMs: [], systemBytes: 0, toolBytes: 0 }
  for (let i = 0; i < turns; i += 1) {
    const id = `bench-${withPlugin ? 'on' : 'off'}-${i}`
    const s = await h.session(id, cwd)
    await s.user(`Turn ${i}: we settled something worth keeping.`)
    out.firstAssemblyMs.push(assemblies.find((a) => a.session === id).ms)
    const events = s.agent.session.events
    const started = events.find((e) => e.type === 'tool/call')
    const ended = events.find((e) => e.type === 'tool/result')
    if (started !== undefined && ended !== undefined) out.commitMs.push(ended.time - started.time)
    await s.close()
  }
  const request = h.adapter.requests[0]
  out.systemBytes = Buffer.byteLength(request.system, 'utf8')
  out.toolBytes = Buffer.byteLength(JSON.stringify((request.tools ?? []).filter((t) => t.name.startsWith('memory_'))), 'utf8')
  await h.close()
  return out
}

const off = await run(false)
const on = await run(true)
process.stdout.write(`${JSON.stringify({ off, on })}\n`)
