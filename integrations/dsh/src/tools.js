// @ts-check
/**
 * `memory_commit` and `memory_recall` as DSH tools.
 *
 * The names, descriptions and parameters are acpmem's own
 * (`acp memory tools --for main --format dsh`: DSH `defineTool` parameter
 * maps, not JSON Schema), so the model reads the same texts in every host.
 * A call becomes one `acp memory` command: `commit` gets the session's own
 * log (`session.jsonl.zstd`, flushed first) and the seq of the assistant
 * message that made the call, so the fork reads exactly what the model saw.
 * @module acpmem-dsh/tools
 */

import { defineTool } from '@deepseek-ai/dsh-tools'
import { failureLine } from './acp.js'

const PARAMETER_TYPES = new Set(['string', 'integer', 'number', 'boolean', 'array', 'json'])

/**
 * Check acpmem's export against what `defineTool` takes, keeping only the
 * keys DSH knows. A shape this plugin does not understand is refused whole:
 * a half-declared tool is worse than none.
 * @param {unknown} exported - the parsed JSON of `acp memory tools --format dsh`.
 * @returns {Map<string, { description: string, parameters: Record<string, object> }>}
 */
export function parseToolExport(exported) {
  if (!Array.isArray(exported)) throw new Error('acp memory tools: expected a JSON list of tools')
  const tools = new Map()
  for (const tool of exported) {
    if (tool === null || typeof tool !== 'object' || typeof tool.name !== 'string' || typeof tool.description !== 'string') {
      throw new Error('acp memory tools: a tool without a name or description')
    }
    const parameters = {}
    for (const [key, spec] of Object.entries(tool.parameters ?? {})) {
      if (spec === null || typeof spec !== 'object' || !PARAMETER_TYPES.has(spec.type)) {
        throw new Error(`acp memory tools: ${tool.name}.${key} has a parameter type DSH does not take (${JSON.stringify(spec?.type)})`)
      }
      const mapped = { type: spec.type }
      if (typeof spec.description === 'string') mapped.description = spec.description
      if (spec.required === true) mapped.required = true
      if (Array.isArray(spec.enum)) mapped.enum = [...spec.enum]
      if (spec.items !== undefined) mapped.items = spec.items
      parameters[key] = mapped
    }
    tools.set(tool.name, { description: tool.description, parameters })
  }
  for (const name of ['memory_commit', 'memory_recall']) {
    if (!tools.has(name)) throw new Error(`acp memory tools: no ${name} in the export`)
  }
  return tools
}

/**
 * The text output every memory tool returns: what acpmem printed.
 * @returns {{ schema: { type: 'object', properties: { text: { type: 'string' } }, additionalProperties: false },
 *   render: (args: unknown, value: { text: string }) => { type: 'text', text: string }[] }}
 */
function textOutput() {
  return {
    schema: { type: 'object', properties: { text: { type: 'string' } }, additionalProperties: false },
    render: (_args, value) => [{ type: 'text', text: value.text }],
  }
}

/**
 * The seq of the assistant message carrying this call — the end of what the
 * model had seen when it decided to remember. Falls back to the last event.
 * @param {import('@deepseek-ai/dsh-session').Session} session
 * @param {string} callId
 */
export function callSeq(session, callId) {
  const events = session.events
  for (let index = events.length - 1; index >= 0; index -= 1) {
    const event = events[index]
    if (event.type !== 'assistant/message') continue
    const content = event.data?.message?.content ?? []
    if (content.some((block) => block.type === 'tool-call' && block.id === callId)) return event.seq
  }
  return events.length - 1
}

/**
 * @typedef {object} ToolEnvironment
 * @property {import('./config.js').AcpmemConfig} config
 * @property {(args: string[], options?: { signal?: AbortSignal, timeoutMs?: number }) => Promise<import('./acp.js').AcpResult>} runAcp
 * @property {(kind: string, message: string) => void} warnOnce
 * @property {(session: object) => string | undefined} transcriptOf - the session's log on disk, if the host keeps one.
 * @property {(session: object) => Promise<unknown>} flush - make the log on disk hold every event so far.
 * @property {(result: import('./acp.js').AcpResult, what: string) => void} reportFailure
 */

/**
 * Build the two tools.
 * @param {ToolEnvironment} env
 * @param {ReturnType<typeof parseToolExport>} specs
 */
export function makeTools(env, specs) {
  const commit = specs.get('memory_commit')
  const recall = specs.get('memory_recall')
  return [
    defineTool({
      name: 'memory_commit',
      description: commit.description,
      parameters: commit.parameters,
      output: textOutput(),
      async execute(args, exec) {
        return { text: await runCommit(env, args, exec) }
      },
    }),
    defineTool({
      name: 'memory_recall',
      description: recall.description,
      parameters: recall.parameters,
      output: textOutput(),
      isConcurrencySafe: () => true,
      async execute(args, exec) {
        return { text: await runRecall(env, args, exec) }
      },
    }),
  ]
}

/** @param {ToolEnvironment} env */
async function runCommit(env, args, exec) {
  const session = exec.agent?.session
  if (session === undefined) return 'Error: memory_commit runs only inside an agent session.'
  const transcript = env.transcriptOf(session)
  if (transcript === undefined) {
    const line = 'Error: this DSH host keeps no session log on disk, so the memory cannot be distilled from it; mount the JSONL session persistence (@deepseek-ai/dsh-session-persistence-jsonl).'
    env.warnOnce('no-transcript', `acpmem: ${line}`)
    return line
  }
  await env.flush(session)
  const argv = [
    'commit',
    `--type=${args.type}`,
    `--note=${args.note}`,
    `--importance=${args.importance}`,
    `--session=${session.id}`,
    `--seq=${callSeq(session, exec.callId)}`,
    `--transcript=${transcript}`,
  ]
  if (typeof args.block === 'string' && args.block.length > 0) argv.push(`--block=${args.block}`)
  if (env.config.extractor !== undefined) argv.push(`--extractor=${env.config.extractor}`)
  if (env.config.wait) argv.push('--wait')
  const result = await env.runAcp(argv, { signal: exec.signal, timeoutMs: env.config.wait ? env.config.commitTimeoutMs : undefined })
  if (!result.ok) {
    env.reportFailure(result, 'memory_commit')
    return failureLine(result)
  }
  // A request that was recorded but could not be extracted (--wait) exits 0
  // and says why on an `Error:` line: the model reads it, the user is warned.
  if (/^Error:/mu.test(result.stdout)) env.reportFailure({ ...result, failure: 'failed', stderr: failureLine(result) }, 'memory_commit')
  return result.stdout.trim()
}

/** @param {ToolEnvironment} env */
async function runRecall(env, args, exec) {
  const argv = ['recall']
  const session = exec.agent?.session
  if (session !== undefined) argv.push(`--session=${session.id}`)
  if (Number.isInteger(args.limit)) argv.push(`--limit=${args.limit}`)
  argv.push('--', String(args.query))
  const result = await env.runAcp(argv, { signal: exec.signal })
  if (!result.ok) {
    env.reportFailure(result, 'memory_recall')
    return failureLine(result)
  }
  return result.stdout.trim() || 'No memory matches.'
}
