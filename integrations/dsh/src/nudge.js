// @ts-check
/**
 * The memory guidance, where compression happens.
 *
 * billion-context-dsh injects its nudge at `agent/pre-step` as a user message
 * with `source.plugin: "acp-nudge"`; acpmem's guidance (`acp memory nudge`:
 * stable conclusions → memory_commit, consumed content → compress) goes right
 * after it, as a message of its own. After a compaction that came without a
 * nudge (DSH's own `dsh-compaction-basic`, or a compress the model made
 * unprompted) the guidance is added once at the next step, naming the newest
 * block, so the model can keep it with `memory_commit({ block })`.
 * @module acpmem-dsh/nudge
 */

import { createUserMessage } from '@deepseek-ai/dsh-llm'

/** The `source.plugin` of acpmem's guidance messages. */
export const GUIDANCE_PLUGIN = 'acpmem'
const ACP_NUDGE_PLUGIN = 'acp-nudge'

/**
 * The kernel's voice a nudge text was written in, from the trigger line
 * acp-kernel's `renderNudgeText` puts in it: a tier-2/3 trigger (`[TIER 2
 * DISTILLATION TRIGGER]`, `[EMERGENCY — TIER 3 CONDENSATION]`), the
 * emergency header (`Context limit reached`), else the gentle efficiency note.
 */
export function voiceOf(text) {
  if (/\[(?:EMERGENCY — )?TIER [23] (?:DISTILLATION|CONDENSATION)/u.test(text)) return 'tier'
  if (/Context limit reached/u.test(text)) return 'emergency'
  return 'gentle'
}

function textOf(message) {
  return (message.content ?? []).filter((block) => block.type === 'text').map((block) => block.text).join('\n')
}

function isAcpNudge(message) {
  return message?.source?.kind === 'plugin' && message.source.plugin === ACP_NUDGE_PLUGIN
}

/**
 * The compression blocks in a session log, in order: `kernelBlockId` where
 * the ACP engine wrote one, else `b<N>` by position (DSH's own compaction
 * numbers nothing; its summaries are rolling tier-1 blocks).
 * @param {readonly object[]} events
 * @returns {string[]}
 */
export function blockIds(events) {
  const ids = []
  for (const event of events) {
    if (event.type !== 'compaction/summary') continue
    const kernel = event.data?.kernelBlockId
    ids.push(typeof kernel === 'string' && kernel.length > 0 ? kernel : `b${ids.length + 1}`)
  }
  return ids
}

/**
 * @param {{ runAcp: Function, reportFailure: Function, lang?: string }} env
 */
export function makeGuidance(env) {
  /** @type {Map<string, Promise<string>>} */
  const texts = new Map()
  /** Per session: how many compaction summaries were already offered to memory. */
  const offered = new Map()

  function guidance(voice, signal) {
    let job = texts.get(voice)
    if (job === undefined) {
      const argv = ['nudge', `--voice=${voice}`]
      if (env.lang !== undefined) argv.push(`--lang=${env.lang}`)
      job = env.runAcp(argv, { signal }).then((result) => {
        if (result.ok) return result.stdout.replace(/\s+$/u, '')
        texts.delete(voice)
        env.reportFailure(result, 'the memory guidance')
        return ''
      })
      texts.set(voice, job)
    }
    return job
  }

  function message(text) {
    return createUserMessage({ content: [{ type: 'text', text }], source: { kind: 'plugin', plugin: GUIDANCE_PLUGIN } })
  }

  return {
    /** Remember where a session stands before its first step (a resumed session is not nudged for old blocks). */
    start(session) {
      if (!offered.has(session.id)) offered.set(session.id, blockIds(session.events).length)
    },
    /**
     * The messages entering a step, with the guidance added where it belongs.
     * @param {object} session
     * @param {import('@deepseek-ai/dsh-llm').UserMessage[]} messages
     * @param {AbortSignal} [signal]
     * @returns {Promise<import('@deepseek-ai/dsh-llm').UserMessage[]>}
     */
    async place(session, messages, signal) {
      const blocks = blockIds(session.events)
      const seen = offered.get(session.id) ?? 0
      offered.set(session.id, blocks.length)
      let at = -1
      for (let index = messages.length - 1; index >= 0; index -= 1) {
        if (isAcpNudge(messages[index])) { at = index; break }
      }
      if (at >= 0) {
        const text = await guidance(voiceOf(textOf(messages[at])), signal)
        if (text === '') return messages
        return [...messages.slice(0, at + 1), message(text), ...messages.slice(at + 1)]
      }
      if (blocks.length > seen) {
        const text = await guidance('gentle', signal)
        if (text === '') return messages
        return [...messages, message(`${text}\nNewest compression block: ${blocks[blocks.length - 1]}.`)]
      }
      return messages
    },
  }
}
