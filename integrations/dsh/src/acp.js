// @ts-check
/**
 * Running the `acp` command: the one way this plugin talks to acpmem.
 *
 * Every call is a child process with a deadline; nothing here throws for a
 * missing command, a refused request or a timeout — the caller gets an
 * {@link AcpResult} and decides what the model and the user are told.
 * @module acpmem-dsh/acp
 */

import { execFile, spawnSync } from 'node:child_process'

/**
 * @typedef {object} AcpResult
 * @property {boolean} ok - the command ran and exited 0.
 * @property {string} stdout
 * @property {string} stderr
 * @property {number | null} code - the exit status (null when it never ran or was killed).
 * @property {'missing' | 'timeout' | 'failed' | null} failure - why it is not ok.
 */

/**
 * The runner bound to one configuration.
 * @param {{ acp: string, vault?: string, timeoutMs: number, env?: Record<string, string> }} config
 */
export function makeRunner(config) {
  /** @param {string[]} args */
  const argvOf = (args) => (config.vault ? ['memory', `--vault=${config.vault}`, ...args] : ['memory', ...args])
  /**
   * Run `acp memory <args>`.
   * @param {string[]} args - the words after `acp memory`.
   * @param {{ signal?: AbortSignal, timeoutMs?: number, input?: string }} [options] - `input` goes to its standard input.
   * @returns {Promise<AcpResult>}
   */
  const runAcp = function runAcp(args, options = {}) {
    const argv = argvOf(args)
    return new Promise((resolve) => {
      const child = execFile(config.acp, argv, {
        timeout: options.timeoutMs ?? config.timeoutMs,
        maxBuffer: 16 * 1024 * 1024,
        encoding: 'utf8',
        env: config.env ?? process.env,
        signal: options.signal,
        windowsHide: true,
      }, (error, stdout, stderr) => {
        if (error === null) {
          resolve({ ok: true, stdout, stderr, code: 0, failure: null })
          return
        }
        const err = /** @type {NodeJS.ErrnoException & { killed?: boolean, code?: unknown }} */ (error)
        if (err.code === 'ENOENT' || err.code === 'EACCES') {
          resolve({ ok: false, stdout: '', stderr: `${config.acp}: command not found`, code: null, failure: 'missing' })
        } else if (err.killed) {
          resolve({ ok: false, stdout, stderr: stderr || `Error: ${config.acp} did not answer within ${options.timeoutMs ?? config.timeoutMs} ms`, code: null, failure: 'timeout' })
        } else {
          resolve({ ok: false, stdout, stderr, code: typeof err.code === 'number' ? err.code : null, failure: 'failed' })
        }
      })
      if (options.input !== undefined) {
        child.stdin?.on('error', () => {}) // a command that exits before reading it: its result says why
        child.stdin?.end(options.input)
      }
    })
  }
  /**
   * The same, blocking: for the one call made while the plugin mounts.
   * @param {string[]} args
   * @returns {AcpResult}
   */
  runAcp.sync = function runAcpSync(args) {
    const run = spawnSync(config.acp, argvOf(args), {
      timeout: config.timeoutMs,
      maxBuffer: 16 * 1024 * 1024,
      encoding: 'utf8',
      env: config.env ?? process.env,
      windowsHide: true,
    })
    if (run.error !== undefined) {
      const code = /** @type {NodeJS.ErrnoException} */ (run.error).code
      if (code === 'ENOENT' || code === 'EACCES') return { ok: false, stdout: '', stderr: `${config.acp}: command not found`, code: null, failure: 'missing' }
      if (code === 'ETIMEDOUT') return { ok: false, stdout: run.stdout ?? '', stderr: `Error: ${config.acp} did not answer within ${config.timeoutMs} ms`, code: null, failure: 'timeout' }
      return { ok: false, stdout: run.stdout ?? '', stderr: String(run.error.message), code: null, failure: 'failed' }
    }
    return { ok: run.status === 0, stdout: run.stdout, stderr: run.stderr, code: run.status, failure: run.status === 0 ? null : 'failed' }
  }
  return runAcp
}

/**
 * The line to show for a failed call: acpmem's own `Error: ...` line when it
 * printed one, else the first line of what it said.
 * @param {AcpResult} result
 * @returns {string}
 */
export function failureLine(result) {
  const text = `${result.stderr}\n${result.stdout}`
  const line = text.split('\n').map((l) => l.trim()).find((l) => l.startsWith('Error:'))
    ?? text.split('\n').map((l) => l.trim()).find((l) => l.length > 0)
    ?? `acp exited with status ${result.code}`
  return line.length > 400 ? `${line.slice(0, 400)}…` : line
}
