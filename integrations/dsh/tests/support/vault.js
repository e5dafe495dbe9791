/**
 * Real acpmem vaults for the tests, made with the real `acp` command
 * (`$ACPMEM_ACP`, else `acp` on PATH — `.ci/run` puts the project's own
 * install there).
 */

import { execFileSync } from 'node:child_process'
import { mkdtempSync, mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

export const ACP = process.env.ACPMEM_ACP || 'acp'

// Like the Python suite: a HOME of its own (so the user vault, ~/.acp-memory, is a fresh folder that does not exist)
// and no ambient vault or model settings, for every acp call the tests and the plugin make.
process.env.HOME = mkdtempSync(join(tmpdir(), 'acpmem-dsh-home-'))
// Every folder made here is removed when the test file's process ends (the runner runs each file in its own),
// after the detached helpers acpmem started for them (a worker waiting to retry a request) are ended.
const made = [process.env.HOME]
process.on('exit', () => {
  for (const pid of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    let cmdline = ''
    try { cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8') } catch { continue }
    if (Number(pid) !== process.pid && made.some((dir) => cmdline.includes(dir))) {
      try { process.kill(Number(pid), 'SIGKILL') } catch {}
    }
  }
  for (const dir of made) rmSync(dir, { recursive: true, force: true })
})
for (const name of ['ACPMEM_VAULT', 'ACPMEM_USER_VAULT', 'ACPMEM_SESSION', 'OPENAI_API_KEY', 'OPENAI_BASE_URL', 'OPENAI_MODEL']) delete process.env[name]

/** Run `acp memory ...` and return its stdout (throws on a non-zero exit). */
export function acp(args, options = {}) {
  return execFileSync(ACP, ['memory', ...args], { encoding: 'utf8', ...options })
}

/** A fresh folder with a project vault in it, and a sessions root beside it. */
export function project() {
  const dir = mkdtempSync(join(tmpdir(), 'acpmem-dsh-'))
  made.push(dir)
  const cwd = join(dir, 'project')
  mkdirSync(cwd)
  acp(['init'], { cwd })
  return { dir, cwd, vault: join(cwd, '.acp-memory'), sessions: join(dir, 'sessions') }
}

/** Write an entry verbatim; returns its id. */
export function remember(vault, text, { type = 'decision', importance = 7 } = {}) {
  const out = JSON.parse(acp(['remember', text, `--type=${type}`, `--importance=${importance}`, `--vault=${vault}`, '--json']))
  return out.id ?? out.entry?.id ?? out.entries?.[0]?.id
}
