// @ts-check
/**
 * The plugin's configuration, with its defaults.
 * @module acpmem-dsh/config
 */

/**
 * @typedef {object} AcpmemConfig
 * @property {string} acp - the `acp` command (a name looked up on PATH, or a path). Default `$ACPMEM_ACP`, else `acp`.
 * @property {string} [vault] - the vault folder; default: acpmem's own lookup ($ACPMEM_VAULT, else the nearest .acp-memory/ above the host's working folder).
 * @property {number} timeoutMs - the deadline of one `acp` call (a `memory_commit --wait` gets `commitTimeoutMs`).
 * @property {number} commitTimeoutMs
 * @property {boolean} wait - `memory_commit` extracts before it returns (`--wait`); default false: the fork runs in acpmem's background worker.
 * @property {'auto' | 'llm' | 'offline'} [extractor] - passed to `acp memory commit --extractor`; default: the vault's setting.
 * @property {'en' | 'zh'} [lang] - language of the tool texts and the guidance; default: the vault's.
 * @property {boolean} tools - register memory_commit and memory_recall.
 * @property {boolean} index - put the resident index in the system prompt.
 * @property {boolean} surface - after each user message, the memories it is about (`acp memory surface --prompt`; the vault's `[surface] prompt = false` turns it off too).
 * @property {boolean} nudge - append the memory guidance after the ACP nudge and after a compaction.
 * @property {boolean} command - answer `/acp memory ...`.
 * @property {number} indexOrder - the system-prompt section order of the index.
 * @property {boolean} enabled - false turns the whole plugin off.
 */

/** @type {Omit<AcpmemConfig, 'acp'>} */
const DEFAULTS = {
  timeoutMs: 20_000,
  commitTimeoutMs: 180_000,
  wait: false,
  tools: true,
  index: true,
  surface: true,
  nudge: true,
  command: true,
  indexOrder: 50,
  enabled: true,
}

const EXTRACTORS = new Set(['auto', 'llm', 'offline'])

/**
 * Resolve a partial configuration. Bad values are refused here, at mount,
 * with the key named — not at the first turn.
 * @param {Partial<AcpmemConfig>} [config]
 * @returns {AcpmemConfig}
 */
export function resolveConfig(config = {}) {
  const merged = { ...DEFAULTS, acp: process.env.ACPMEM_ACP || 'acp', ...stripUndefined(config) }
  if (typeof merged.acp !== 'string' || merged.acp.length === 0) throw new Error('acpmem-dsh: config.acp must be a command name or path')
  for (const key of ['timeoutMs', 'commitTimeoutMs', 'indexOrder']) {
    if (!Number.isFinite(merged[key])) throw new Error(`acpmem-dsh: config.${key} must be a number`)
  }
  if (merged.extractor !== undefined && !EXTRACTORS.has(merged.extractor)) {
    throw new Error(`acpmem-dsh: config.extractor must be one of auto, llm, offline (got ${JSON.stringify(merged.extractor)})`)
  }
  return merged
}

/** @param {object} value */
function stripUndefined(value) {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined))
}
