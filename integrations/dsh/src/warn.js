// @ts-check
/**
 * One visible warning per kind of trouble, for the life of the plugin: a user
 * whose acpmem is missing hears it once, not on every turn.
 * @module acpmem-dsh/warn
 */

/**
 * @param {{ warn: (message: string) => void }} logger
 * @returns {(kind: string, message: string) => void}
 */
export function makeWarnOnce(logger) {
  const said = new Set()
  return (kind, message) => {
    if (said.has(kind)) return
    said.add(kind)
    logger.warn(message)
  }
}

/** The kind a failure counts as: every "acp is not there" is one warning, whatever call found it. */
export function failureKind(result) {
  return result.failure === 'missing' ? 'missing' : `failed:${result.stderr.split('\n')[0]}`
}
