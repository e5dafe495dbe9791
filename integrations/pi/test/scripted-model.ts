/**
 * Test helper, not part of the package: a pi extension that registers provider "scripted", a model played by
 * pi-ai's faux provider from a script file the test writes, and records every request pi sends it.
 *
 * PI_SCRIPT: a JSON list of steps, consumed one per model call (the test may rewrite it between prompts):
 *   {"text": "..."}                        an answer
 *   {"tool": "name", "args": {...}}        a tool call; an argument "{{block}}" becomes the block the latest acpmem
 *                                          guidance in the context names as the compaction's own (as a model
 *                                          reading it would)
 * PI_SCRIPT_LOG: each request as one JSON line: {call, at (epoch ms, when it arrived), systemPrompt, tools,
 *   messages}.
 */
import { appendFileSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import * as piAi from "@earendil-works/pi-ai";
import { createFauxCore, fauxAssistantMessage, fauxText, fauxToolCall } from "@earendil-works/pi-ai";
import type { ExtensionAPI } from "@earendil-works/pi-coding-agent";

function textOf(content: unknown): string {
	if (typeof content === "string") return content;
	if (!Array.isArray(content)) return "";
	return content.map((b) => (b && typeof b === "object" && "text" in b ? String((b as { text: unknown }).text) : ""))
		.join("\n");
}

function guidedBlock(messages: { role: string; content: unknown }[]): string | undefined {
	for (let i = messages.length - 1; i >= 0; i--) {
		const t = textOf(messages[i].content);
		if (!t.includes("[LONG-TERM MEMORY]")) continue;
		const found = t.match(/compaction that just ran is block ([A-Za-z0-9_-]+)/);
		if (found) return found[1];
	}
	return undefined;
}

function fill(value: unknown, block: string | undefined): unknown {
	if (value === "{{block}}") return block ?? "(no block named)";
	if (Array.isArray(value)) return value.map((v) => fill(v, block));
	if (value && typeof value === "object") {
		return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, fill(v, block)]));
	}
	return value;
}

type Ctx = { systemPrompt?: string; messages: { role: string; content: unknown }[]; tools?: { name: string }[] };
type Transcript = {
	getCurrentSystemPrompt?: (m: Ctx["messages"]) => string;
	getCurrentTools?: (m: Ctx["messages"]) => { name: string }[];
};
type Request = { systemPrompt: string; tools: string[]; messages: Ctx["messages"]; system: Ctx["messages"] };

/**
 * What a request holds, the same from either pi: the system prompt, the tools' names, the conversation and (pi 1.x)
 * the transcript's system messages as sent. pi 0.8x hands a provider `systemPrompt` and `tools` beside the messages;
 * pi 1.x folds both into system messages at the head of the transcript (a later one patches the prompt or the
 * tools), which pi-ai's own replay turns back into the prompt and the tools the model has at this point.
 */
function request(context: Ctx): Request {
	const t = piAi as unknown as Transcript;
	const system = context.messages.filter((m) => m.role === "system");
	if (context.systemPrompt !== undefined || context.tools !== undefined || !system.length
		|| !t.getCurrentSystemPrompt || !t.getCurrentTools) {
		return { systemPrompt: context.systemPrompt ?? "", tools: (context.tools ?? []).map((x) => x.name),
			messages: context.messages, system };
	}
	return { systemPrompt: t.getCurrentSystemPrompt(context.messages),
		tools: t.getCurrentTools(context.messages).map((x) => x.name),
		messages: context.messages.filter((m) => m.role !== "system"), system };
}

export default function scriptedModel(pi: ExtensionAPI) {
	const script = process.env.PI_SCRIPT;
	const log = process.env.PI_SCRIPT_LOG;
	if (!script) throw new Error("PI_SCRIPT is not set");
	const core = createFauxCore({
		api: "scripted",
		provider: "scripted",
		models: [{ id: "model", name: "Scripted", contextWindow: 200000, maxTokens: 8192 }],
	});
	let calls = 0;
	const step = (context: { systemPrompt?: string; messages: { role: string; content: unknown }[]; tools?: { name: string }[] }) => {
		calls += 1;
		if (log) {
			const { systemPrompt, tools, messages, system } = request(context);
			appendFileSync(log, `${JSON.stringify({ call: calls, at: performance.timeOrigin + performance.now(), systemPrompt,
				tools, messages, system })}\n`);
		}
		const steps = JSON.parse(readFileSync(script, "utf8")) as { text?: string; tool?: string; args?: unknown }[];
		const next = steps.shift();
		writeFileSync(`${script}.tmp`, JSON.stringify(steps));
		renameSync(`${script}.tmp`, script);
		if (!next) return fauxAssistantMessage("", { stopReason: "error", errorMessage: "script exhausted" });
		if (next.tool) {
			const args = fill(next.args ?? {}, guidedBlock(context.messages)) as Record<string, unknown>;
			return fauxAssistantMessage([fauxToolCall(next.tool, args)], { stopReason: "toolUse" });
		}
		return fauxAssistantMessage([fauxText(next.text ?? "")]);
	};
	core.setResponses(Array.from({ length: 500 }, () => step));
	pi.registerProvider("scripted", {
		baseUrl: "http://127.0.0.1:9",
		apiKey: "scripted",
		api: "scripted",
		models: core.models.map((m) => ({ id: m.id, name: m.name, reasoning: false, input: ["text"],
			cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 }, contextWindow: m.contextWindow,
			maxTokens: m.maxTokens })),
		streamSimple: core.streamSimple,
	});
}
