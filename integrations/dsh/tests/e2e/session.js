/**
 * One DSH session, run to its end in a process of its own: the driver the
 * Python end-to-end tests (tests/test_dsh_plugin.py) start, once per session,
 * so that a second session of the same project is a new host process, as it
 * is for a user.
 *
 *   node session.js scenario.json report.json
 *
 * scenario.json: { sessions, cwd, id, turns: [text], script: [{ say } | { call: [[name, args]] }],
 *                  plugin?: acpmem-dsh config (absent: not mounted), compaction?: dsh-compaction-basic config,
 *                  contextWindow?: number }
 * report.json:   { requests: [{ system, tools, messages: [{ role, plugin, text }] }],
 *                  toolResults: [{ name, text, seq }], replies: [text], warnings: [text],
 *                  transcript, compactions }
 */

import { readFileSync, writeFileSync } from 'node:fs'
import { host, say, call, toolResults } from '../support/harness.js'

const [scenarioPath, reportPath] = process.argv.slice(2)
const scenario = JSON.parse(readFileSync(scenarioPath, 'utf8'))
const textOf = (message) => (message.content ?? []).filter((b) => b.type === 'text').map((b) => b.text).join('\n')

const h = await host({
  root: scenario.sessions,
  plugin: scenario.plugin,
  compaction: scenario.compaction,
  contextWindow: scenario.contextWindow,
  script: scenario.script.map((step) => (step.call !== undefined ? call(...step.call) : say(step.say))),
})
const s = await h.session(scenario.id, scenario.cwd)
for (const turn of scenario.turns) await s.user(turn)
const events = s.agent.session.events
const report = {
  requests: h.adapter.requests.map((request) => ({
    system: request.system,
    tools: (request.tools ?? []).map((tool) => tool.name),
    messages: request.messages.map((m) => ({ role: m.role, plugin: m.source?.plugin ?? null, text: textOf(m) })),
  })),
  toolResults: toolResults(s.agent.session),
  replies: events.filter((e) => e.type === 'assistant/message').map((e) => textOf(e.data.message)).filter(Boolean),
  warnings: h.warningTexts(),
  transcript: s.transcript(),
  compactions: events.filter((e) => e.type === 'compaction/summary').length,
}
await s.close()
await h.close()
writeFileSync(reportPath, JSON.stringify(report, null, 1))
