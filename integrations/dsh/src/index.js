// @ts-check
/**
 * acpmem-dsh — acpmem's cross-session long-term memory inside the DeepSeek
 * Harness, as a Cordis plugin beside billion-context-dsh:
 *
 *  - `memory_commit` and `memory_recall`, declared with `defineTool` from the
 *    schemas acpmem exports, each call one `acp memory` command; a commit
 *    hands acpmem the session's own `session.jsonl.zstd` and the seq of the
 *    call, and acpmem's fork distils the entry from exactly what the model saw;
 *  - the frozen resident index in the system prompt, the same bytes for the
 *    whole session;
 *  - after each user message, the memories it is about (`acp memory surface
 *    --prompt`), as a message of its own in the session;
 *  - acpmem's memory guidance right after the ACP nudge (and once after a
 *    compaction that came without one);
 *  - `/acp memory list`.
 *
 * It never breaks the agent: acpmem missing, no vault, or a failing command
 * gives one warning in the host's log and the session goes on without memory.
 *
 * ```yaml
 * - id: acpmem
 *   name: 'acpmem-dsh'
 *   config:
 *     acp: /home/me/.local/bin/acp
 * ```
 * @module acpmem-dsh
 */

import { makeRunner, failureLine } from './acp.js'
import { resolveConfig } from './config.js'
import { makeWarnOnce, failureKind } from './warn.js'
import { makeTools, parseToolExport } from './tools.js'
import { makeIndexCache, registerIndexSection, INDEX_VARIABLE } from './system-prompt.js'
import { makeGuidance } from './nudge.js'
import { makeSurfacing } from './surface.js'
import { memoryCommand } from './commands.js'

export { resolveConfig } from './config.js'
export { parseToolExport, callSeq } from './tools.js'
export { blockIds, voiceOf, GUIDANCE_PLUGIN } from './nudge.js'
export { INDEX_SECTION, INDEX_VARIABLE } from './system-prompt.js'
export { SURFACE_PLUGIN } from './surface.js'

/**
 * Call `register(service)` as soon as the service `name` exists: now, or when
 * Cordis announces it (composition rows start concurrently, so a service
 * declared later in the file may not be there yet).
 */
function whenService(ctx, name, register) {
  let done = false
  const attempt = () => {
    if (done) return
    const service = ctx.get(name)
    if (service === undefined) return
    done = true
    register(service)
  }
  attempt()
  if (!done) ctx.on('internal/service', (service) => { if (service === name) attempt() })
}

export default class AcpmemMemory {
  static name = 'acpmem-dsh'

  /**
   * @param {import('@deepseek-ai/cordis').Context} ctx
   * @param {Partial<import('./config.js').AcpmemConfig>} [config]
   */
  constructor(ctx, config = {}) {
    this.config = resolveConfig(config)
    if (!this.config.enabled) return
    const logger = ctx.logger('acpmem')
    const warnOnce = makeWarnOnce(logger)
    const runAcp = makeRunner(this.config)
    /** Why acpmem does not answer (null while it does). */
    this.unavailable = null

    const reportFailure = (result, what) => {
      if (result.failure === 'missing') {
        this.unavailable = `the \`acp\` command was not found (${this.config.acp})`
        warnOnce('missing', `acpmem: the \`acp\` command was not found (${this.config.acp}); this session goes on without long-term memory. Install acpmem (pip install acpmem) or set \`acp\` in the acpmem-dsh config.`)
        return
      }
      warnOnce(failureKind(result), `acpmem: ${what} failed — ${failureLine(result)} (the session goes on without it)`)
    }

    const env = {
      config: this.config,
      runAcp,
      warnOnce,
      reportFailure,
      lang: this.config.lang,
      transcriptOf: (session) => {
        const located = ctx.get('sessionPersistence')?.locate(session.header)
        return located?.kind === 'jsonl' ? located.path : undefined
      },
      flush: (session) => ctx.get('sessions')?.flush(session) ?? Promise.resolve(),
    }

    // The tool schemas come from acpmem itself, read once while the plugin
    // mounts (blocking: a DSH step assembles its tool list before any async
    // hook could add to it, so the tools must be there before the first step).
    if (this.config.tools) this.loadTools(ctx, env)

    const index = makeIndexCache(env)
    if (this.config.index) {
      whenService(ctx, 'systemPrompt', (systemPrompt) => registerIndexSection(systemPrompt, index, this.config.indexOrder))
      // The loop assembles the system prompt before `agent/pre-step`; this
      // waterfall is the async point before each assembly is used, so the
      // index is asked for here (once per session) and put in the variable.
      ctx.on('system-prompt/assemble', async (assembly, context, next) => {
        const session = context?.agent?.session
        if (session !== undefined && this.unavailable === null) {
          await index.ensure(session.id, context.signal)
          assembly.variables[INDEX_VARIABLE] = index.text(session.id)
        }
        return next()
      }, true)
    }
    const guidance = makeGuidance(env)
    const surfacing = makeSurfacing(env)

    // prepend: run outside every other pre-step listener, so `next()` returns
    // the messages billion-context-dsh's nudge (and DSH's compaction) produced.
    ctx.on('agent/pre-step', async (payload, next) => {
      const session = payload.agent.session
      if (this.unavailable === null) guidance.start(session)
      const decision = await next()
      if (decision.kind !== 'enter' || this.unavailable !== null) return decision
      let messages = decision.messages
      if (this.config.surface) messages = await surfacing.place(session, messages, payload.signal)
      if (this.config.nudge) messages = await guidance.place(session, messages, payload.signal)
      return messages === decision.messages ? decision : { ...decision, messages }
    }, true)

    if (this.config.command) {
      const command = memoryCommand({
        runAcp,
        available: () => this.unavailable,
        globalAcp: () => ctx.get('commands')?.find(undefined, 'acp'),
      })
      // Registered in each agent's own scope (a plugin mounted on agent.ctx),
      // where it shadows a global `/acp` instead of colliding with it.
      ctx.on('agent/created', ({ agent }) => {
        if (agent.ctx.get('commands') === undefined) return
        try {
          agent.ctx.plugin({ name: 'acpmem-dsh-command', inject: ['commands'], apply: (scoped) => { scoped.commands.register(command) } })
        } catch (error) {
          warnOnce('command', `acpmem: /acp memory is not available in this agent: ${String(error?.message ?? error)}`)
        }
      })
    }
  }

  /** Read acpmem's tool export and register the two tools. */
  loadTools(ctx, env) {
    const argv = ['tools', '--for=main', '--format=dsh']
    if (this.config.lang !== undefined) argv.push(`--lang=${this.config.lang}`)
    const result = env.runAcp.sync(argv)
    if (!result.ok) {
      env.reportFailure(result, 'loading the memory tools')
      if (result.failure !== 'missing') this.unavailable = failureLine(result)
      return
    }
    let tools
    try {
      tools = makeTools(env, parseToolExport(JSON.parse(result.stdout)))
    } catch (error) {
      this.unavailable = String(error?.message ?? error)
      env.warnOnce('tools', `acpmem: the memory tools could not be declared — ${this.unavailable} (the session goes on without them)`)
      return
    }
    whenService(ctx, 'tools', (registry) => { for (const tool of tools) registry.register(tool) })
  }
}
