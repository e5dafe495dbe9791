// @ts-check
/**
 * The resident index in the system prompt.
 *
 * `acp memory list --format prompt --session <id>` is asked once per session,
 * before its first step, and the text is kept: every request of the session
 * carries the same bytes (acpmem freezes it per session too), so the
 * provider's prompt cache keeps hitting. The text reaches the prompt as the
 * value of a prompt variable, never as section text: DSH interpolates
 * `{{...}}` in section text strictly, and a memory may well contain braces.
 * @module acpmem-dsh/system-prompt
 */

/** The section and the variable that carries the index. */
export const INDEX_SECTION = 'acpmem-index'
export const INDEX_VARIABLE = 'acpmem_index'

/**
 * @param {{ runAcp: Function, reportFailure: Function }} env
 */
export function makeIndexCache(env) {
  /** @type {Map<string, string>} */
  const texts = new Map()
  /** @type {Map<string, Promise<void>>} */
  const pending = new Map()
  return {
    /** The frozen text of a session ('' when it has none). */
    text(sessionId) {
      return texts.get(String(sessionId)) ?? ''
    },
    /** Ask for the session's index unless it was asked already. */
    ensure(sessionId, signal) {
      const id = String(sessionId)
      if (texts.has(id)) return Promise.resolve()
      let job = pending.get(id)
      if (job === undefined) {
        job = (async () => {
          const result = await env.runAcp(['list', '--format=prompt', `--session=${id}`], { signal })
          if (result.ok) texts.set(id, result.stdout.replace(/\s+$/u, ''))
          else {
            texts.set(id, '')
            env.reportFailure(result, 'the memory index')
          }
        })().finally(() => pending.delete(id))
        pending.set(id, job)
      }
      return job
    },
  }
}

/**
 * Register the section and its variable on a `systemPrompt` service.
 * @param {object} systemPrompt - `ctx.systemPrompt`.
 * @param {ReturnType<typeof makeIndexCache>} cache
 * @param {number} order
 */
export function registerIndexSection(systemPrompt, cache, order) {
  systemPrompt.variable(INDEX_VARIABLE, (context) => {
    const session = context?.agent?.session
    return session === undefined ? '' : cache.text(session.id)
  })
  systemPrompt.section({ name: INDEX_SECTION, order, text: `{{${INDEX_VARIABLE}}}` })
}
