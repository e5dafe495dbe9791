// @ts-check
/**
 * The memories the user's message is about, in the step that message enters.
 *
 * DSH's `agent/pre-step` waterfall hands a listener the messages taken from
 * the inbox for a step: the user's message at the first step of a turn (and
 * any steering later). For those with `source.kind: "user"` the plugin asks
 * `acp memory surface --session=<id> --prompt=-` (the message on standard
 * input) and puts what it prints right after them, as a user message of its
 * own (`source.plugin: "acpmem-surface"`). acpmem decides what is new: each
 * entry once per session, within its byte budgets, nothing at all under
 * `[surface] prompt = false`. The message goes into the session's log like any
 * other, so later requests repeat it as history and the system prompt (the
 * frozen index) stays the same bytes for the prompt cache.
 * @module acpmem-dsh/surface
 */

import { createUserMessage } from '@deepseek-ai/dsh-llm'

/** The `source.plugin` of the messages that carry surfaced memories. */
export const SURFACE_PLUGIN = 'acpmem-surface'

function textOf(message) {
  return (message.content ?? []).filter((block) => block.type === 'text').map((block) => block.text).join('\n')
}

/**
 * @param {{ runAcp: Function, reportFailure: Function }} env
 */
export function makeSurfacing(env) {
  return {
    /**
     * The messages entering a step, each run of the user's own messages
     * followed by the memories they are about (unchanged when none are new).
     * @param {object} session
     * @param {import('@deepseek-ai/dsh-llm').UserMessage[]} messages
     * @param {AbortSignal} [signal]
     * @returns {Promise<import('@deepseek-ai/dsh-llm').UserMessage[]>}
     */
    async place(session, messages, signal) {
      let last = -1
      for (let index = messages.length - 1; index >= 0; index -= 1) {
        if (messages[index]?.source?.kind === 'user') { last = index; break }
      }
      if (last < 0) return messages
      const prompt = messages.filter((m) => m?.source?.kind === 'user').map(textOf).join('\n\n')
      if (prompt.trim() === '') return messages
      const result = await env.runAcp(['surface', `--session=${session.id}`, '--prompt=-'], { signal, input: prompt })
      if (!result.ok) {
        env.reportFailure(result, 'surfacing the memories of the prompt')
        return messages
      }
      const text = result.stdout.replace(/\s+$/u, '')
      if (text === '') return messages
      const memory = createUserMessage({ content: [{ type: 'text', text }], source: { kind: 'plugin', plugin: SURFACE_PLUGIN } })
      return [...messages.slice(0, last + 1), memory, ...messages.slice(last + 1)]
    },
  }
}
