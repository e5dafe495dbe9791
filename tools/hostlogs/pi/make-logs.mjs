// Writes pi session logs with pi's own code (@earendil-works/pi-coding-agent 0.83.0, or 1.6.0 installed over it) and
// a scripted model (pi-ai's "faux" provider), plus truth.json: what pi's own reader
// (SessionManager.buildContextEntries and sessionEntryToContextMessages) says about each file. No network, no real
// model.
//
//   npm install && node make-logs.mjs <out dir>        (out dir: tests/fixtures/hosts/pi)
//
// Sessions written:
//   pi-compaction/     two session.compact() on the live path (the second folds in the first), a message with two
//                      tool calls, the read tool on a real file
//   pi-branch-summary/ navigateTree() back to an older entry with summarize: true (a branch_summary entry), then a
//                      new branch
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fauxAssistantMessage, fauxProvider, fauxText, fauxToolCall } from "@earendil-works/pi-ai";
import {
  createAgentSession,
  ModelRuntime,
  SessionManager,
  SettingsManager,
  sessionEntryToContextMessages,
} from "@earendil-works/pi-coding-agent";

const out = path.resolve(process.argv[2] ?? "out");
// the pi that wrote the logs: the installed package's own version (0.83.0 as package.json pins it; another version
// installed over it for a check writes its own)
const PI_VERSION = JSON.parse(fs.readFileSync(new URL("node_modules/@earendil-works/pi-coding-agent/package.json",
                                                     import.meta.url), "utf8")).version;
const filler = (what) =>
  ` ${what}: the refresh token lives in Redis for 30 days and the access token for 15 minutes; login is in src/auth/login.ts.`.repeat(6);

// The scripted model: while the script has pi summarise (compact, navigateTree: one or two calls), every call gets
// that step's summary; otherwise the next scripted reply.
const mode = { summary: null };
function scriptedModel(replies) {
  let i = 0;
  return () => {
    if (mode.summary !== null) return fauxAssistantMessage(mode.summary);
    if (i >= replies.length) throw new Error("the scripted model ran out of replies");
    return replies[i++];
  };
}

async function summarising(text, fn) {
  mode.summary = text;
  try {
    return await fn();
  } finally {
    mode.summary = null;
  }
}

async function setup(name, replies) {
  const work = fs.mkdtempSync(path.join(os.tmpdir(), `pi-${name}-`));
  const cwd = path.join(work, "project");
  const agentDir = path.join(work, "agent");
  const sessionDir = path.join(work, "sessions");
  fs.mkdirSync(path.join(cwd, "src", "auth"), { recursive: true });
  fs.mkdirSync(agentDir, { recursive: true });
  fs.writeFileSync(path.join(cwd, "src", "auth", "login.ts"),
    "export async function login(user: string, pass: string) {\n  // JWT access 15m, refresh in Redis 30d\n}\n");
  fs.writeFileSync(path.join(cwd, "NOTES.md"), "Rate limit: sliding window, 10 requests per minute.\n");
  const faux = fauxProvider({ provider: "faux", models: [{ id: "faux-1", contextWindow: 200000, maxTokens: 8000 }] });
  const runtime = await ModelRuntime.create({ modelsPath: null, allowModelNetwork: false,
                                              authPath: path.join(agentDir, "auth.json") });
  runtime.registerNativeProvider(faux.provider);
  const model = runtime.getModel("faux", "faux-1");
  const settingsManager = SettingsManager.inMemory({ compaction: { enabled: false, keepRecentTokens: 400 } });
  const sessionManager = SessionManager.create(cwd, sessionDir);
  const { session } = await createAgentSession({ cwd, agentDir, model, modelRuntime: runtime, settingsManager,
                                                 sessionManager, tools: ["read"], thinkingLevel: "off" });
  const script = scriptedModel(replies);
  faux.setResponses(Array.from({ length: replies.length + 8 }, () => script));
  return { session, sessionManager, cwd };
}

function truth(sessionManager) {
  const file = sessionManager.getSessionFile();
  const lines = fs.readFileSync(file, "utf8").split("\n").filter((l) => l.trim());
  const lineOf = new Map(lines.map((l, i) => [JSON.parse(l).id, i]));
  const entries = [{ line: 0, type: "session", id: JSON.parse(lines[0]).id }];
  for (const e of sessionManager.getEntries()) {
    const row = { line: lineOf.get(e.id), type: e.type, id: e.id, parentId: e.parentId };
    if (e.type === "message") row.role = e.message.role;
    entries.push(row);
  }
  const context = sessionManager.buildContextEntries();
  return {
    writtenBy: `@earendil-works/pi-coding-agent ${PI_VERSION} (faux provider); truth from SessionManager.buildContextEntries()`,
    entries,
    contextEntries: context.map((e) => ({ line: lineOf.get(e.id), type: e.type, id: e.id })),
    contextMessages: context.flatMap((e) => sessionEntryToContextMessages(e).map((m) => ({ entry: e.id, role: m.role }))),
    leaf: sessionManager.getLeafId(),
  };
}

function save(name, sessionManager) {
  const dir = path.join(out, name);
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(dir, { recursive: true });
  const file = sessionManager.getSessionFile();
  fs.copyFileSync(file, path.join(dir, path.basename(file)));
  fs.writeFileSync(path.join(dir, "truth.json"), JSON.stringify(truth(sessionManager), null, 1) + "\n");
  console.log(`${name}: ${path.basename(file)}`);
}

const summary = (goal, progress) =>
  `## Goal\n${goal}\n\n## Constraints & Preferences\n- Keep src/auth/login.ts the only entry point.\n\n## Progress\n${progress}\n\n` +
  `## Key Decisions\n- JWT access tokens 15m, refresh tokens in Redis 30d.\n\n## Next Steps\n- Add rate limiting.\n\n` +
  `## Critical Context\n- Sliding window, 10 requests per minute.`;

async function compactionSession() {
  const replies = [
    fauxAssistantMessage([fauxText("Reading login.ts."), fauxToolCall("read", { path: "src/auth/login.ts" }, { id: "call_r1" })],
                         { stopReason: "toolUse" }),
    fauxAssistantMessage("Design:" + filler("design")),
    fauxAssistantMessage([fauxText("Reading both files."),
                          fauxToolCall("read", { path: "src/auth/login.ts" }, { id: "call_a" }),
                          fauxToolCall("read", { path: "NOTES.md" }, { id: "call_b" })], { stopReason: "toolUse" }),
    fauxAssistantMessage("Tests planned:" + filler("tests")),
    fauxAssistantMessage("Step 1 done:" + filler("step 1")),
    fauxAssistantMessage("Step 2 done:" + filler("step 2")),
    fauxAssistantMessage("Rate limiting planned:" + filler("rate limit")),
    fauxAssistantMessage("Step 3 done:" + filler("step 3")),
    fauxAssistantMessage("We keep JWT with Redis refresh tokens and a sliding-window limit."),
  ];
  const { session, sessionManager } = await setup("compaction", replies);
  await session.prompt("Design the auth flow for the API." + filler("requirements"));
  await session.prompt("Now plan tests for login and the notes." + filler("tests request"));
  await session.prompt("Continue with step 1." + filler("step 1 request"));
  await summarising(summary("Design the auth flow.", "- Auth design done; tests planned; step 1 done."),
                    () => session.compact());
  await session.prompt("Continue with step 2." + filler("step 2 request"));
  await session.prompt("Plan rate limiting." + filler("rate request"));
  await session.prompt("Continue with step 3." + filler("step 3 request"));
  await summarising(summary("Design the auth flow and ship it.", "- Auth design done; steps 1-3 done; rate limit planned."),
                    () => session.compact());
  await session.prompt("Where are we?");
  save("pi-compaction", sessionManager);
  session.dispose();
}

async function branchSummarySession() {
  const replies = [
    fauxAssistantMessage([fauxText("Reading login.ts."), fauxToolCall("read", { path: "src/auth/login.ts" }, { id: "call_n1" })],
                         { stopReason: "toolUse" }),
    fauxAssistantMessage("Plan:" + filler("migration plan")),
    fauxAssistantMessage("Option A keeps cookie sessions; simpler but no mobile support."),
    fauxAssistantMessage("Batches of 1000 rows, checked by count."),
    fauxAssistantMessage("Option B: JWT access 15m + refresh in Redis; needs a token store."),
    fauxAssistantMessage("Token store: Redis, keyed by user id."),
  ];
  const branchSummary = "## Goal\nPick a session mechanism.\n\n## Progress\n- Looked at option A (cookie sessions): no mobile support; batching planned at 1000 rows.\n\n## Key Decisions\n- Option A was set aside.";
  const { session, sessionManager } = await setup("branch", replies);
  await session.prompt("Plan the database migration." + filler("migration request"));
  const planned = sessionManager.getLeafId();
  await session.prompt("Option A: keep cookie sessions?");
  await session.prompt("What about batching?");
  const result = await summarising(branchSummary, () => session.navigateTree(planned, { summarize: true }));
  if (!result.summaryEntry) throw new Error("navigateTree wrote no branch summary");
  await session.prompt("Option B: switch to JWT instead?");
  await session.prompt("Where do tokens live?");
  save("pi-branch-summary", sessionManager);
  session.dispose();
}

await compactionSession();
await branchSummarySession();
