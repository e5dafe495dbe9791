/**
 * Two DSH sessions of one project with acpmem-dsh mounted — the real DSH agent
 * loop (`@deepseek-ai/dsh-*`), DSH's own compaction and JSONL session log, and
 * a scripted model standing in for DeepSeek, so it runs offline:
 *
 *   (cd integrations/dsh && npm ci)              # the DSH packages
 *   acp memory init                              # a vault in this folder (or set ACPMEM_VAULT)
 *   node examples/dsh/dsh_session.mjs            # Node >= 22.15 (DSH's persistence uses Node's zstd)
 *
 * Session 1: the user states a decision, DSH compacts it into block b1, the
 * plugin adds acpmem's guidance naming the block, the model calls
 * memory_commit({ block: "b1" }) and acpmem's fork (the offline extractor
 * here) writes the entry from the session's own session.jsonl.zstd.
 * Session 2: the entry is in the system prompt; the model recalls it; the
 * user runs /acp memory list. Sessions go to ./dsh-sessions/.
 */

import { createRequire } from 'node:module'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { dirname, join, resolve } from 'node:path'

// The DSH packages live where `npm ci` put them: integrations/dsh/node_modules.
const pluginDir = resolve(dirname(fileURLToPath(import.meta.url)), '../../integrations/dsh')
const fromPlugin = createRequire(join(pluginDir, 'package.json'))
const load = (name) => import(pathToFileURL(fromPlugin.resolve(name)).href)

const { Context } = await load('@deepseek-ai/cordis')
const { default: LlmRuntime, LlmAdapter, createUserMessage } = await load('@deepseek-ai/dsh-llm')
const { default: SessionStore, SessionId } = await load('@deepseek-ai/dsh-session')
const { default: SystemPrompt } = await load('@deepseek-ai/dsh-system-prompt')
const { default: ToolRuntime } = await load('@deepseek-ai/dsh-tools')
const { default: AgentRegistry } = await load('@deepseek-ai/dsh-agent')
const { default: AgentLoop } = await load('@deepseek-ai/dsh-agent-loop')
const { default: CommandRegistry } = await load('@deepseek-ai/dsh-commands')
const { default: JsonlSessionPersistence } = await load('@deepseek-ai/dsh-session-persistence-jsonl')
const { default: SessionProjectionRegistry } = await load('@deepseek-ai/dsh-session-projection')
const { default: TokenMeter } = await load('@deepseek-ai/dsh-token-meter')
const { default: BasicCompactionEngine } = await load('@deepseek-ai/dsh-compaction-basic')
const { default: AcpmemMemory } = await import(pathToFileURL(join(pluginDir, 'src/index.js')).href)

const FILLER = 'We went through the deploy scripts and the CI configuration line by line. '.repeat(12)

/** A scripted model: plays its replies in order; DSH's compaction requests get a checkpoint summary. */
class ScriptedModel extends LlmAdapter {
  constructor(replies) { super(); this.replies = replies; this.requests = [] }
  resolveModel(provider, model) { return Promise.resolve({ provider, id: model, name: model, context: { contextWindow: 3000 } }) }
  async * stream(options) {
    let reply = options.purpose === 'compaction'
      ? { text: 'Checkpoint: releases are cut only from release/* branches; hotfixes must never carry unreviewed main commits.' }
      : this.replies.shift() ?? { text: '(done)' }
    if (options.purpose !== 'compaction') this.requests.push(options)
    if (reply.call !== undefined) {
      const [name, args] = reply.call
      const id = `call_${this.requests.length}`
      const text = JSON.stringify(args)
      yield { type: 'block-start', index: 0, blockType: 'tool-call' }
      yield { type: 'tool-call-delta', index: 0, id, name, argumentsDelta: text }
      yield { type: 'block-end', index: 0, block: { type: 'tool-call', id, name, arguments: text } }
      yield { type: 'finish', reason: { kind: 'tool-calls' } }
      return
    }
    yield { type: 'block-start', index: 0, blockType: 'text' }
    yield { type: 'text-delta', index: 0, text: reply.text }
    yield { type: 'block-end', index: 0, block: { type: 'text', text: reply.text } }
    yield { type: 'usage', usage: { inputTokens: 50, outputTokens: 20 } }
    yield { type: 'finish', reason: { kind: 'stop' } }
  }
}

/** A DSH host the way a deployment composes one, with acpmem-dsh in it. */
async function startHost(replies) {
  const ctx = new Context()
  ctx.logger.exporter({ levels: { default: 2 }, export: (m) => { if (m.type === 'warn') console.log(`  [host warning] ${m.args.join(' ')}`) } })
  for (const plugin of [LlmRuntime, SessionStore, SystemPrompt, ToolRuntime, AgentRegistry, CommandRegistry]) await ctx.plugin(plugin)
  await ctx.plugin(JsonlSessionPersistence, { root: resolve('dsh-sessions') })
  const model = new ScriptedModel(replies)
  ctx.llm.registerAdapter(['scripted'], model)
  await ctx.plugin(SessionProjectionRegistry)
  await ctx.plugin(TokenMeter)
  await ctx.plugin(BasicCompactionEngine, { thresholdRatio: 0.5, retainTokens: 300 })
  await ctx.plugin(AcpmemMemory, { wait: true, extractor: 'offline' })   // wait: show the entry in this demo
  await ctx.plugin(AgentLoop, { agents: [] })
  return { ctx, model }
}

async function session(host, id, turns) {
  const { agent, dispose } = await host.ctx.agents.create({ sessionId: SessionId(id), meta: { cwd: process.cwd() }, agentOptions: { provider: 'scripted', model: 'demo' } })
  for (const text of turns) {
    agent.followup(createUserMessage({ content: [{ type: 'text', text }], source: { kind: 'user' } }))
    await new Promise((r) => setImmediate(r))
    await agent.whenIdle()
  }
  return { agent, dispose }
}

const textOf = (m) => m.content.filter((b) => b.type === 'text').map((b) => b.text).join('\n')
const results = (agent) => agent.session.events.filter((e) => e.type === 'tool/result').map((e) => textOf(e.data.message.content[0]))
const stamp = Date.now().toString(36)

console.log('— session 1: a decision, a compaction, memory_commit naming the block')
const one = await startHost([{ text: `Understood. ${FILLER}` }, { text: `Checked. ${FILLER}` }, { text: 'Fine.' },
  { call: ['memory_commit', { type: 'decision', note: 'releases only from release/* branches', importance: 8, block: 'b1' }] }, { text: 'Kept for later sessions.' }])
const s1 = await session(one, `demo-${stamp}-1`, [`Decision: we cut releases only from release/* branches, because hotfixes must never carry unreviewed main commits. ${FILLER}`, `Now the scripts. ${FILLER}`, 'Next.', 'Keep that decision for later sessions.'])
const guidance = one.model.requests.flatMap((r) => r.messages).find((m) => m.source?.plugin === 'acpmem')
console.log(`  tools the model had: ${one.model.requests[0].tools.map((t) => t.name).join(', ')}`)
console.log(`  guidance after the compaction: …${textOf(guidance ?? { content: [] }).split('\n').at(-1)}`)
console.log(`  memory_commit returned: ${results(s1.agent).join('\n    ')}`)
await one.ctx.sessions.flush(s1.agent.session)
await one.ctx.fiber.dispose()

console.log('— session 2: the index in the system prompt, a recall, /acp memory list')
const two = await startHost([{ call: ['memory_recall', { query: 'release branches hotfix' }] }, { text: 'From release/* branches only.' }])
const s2 = await session(two, `demo-${stamp}-2`, ['Where do releases come from?'])
const system = two.model.requests[0].system
const at = system.indexOf('# Long-term memory')
console.log(`  system prompt, memory part:\n${at < 0 ? '    (none)' : system.slice(at).replace(/^/gmu, '    ')}`)
console.log(`  memory_recall returned ${results(s2.agent)[0]?.length ?? 0} characters`)
const listed = await two.ctx.commands.execute(s2.agent, '/acp memory list', [], new AbortController().signal)
console.log(`  /acp memory list:\n${(listed?.result.text ?? '(no answer)').replace(/^/gmu, '    ')}`)
await two.ctx.fiber.dispose()
