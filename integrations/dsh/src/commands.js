// @ts-check
/**
 * `/acp memory list` (and `/acp memory recall <words>`) for the person at the
 * keyboard. The answer goes to the UI, never into the model's history.
 *
 * billion-context-dsh owns the global `/acp` command, so this one is
 * registered in each agent's own scope, where it shadows the global one: a
 * line starting `memory` is answered here, any other line is handed to the
 * global `/acp` when there is one (status, compress, decompress keep
 * working), and the two plugins can be mounted in any order.
 * @module acpmem-dsh/commands
 */

import { failureLine } from './acp.js'

/**
 * @param {{ runAcp: Function, available: () => string | null, globalAcp: () => object | undefined }} env
 *   `available()` is null when acpmem answers, else the reason it does not.
 */
export function memoryCommand(env) {
  return {
    name: 'acp',
    description: 'acpmem long-term memory: /acp memory list | /acp memory recall <words>'
      + ' (other /acp lines go to the compression plugin, when one is mounted).',
    handler: async (invocation) => {
      const raw = invocation.rawInput.trim()
      const words = raw.split(/\s+/u)
      if (words[0] !== 'memory') {
        const global = env.globalAcp()
        if (global !== undefined) return global.handler(invocation)
        return { kind: 'error', text: `unknown /acp subcommand "${words[0] ?? ''}" — use /acp memory list | /acp memory recall <words>` }
      }
      const reason = env.available()
      if (reason !== null) return { kind: 'error', text: `acpmem is not available: ${reason}` }
      const sub = words[1] ?? 'list'
      let argv
      if (sub === 'list') argv = ['list']
      else if (sub === 'recall' && words.length > 2) argv = ['recall', `--session=${invocation.agent.session.id}`, '--', raw.replace(/^memory\s+recall\s+/u, '')]
      else return { kind: 'error', text: `/acp memory ${sub}: use /acp memory list | /acp memory recall <words>` }
      const result = await env.runAcp(argv, { signal: invocation.signal })
      if (!result.ok) return { kind: 'error', text: failureLine(result) }
      return { kind: 'success', text: result.stdout.replace(/\s+$/u, '') }
    },
  }
}
