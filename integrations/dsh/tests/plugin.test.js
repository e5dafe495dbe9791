/**
 * acpmem-dsh inside the real DSH agent loop (`@deepseek-ai/dsh-*` rc.8), with
 * the real `acp` command and real vaults; only the model is scripted.
 */

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createUserMessage } from '@deepseek-ai/dsh-llm'
import { host, say, call, toolResults } from './support/harness.js'
import { acp, project, remember, ACP } from './support/vault.js'
import { GUIDANCE_PLUGIN, SURFACE_PLUGIN } from '../src/index.js'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { zstdDecompressSync } from 'node:zlib'

const textOf = (message) => message.content.filter((b) => b.type === 'text').map((b) => b.text).join('\n')

test('the two tools reach the model with the parameters acpmem exports', async () => {
  const p = project()
  const h = await host({ root: p.sessions, plugin: { vault: p.vault, acp: ACP }, script: [say('hello')] })
  const s = await h.session('tools-1', p.cwd)
  await s.user('hi')
  const sent = new Map(h.adapter.requests[0].tools.map((tool) => [tool.name, tool]))
  const exported = JSON.parse(acp(['tools', '--for=main', '--format=openai', `--vault=${p.vault}`]))
  assert.deepEqual([...sent.keys()].filter((name) => name.startsWith('memory_')).sort(), ['memory_commit', 'memory_recall'])
  for (const { function: fn } of exported) {
    const tool = sent.get(fn.name)
    assert.equal(tool.description, fn.description)
    assert.deepEqual(Object.keys(tool.parameters.properties).sort(), Object.keys(fn.parameters.properties).sort())
    assert.deepEqual([...(tool.parameters.required ?? [])].sort(), [...(fn.parameters.required ?? [])].sort())
    for (const [key, spec] of Object.entries(fn.parameters.properties)) {
      assert.equal(tool.parameters.properties[key].type, spec.type, `${fn.name}.${key}`)
      assert.equal(tool.parameters.properties[key].description, spec.description, `${fn.name}.${key}`)
      assert.deepEqual(tool.parameters.properties[key].enum, spec.enum, `${fn.name}.${key}`)
    }
  }
  assert.deepEqual(h.warningTexts(), [])
  await s.close()
  await h.close()
})

test('the index is in the system prompt, the same bytes for the whole session; the next session sees the new entry', async () => {
  const p = project()
  const first = remember(p.vault, 'Releases are cut only from release/* branches.')
  const h = await host({ root: p.sessions, plugin: { vault: p.vault }, script: [say('one'), say('two'), say('three'), say('four')] })
  const s = await h.session('index-1', p.cwd)
  await s.user('first turn')
  const later = remember(p.vault, 'The CI cache key includes the lockfile hash.')
  await s.user('second turn')
  const [a, b] = h.adapter.requests.map((r) => r.system)
  assert.ok(a.includes(`#${first}`), 'the entry is in the index the model is sent')
  assert.ok(a.includes('<<acpmem-data kind="index"'))
  assert.equal(b, a, 'byte-stable within the session, though the vault changed')
  assert.ok(!b.includes(`#${later}`))
  // The section is exactly what `acp memory list --format prompt` says for the session.
  const frozen = acp(['list', '--format=prompt', '--session=index-1', `--vault=${p.vault}`]).trimEnd()
  assert.ok(a.includes(frozen))
  const s2 = await h.session('index-2', p.cwd)
  await s2.user('a new session')
  const c = h.adapter.requests[2].system
  assert.ok(c.includes(`#${first}`) && c.includes(`#${later}`), 'a new session gets a new snapshot')
  await s.close()
  await s2.close()
  await h.close()
})

test('memory_recall returns the entry, framed as data', async () => {
  const p = project()
  const id = remember(p.vault, 'Hotfixes branch from the release tag, never from main.')
  const h = await host({
    root: p.sessions,
    plugin: { vault: p.vault },
    script: [call(['memory_recall', { query: 'hotfix release tag' }]), say('Hotfixes branch from the release tag.')],
  })
  const s = await h.session('recall-1', p.cwd)
  await s.user('Where do hotfixes branch from?')
  const [result] = toolResults(s.agent.session)
  assert.equal(result.name, 'memory_recall')
  assert.ok(result.text.includes(`id="${id}"`), result.text)
  assert.ok(result.text.includes('never from main'))
  // What the model got back is in the next request it was sent.
  const next = h.adapter.requests[1].messages.at(-1)
  assert.ok(JSON.stringify(next).includes(id))
  await s.close()
  await h.close()
})

test('each user message brings the memories it is about, once per session, right after it', async () => {
  const p = project()
  const id = remember(p.vault, 'The billing webhook listens on port 8443 in staging: the load balancer keeps 443 for the dashboard.', { type: 'fact', importance: 5 })
  remember(p.vault, 'Lint rules stay as the team agreed; change them only with a review.', { importance: 8 })
  const h = await host({ root: p.sessions, plugin: { vault: p.vault }, script: [say('8443'), say('still 8443')] })
  const s = await h.session('surface-1', p.cwd)
  await s.user('Which port does the billing webhook use in staging?')
  await s.user('The billing webhook port in staging, again?')
  const [first, second] = h.adapter.requests
  assert.deepEqual(first.messages.map((m) => m.source?.kind === 'user' ? 'user' : m.source?.plugin), ['user', SURFACE_PLUGIN])
  const memory = textOf(first.messages[1])
  assert.ok(memory.includes(`id="${id}"`) && memory.includes('keeps 443 for the dashboard'), memory)
  assert.ok(!memory.includes('Lint rules'), 'only what the message is about')
  assert.ok(!first.system.includes('kind="surface"'), 'not in the system prompt')
  assert.equal(second.system, first.system)
  const surfaced = second.messages.filter((m) => m.source?.plugin === SURFACE_PLUGIN)
  assert.equal(surfaced.length, 1, 'kept as history, not repeated')
  assert.deepEqual(h.warningTexts(), [])
  await s.close()
  await h.close()
})

test('surface: false in the plugin config adds nothing to the user message', async () => {
  const p = project()
  remember(p.vault, 'The billing webhook listens on port 8443 in staging.', { type: 'fact' })
  const h = await host({ root: p.sessions, plugin: { vault: p.vault, surface: false }, script: [say('ok')] })
  const s = await h.session('surface-off', p.cwd)
  await s.user('Which port does the billing webhook use in staging?')
  assert.deepEqual(h.adapter.requests[0].messages.map((m) => m.source?.kind), ['user'])
  await s.close()
  await h.close()
})

/**
 * A stand-in for billion-context-dsh's nudge, in the shape it sends: a user
 * message with `source: { kind: 'plugin', plugin: 'acp-nudge' }`, added at
 * `agent/pre-step`. (billion-context-dsh itself is not on the npm registry.)
 */
function acpNudgeStandIn(text) {
  return {
    name: 'acp-nudge-stand-in',
    apply(ctx) {
      ctx.on('agent/pre-step', async (_payload, next) => {
        const decision = await next()
        if (decision.kind === 'reject') return decision
        const nudge = createUserMessage({ content: [{ type: 'text', text }], source: { kind: 'plugin', plugin: 'acp-nudge' } })
        return { kind: 'enter', messages: [...decision.messages, nudge] }
      })
    },
  }
}

test('the memory guidance follows the ACP nudge, in the voice of the nudge', async () => {
  const p = project()
  // The emergency nudge billion-context-dsh sent in a real DSH session, then a gentle and a tier one.
  const real = readFileSync(new URL('./fixtures/acp-nudge-real.txt', import.meta.url), 'utf8')
  const cases = [
    [real, 'emergency'],
    ['An efficiency nudge: compress consumed tool outputs early.', 'gentle'],
    ['[TIER 2 DISTILLATION TRIGGER]\nYour tier-1 summaries have accumulated: distill b1..b4.', 'tier'],
  ]
  for (const [index, [nudgeText, voice]] of cases.entries()) {
    const h = await host({
      root: p.sessions,
      plugin: { vault: p.vault },
      extraPlugins: [[acpNudgeStandIn(nudgeText), {}]],
      script: [say('ok')],
    })
    const s = await h.session(`nudge-${index}`, p.cwd)
    await s.user('hello')
    const messages = h.adapter.requests[0].messages
    const at = messages.findIndex((m) => m.source?.plugin === 'acp-nudge')
    assert.ok(at >= 0)
    assert.equal(textOf(messages[at]), nudgeText, 'the nudge itself is untouched')
    const after = messages[at + 1]
    assert.equal(after.source.plugin, GUIDANCE_PLUGIN)
    assert.equal(textOf(after), acp(['nudge', `--voice=${voice}`, `--vault=${p.vault}`]).trimEnd(), voice)
    assert.equal(at + 2, messages.length, 'the guidance is the very end')
    await s.close()
    await h.close()
  }
})

const filler = (n) => 'We read the deploy scripts and the CI configuration line by line. '.repeat(n)

test('after DSH compacts, the guidance names the new block once', async () => {
  const p = project()
  const h = await host({
    root: p.sessions,
    plugin: { vault: p.vault },
    compaction: { thresholdRatio: 0.5, retainTokens: 300 },
    contextWindow: 3000,
    script: [say(`Understood. ${filler(12)}`), say(`Checked. ${filler(12)}`), say('Fine.'), say('Done.')],
  })
  const s = await h.session('compact-1', p.cwd)
  await s.user(`Decision: releases are cut only from release/* branches. ${filler(12)}`)
  await s.user(`Now the scripts. ${filler(4)}`)
  await s.user('Next.')
  await s.user('Last.')
  const summaries = s.agent.session.events.filter((e) => e.type === 'compaction/summary')
  assert.ok(summaries.length >= 1, 'DSH compacted')
  const guided = h.adapter.requests.map((r) => r.messages.filter((m) => m.source?.plugin === GUIDANCE_PLUGIN).length)
  // Each compaction adds one guidance message to the history, never more.
  assert.equal(guided.at(-1), summaries.length)
  const firstGuided = guided.findIndex((n) => n > 0)
  const message = h.adapter.requests[firstGuided].messages.find((m) => m.source?.plugin === GUIDANCE_PLUGIN)
  assert.ok(textOf(message).startsWith(acp(['nudge', '--voice=gentle', `--vault=${p.vault}`]).trimEnd()))
  assert.ok(textOf(message).endsWith('Newest compression block: b1.'))
  await s.close()
  await h.close()
})

/** A stand-in for another plugin's global `/acp` (billion-context-dsh registers one). */
const globalAcpStandIn = {
  name: 'global-acp-stand-in',
  inject: ['commands'],
  apply(ctx) {
    ctx.commands.register({ name: 'acp', description: 'stand-in', handler: async (inv) => ({ kind: 'success', text: `global /acp got "${inv.rawInput.trim()}"` }) })
  },
}

test('/acp memory list answers with the index; other /acp lines reach the global /acp', async () => {
  const p = project()
  const id = remember(p.vault, 'Friday deploys need a second reviewer.')
  const h = await host({ root: p.sessions, plugin: { vault: p.vault }, extraPlugins: [[globalAcpStandIn, {}]], script: [say('ok')] })
  const s = await h.session('command-1', p.cwd)
  const listed = await s.command('/acp memory list')
  assert.equal(listed.kind, 'success')
  assert.ok(listed.text.includes(`#${id}`))
  assert.equal(listed.text, acp(['list', `--vault=${p.vault}`]).trimEnd())
  assert.deepEqual(await s.command('/acp status'), { kind: 'success', text: 'global /acp got "status"' })
  const recalled = await s.command('/acp memory recall second reviewer')
  assert.ok(recalled.text.includes(`id="${id}"`))
  assert.equal((await s.command('/acp memory frobnicate')).kind, 'error')
  assert.equal(h.adapter.requests.length, 0, 'commands never reach the model')
  await s.close()
  await h.close()
})

test('without acpmem on PATH the session completes, without memory, and the warning appears once', async () => {
  const p = project()
  const saved = process.env.PATH
  const savedAcp = process.env.ACPMEM_ACP
  process.env.PATH = '/nonexistent-bin'
  delete process.env.ACPMEM_ACP
  let h
  try {
    h = await host({ root: p.sessions, plugin: { vault: p.vault }, script: [say('first answer'), say('second answer')] })
  } finally {
    process.env.PATH = saved
    if (savedAcp !== undefined) process.env.ACPMEM_ACP = savedAcp
  }
  const s = await h.session('missing-1', p.cwd)
  await s.user('one')
  await s.user('two')
  const replies = s.agent.session.events.filter((e) => e.type === 'assistant/message').map((e) => textOf(e.data.message))
  assert.deepEqual(replies, ['first answer', 'second answer'])
  assert.ok(!h.adapter.requests[0].tools?.some((t) => t.name.startsWith('memory_')), 'no memory tools offered')
  assert.ok(!h.adapter.requests[0].system.includes('Long-term memory'))
  const listed = await s.command('/acp memory list')
  assert.equal(listed.kind, 'error')
  const warnings = h.warningTexts().filter((w) => w.includes('acpmem'))
  assert.equal(warnings.length, 1, warnings.join('\n'))
  assert.match(warnings[0], /`acp` command was not found/)
  await s.close()
  await h.close()
})

test('with no vault, a failing acp gives one warning and the model reads the error; the session goes on', async () => {
  const p = project()
  const missing = `${p.dir}/no-vault-here`
  const h = await host({
    root: p.sessions,
    plugin: { vault: missing, wait: true },
    script: [call(['memory_commit', { type: 'decision', note: 'x', importance: 5 }]), say('carrying on'), call(['memory_recall', { query: 'x' }]), say('still here')],
  })
  const s = await h.session('novault-1', p.cwd)
  await s.user('remember something')
  await s.user('recall it')
  const results = toolResults(s.agent.session)
  assert.deepEqual(results.map((r) => r.name), ['memory_commit', 'memory_recall'])
  for (const r of results) assert.match(r.text, /^Error: /u)
  const replies = s.agent.session.events.filter((e) => e.type === 'assistant/message').map((e) => textOf(e.data.message)).filter(Boolean)
  assert.deepEqual(replies, ['carrying on', 'still here'])
  const warnings = h.warningTexts().filter((w) => w.includes('acpmem'))
  assert.equal(warnings.length, 1, warnings.join('\n'))
  await s.close()
  await h.close()
})

test('memory_commit hands acpmem the session log as DSH wrote it, flushed up to the call', async () => {
  // acpmem's reading of the log is proved by the end-to-end tests
  // (tests/test_dsh_plugin.py); here: the request acpmem records names this
  // session, the seq of the assistant message that made the call, and a
  // transcript file that already holds that message.
  const p = project()
  const h = await host({
    root: p.sessions,
    plugin: { vault: p.vault },
    script: [call(['memory_commit', { type: 'decision', note: 'release branches only', importance: 8 }]), say('noted')],
  })
  const s = await h.session('commit-1', p.cwd)
  await s.user('We cut releases only from release/* branches. Remember that.')
  const callEvent = s.agent.session.events.find((e) => e.type === 'assistant/message' && e.data.message.content.some((b) => b.type === 'tool-call'))
  const [result] = toolResults(s.agent.session)
  assert.equal(result.name, 'memory_commit')
  const requestId = /^Noted \((r-[a-z0-9]+)\)/u.exec(result.text)?.[1]
  assert.ok(requestId, result.text)
  // The request is pending, or already finished by acpmem's background worker.
  // (acpmem keeps its queue in the vault's git folder, .git/acpmem/pending/)
  const pending = join(p.vault, '.git', 'acpmem', 'pending', `${requestId}.json`)
  const record = existsSync(pending)
    ? JSON.parse(readFileSync(pending, 'utf8'))
    : readFileSync(join(p.vault, '.acpmem', 'done.jsonl'), 'utf8').trim().split('\n').map((line) => JSON.parse(line)).find((r) => r.request === requestId)
  assert.equal(record.session, 'commit-1')
  assert.equal(record.seq, callEvent.seq)
  if (record.transcript !== undefined) assert.equal(record.transcript, s.transcript())
  // The log on disk is DSH's own zstd log: its first frame is the session header.
  const header = JSON.parse(zstdDecompressSync(readFileSync(s.transcript())).toString('utf8').split('\n')[0])
  assert.equal(header.type, 'session')
  assert.equal(header.id, 'commit-1')
  await s.close()
  await h.close()
})
