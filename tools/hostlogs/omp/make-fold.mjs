// Writes an omp-style fold file with acp-kernel v0.0.41's own code: the OpenAI wire codec (openaiToCore: content-hash
// message ids "h_…"), the compression core (processTurn assigns the m-refs, applyCompression makes the blocks) and
// the StateStore (envelope {version, savedAt, id, payload}, file <sha256(id)[:24]>.json, temp file + rename).
// The payload has billion-context-omp's FoldSnapshot shape (v0.3.2, src/fold-persist.ts): {identities, foldedLen,
// state, coreMessages, appliedCallIds, rejectStreak}; identities are omp's per-piece content keys (a JSON text of
// role, contentType, toolName, toolCallId and text, as omp's coreIdentity makes them). Also writes truth.json:
// what the kernel's own state says (blocks, their covered ids, the stream).
//
//   (clone acp-kernel at v0.0.41 into ./acp-kernel; there: npm install && npm run build)
//   npm install && node make-fold.mjs <out dir>        (out dir: tests/fixtures/hosts/omp)
import fs from "node:fs";
import path from "node:path";
import { createCore, createInitialState, defaultConfig } from "acp-kernel";
import { StateStore, flatFileNameFor } from "acp-kernel/persist";
import { openaiToCore } from "acp-kernel/wire";

const out = path.resolve(process.argv[2] ?? "out");
const filler = (what) => ` ${what}: refresh tokens in Redis for 30 days, access tokens for 15 minutes.`.repeat(6);
const call = (id, name, args) => ({ id, type: "function", function: { name, arguments: JSON.stringify(args) } });
const body = {
  model: "faux-1",
  messages: [
    { role: "system", content: "You are omp." },
    { role: "user", content: "Design the auth flow." + filler("requirements") },
    { role: "assistant", content: "Reading login.ts.", tool_calls: [call("call_r1", "read", { path: "src/auth/login.ts" })] },
    { role: "tool", tool_call_id: "call_r1", content: "export async function login() { /* JWT 15m, Redis 30d */ }" },
    { role: "assistant", content: "Design:" + filler("design") },
    { role: "user", content: "Now the tests." + filler("tests request") },
    { role: "assistant", content: "Tests written:" + filler("tests") },
    { role: "user", content: "Continue with step 1." + filler("step 1 request") },
    { role: "assistant", content: "Step 1 done:" + filler("step 1") },
    { role: "user", content: "Where are we?" },
  ],
};

const { msgs: messages } = openaiToCore(body);
const core = createCore();
const config = defaultConfig(128000, { compress: { minCompressRange: 200, maxSummaryLength: 20000, minSummaryLength: 20 },
                                      preserveRecentMessages: 1, preserveRecentTokens: 0 });
let state = createInitialState();
const turn = core.processTurn({ messages, state, config, tokenCount: 4000 });
state = turn.state;
const refOf = (i) => state.messageRefs.byRaw[messages[i].id];
const apply = (ranges) => {
  const r = core.applyCompression({ ranges, messages, state, config });
  if (r.result.errors.length || !r.result.blocksCreated) throw new Error(JSON.stringify(r.result));
  state = r.state;
};
apply([{ startRef: refOf(0), endRef: refOf(3), topic: "JWT auth design", compressCallId: "call_c1",
         summary: "Auth design: JWT access 15m, refresh tokens in Redis 30d, src/auth/login.ts." }]);
apply([{ startRef: refOf(4), endRef: refOf(5), compressCallId: "call_c2",
         summary: "Login and refresh tests written and green." }]);
apply([{ startRef: "b1", endRef: "b2", topic: "Auth + tests", compressCallId: "call_c3",
         summary: "Auth designed (JWT 15m, Redis refresh 30d); tests green." }]);

const identities = messages.map((m) => JSON.stringify({ role: m.role, contentType: m.contentType, toolName: m.toolName ?? null,
                                                       toolCallId: m.toolCallId ?? null, text: m.text ?? "" }));
const payload = { identities, foldedLen: messages.length, state, coreMessages: messages,
                  appliedCallIds: ["call_c1", "call_c2", "call_c3"], rejectStreak: 0 };
const sessionId = "omp-session-01a23381-5555-7000-8000-000000000001";
fs.rmSync(out, { recursive: true, force: true });
fs.mkdirSync(out, { recursive: true });
const store = new StateStore({ dir: out, version: 1 });
await store.writeNow(sessionId, () => payload);
const file = flatFileNameFor(sessionId);
const truth = {
  writtenBy: "acp-kernel v0.0.41: openaiToCore, createCore().processTurn/applyCompression, StateStore.writeNow",
  file, id: sessionId,
  blocks: state.blocks.map((b) => ({ blockId: b.blockId, tier: b.tier, topic: b.topic ?? null, summary: b.summary,
                                     effectiveMessageIds: b.effectiveMessageIds, directBlockIds: b.directBlockIds,
                                     active: b.active })),
  stream: messages.map((m) => ({ id: m.id, role: m.role, contentType: m.contentType })),
};
fs.writeFileSync(path.join(out, "truth.json"), JSON.stringify(truth, null, 1) + "\n");
console.log(`fold file: ${file}`);
