/**
 * A real DSH agent loop for tests: the `@deepseek-ai/dsh-*` services composed
 * the way a DSH deployment composes them (LLM runtime, sessions, system
 * prompt, tools, agents, commands, JSONL persistence, the token meter and
 * DSH's own compaction), the acpmem plugin under test, and a scripted model
 * adapter — the pattern DSH's own loop tests use: an `LlmAdapter` whose
 * `stream()` plays scripted chunks and records every request it is sent.
 *
 * Only the model is scripted. Tools run through DSH's real registry, the log
 * is written by DSH's real persistence backend, compactions are DSH's own.
 */

import { Context } from '@deepseek-ai/cordis'
import LlmRuntime, { LlmAdapter, createUserMessage } from '@deepseek-ai/dsh-llm'
import SessionStore, { SessionId } from '@deepseek-ai/dsh-session'
import SystemPrompt from '@deepseek-ai/dsh-system-prompt'
import ToolRuntime from '@deepseek-ai/dsh-tools'
import AgentRegistry from '@deepseek-ai/dsh-agent'
import AgentLoop from '@deepseek-ai/dsh-agent-loop'
import CommandRegistry from '@deepseek-ai/dsh-commands'
import JsonlSessionPersistence from '@deepseek-ai/dsh-session-persistence-jsonl'
import SessionProjectionRegistry from '@deepseek-ai/dsh-session-projection'
import TokenMeter from '@deepseek-ai/dsh-token-meter'
import BasicCompactionEngine from '@deepseek-ai/dsh-compaction-basic'
import AcpmemMemory from '../../src/index.js'

export const PROVIDER = 'scripted'
export const MODEL = 'scripted-model'
export const SUMMARY = 'Checkpoint: the user decided that releases are cut only from release/* branches, because hotfixes must never carry unreviewed main commits.'

/** A text reply. */
export function say(text) {
  return { text }
}

/** A reply that calls tools: `[name, args]` pairs. */
export function call(...calls) {
  return { calls }
}

let callCounter = 0

/** What a provider would report as the prompt size: about four characters a token. */
function inputTokensOf(options) {
  return Math.ceil((JSON.stringify(options.messages ?? []).length + (options.system ?? '').length) / 4)
}

function chunksOf(step, inputTokens = 50) {
  if (step.calls !== undefined) {
    const chunks = []
    step.calls.forEach(([name, args], index) => {
      callCounter += 1
      const id = `call_${callCounter}`
      const argumentsText = JSON.stringify(args)
      chunks.push({ type: 'block-start', index, blockType: 'tool-call' })
      chunks.push({ type: 'tool-call-delta', index, id, name, argumentsDelta: argumentsText })
      chunks.push({ type: 'block-end', index, block: { type: 'tool-call', id, name, arguments: argumentsText } })
    })
    chunks.push({ type: 'usage', usage: { inputTokens, outputTokens: 10 } })
    chunks.push({ type: 'finish', reason: { kind: 'tool-calls' } })
    return chunks
  }
  const text = step.text
  return [
    { type: 'block-start', index: 0, blockType: 'text' },
    { type: 'text-delta', index: 0, text },
    { type: 'block-end', index: 0, block: { type: 'text', text } },
    { type: 'usage', usage: { inputTokens, outputTokens: Math.ceil(text.length / 4) } },
    { type: 'finish', reason: { kind: 'stop' } },
  ]
}

/**
 * The scripted model. `script` is a list of steps (`say(...)`, `call(...)`,
 * or a function of the request returning one); compaction requests are
 * answered with {@link SUMMARY} and do not use the script.
 */
export class ScriptedAdapter extends LlmAdapter {
  constructor(script, contextWindow) {
    super()
    this.script = [...script]
    this.contextWindow = contextWindow
    /** Every conversation request, as sent. */
    this.requests = []
    /** Every compaction (summarization) request. */
    this.compactions = []
  }

  resolveModel(provider, model) {
    return Promise.resolve({ provider, id: model, name: model, context: { contextWindow: this.contextWindow } })
  }

  async * stream(options) {
    if (options.purpose === 'compaction') {
      this.compactions.push(options)
      yield * chunksOf(say(SUMMARY))
      return
    }
    this.requests.push(options)
    let step = this.script.shift()
    if (typeof step === 'function') step = step(options, this.requests)
    if (step === undefined) step = say('(the script is over)')
    yield * chunksOf(step, inputTokensOf(options))
  }
}

/** Tool results the model received, in order: `{ name, text }`. */
export function toolResults(session) {
  const names = new Map()
  const out = []
  for (const event of session.events) {
    if (event.type === 'assistant/message') {
      for (const block of event.data.message.content) if (block.type === 'tool-call') names.set(block.id, block.name)
    }
    if (event.type === 'tool/result') {
      const block = event.data.message.content[0]
      const text = (block?.content ?? []).filter((b) => b.type === 'text').map((b) => b.text).join('\n')
      out.push({ name: names.get(block?.toolCallId) ?? '?', text, seq: event.seq })
    }
  }
  return out
}

/**
 * Compose a host. `plugin` is the acpmem-dsh config (undefined: not mounted);
 * `compaction` the dsh-compaction-basic config (undefined: not mounted);
 * `extraPlugins` are mounted before acpmem-dsh (a stand-in for another
 * plugin of the deployment).
 */
export async function host({ root, plugin, compaction, contextWindow = 100_000, script = [], extraPlugins = [] }) {
  const ctx = new Context()
  const warnings = []
  ctx.logger.exporter({ levels: { default: 3 }, export: (message) => { if (message.type === 'warn' || message.type === 'error') warnings.push(message) } })
  await ctx.plugin(LlmRuntime)
  await ctx.plugin(SessionStore)
  await ctx.plugin(SystemPrompt)
  await ctx.plugin(ToolRuntime)
  await ctx.plugin(AgentRegistry)
  await ctx.plugin(CommandRegistry)
  await ctx.plugin(JsonlSessionPersistence, { root, writeBatchMaxDelayMs: 5 })
  const adapter = new ScriptedAdapter(script, contextWindow)
  ctx.llm.registerAdapter([PROVIDER], adapter)
  if (compaction !== undefined) {
    await ctx.plugin(SessionProjectionRegistry)
    await ctx.plugin(TokenMeter)
    await ctx.plugin(BasicCompactionEngine, compaction)
  }
  for (const [extra, config] of extraPlugins) await ctx.plugin(extra, config)
  if (plugin !== undefined) await ctx.plugin(AcpmemMemory, plugin)
  await ctx.plugin(AgentLoop, { agents: [] })
  return {
    ctx,
    adapter,
    warnings,
    /** Warnings as text. */
    warningTexts: () => warnings.map((message) => message.args.map(String).join(' ')),
    /** Start a session with this id in `cwd`. */
    async session(id, cwd) {
      const handle = await ctx.agents.create({
        sessionId: SessionId(id),
        meta: { cwd },
        agentOptions: { provider: PROVIDER, model: MODEL },
      })
      const agent = handle.agent
      return {
        agent,
        handle,
        /** One user turn, run to the end. */
        async user(text) {
          agent.followup(createUserMessage({ content: [{ type: 'text', text }], source: { kind: 'user' } }))
          await new Promise((resolve) => setImmediate(resolve))
          await agent.whenIdle()
        },
        /** A slash command, as a UI adapter runs it. */
        async command(line) {
          const execution = await ctx.commands.execute(agent, line, [], new AbortController().signal)
          return execution?.result
        },
        /** The session's log on disk. */
        transcript() {
          return ctx.sessionPersistence.locate(agent.session.header).path
        },
        async close() {
          await ctx.sessions.flush(agent.session)
          await handle.dispose()
        },
      }
    },
    async close() {
      await ctx.fiber.dispose()
    },
  }
}
