// The kernel's view of a pi + billion-context-pi session at each compress point, computed by acp-kernel's own
// prune() and hideConsumedCompressCalls() (v0.0.41): writes <folder>/views.json, {points: [{seq, blocks, ids}]}.
//
//   node kernel-views.mjs ../../../tests/fixtures/hosts/pi/pi-acp
//
// The session's messages are given to the kernel the way billion-context-pi does (hosts.md §4): the live path, raw
// ids = entry ids, `<entry>#<call>` for each call of a several-call message, custom messages and bash executions as
// user text. At each compress call's result the state holds the blocks made so far, each active unless a block made
// so far consumed it. The last point is checked against truth.json's kernelView (what billion-context-pi recorded)
// before anything is written, so the message shaping above is proved on the real record.
import fs from "node:fs";
import path from "node:path";
import { hideConsumedCompressCalls, prune } from "acp-kernel";

const folder = path.resolve(process.argv[2]);
const log = fs.readdirSync(folder).find((f) => f.endsWith(".jsonl"));
const rows = fs.readFileSync(path.join(folder, log), "utf8").split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l));
const state = JSON.parse(fs.readFileSync(path.join(folder, log + ".acp.json"), "utf8"));
const truth = JSON.parse(fs.readFileSync(path.join(folder, "truth.json"), "utf8"));

const byId = new Map(rows.slice(1).map((r, i) => [r.id, { row: r, line: i + 1 }]));
const pathEntries = [];
for (let node = rows.at(-1).id; node; node = byId.get(node).row.parentId) pathEntries.unshift(byId.get(node));
const texts = (content) => (typeof content === "string" ? content
  : (content ?? []).filter((b) => b.type === "text").map((b) => b.text).join("\n"));
const messages = [];
for (const { row, line } of pathEntries) {
  if (row.type === "custom_message") messages.push({ id: row.id, line, role: "user", contentType: "text", text: texts(row.content) });
  if (row.type !== "message") continue;
  const m = row.message;
  if (m.role === "user") messages.push({ id: row.id, line, role: "user", contentType: "text", text: texts(m.content) });
  if (m.role === "bashExecution") messages.push({ id: row.id, line, role: "user", contentType: "text", text: `$ ${m.command}\n${m.output}` });
  if (m.role === "toolResult") messages.push({ id: row.id, line, role: "tool", contentType: "tool-result", toolCallId: m.toolCallId,
                                               toolName: m.toolName, text: texts(m.content) });
  if (m.role === "assistant") {
    const calls = m.content.filter((b) => b.type === "toolCall");
    const text = texts(m.content);
    if (!calls.length) messages.push({ id: row.id, line, role: "assistant", contentType: "text", text });
    calls.forEach((c, i) => messages.push({ id: calls.length > 1 ? `${row.id}#${c.id}` : row.id, line, role: "assistant",
                                            contentType: "tool-call", toolCallId: c.id, toolName: c.name,
                                            text: [i === 0 ? text : "", JSON.stringify(c.arguments)].filter(Boolean).join("\n") }));
  }
}

const viewAt = (upto, blocks) => {
  const st = { ...state, blocks };
  const msgs = messages.filter((m) => m.line <= upto);
  return hideConsumedCompressCalls(st, prune(msgs, st)).messages;
};
const final = viewAt(Infinity, state.blocks).map((m) => m.id);
const want = truth.kernelView.map((v) => v.id);
if (JSON.stringify(final) !== JSON.stringify(want)) throw new Error(`final view differs:\n${final}\n${want}`);

const resultLine = new Map(messages.filter((m) => m.contentType === "tool-result").map((m) => [m.toolCallId, m.line]));
const points = state.blocks.map((b, k) => {
  const made = state.blocks.slice(0, k + 1);
  const consumed = new Set(made.flatMap((x) => x.directBlockIds));
  const blocks = made.map((x) => ({ ...x, active: !consumed.has(x.blockId) }));
  const seq = resultLine.get(b.compressCallId);
  return { seq, blocks: blocks.filter((x) => x.active).map((x) => x.blockId), ids: viewAt(seq, blocks).map((m) => m.id) };
});
fs.writeFileSync(path.join(folder, "views.json"), JSON.stringify({
  writtenBy: "acp-kernel v0.0.41 prune() + hideConsumedCompressCalls(), tools/hostlogs/pi/kernel-views.mjs",
  points }, null, 1) + "\n");
console.log(`${points.length} views; the final one matches truth.json's kernelView`);
