/**
 * acpmem for pi: long-term memory across pi sessions.
 *
 * - registers `memory_commit` and `memory_recall`, with the schemas and descriptions `acp memory tools` exports;
 *   a commit names this session's own JSONL file and the entry the call sits in, so the fork reads exactly what
 *   the model saw;
 * - appends the resident index (`acp memory list --format prompt --session <id>`) to the system prompt of every
 *   turn, fetched once per session and byte-identical after that;
 * - on each user prompt, adds the memories that prompt is about (`acp memory surface --session <id> --prompt -`,
 *   each entry once per session, within acpmem's byte budgets; `[surface] prompt = false` turns it off) as a
 *   message after the user's, kept in the session: the system prompt stays a constant prefix for the prompt cache;
 * - after a compaction (pi's own, or billion-context-pi's `compress`) adds acpmem's memory guidance, naming the
 *   block the compaction made, so the model can `memory_commit` it;
 * - `/memory` shows the index, `/memory recall <words>` searches, `/memory review` lists the review queue.
 *
 * It never breaks the agent: no `acp`, no vault or a failing command gives one visible warning and pi carries on
 * without memory. Settings (environment): ACPMEM_BIN (the `acp` command, default `acp` on PATH), ACPMEM_VAULT (the
 * vault, default: the nearest .acp-memory/ above pi's folder), ACPMEM_PI=off (load nothing),
 * ACPMEM_PI_TIMEOUT_MS (per command, default 30000).
 */
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import type { ExtensionAPI, ExtensionContext } from "@earendil-works/pi-coding-agent";

const TOOLS = ["memory_commit", "memory_recall"];
const GUIDANCE_TYPE = "acpmem-guidance";
const SURFACE_TYPE = "acpmem-surfaced";
const MAX_OUTPUT = 16 * 1024 * 1024;

interface Run {
	ok: boolean;
	stdout: string;
	/** acp's own one-line error (`Error: … — next step`), or why the command could not run. */
	error: string;
	/** the command itself is missing or not executable: nothing else will work either. */
	missing: boolean;
}

interface SessionState {
	id: string;
	/** the frozen index: fetched once (started with the session), then reused byte for byte. */
	index?: Promise<string | undefined>;
	/** why memory is off for this session (no vault, a failing index call); undefined while it works. */
	off?: string;
	warned: boolean;
}

function settingOff(value: string | undefined): boolean {
	return value !== undefined && ["0", "off", "false", "no"].includes(value.trim().toLowerCase());
}

function firstErrorLine(stderr: string, fallback: string): string {
	const lines = stderr.split("\n").map((l) => l.trim()).filter(Boolean);
	for (const l of lines) {
		// under --json acpmem says its error as one object: {"error": {"message", "hint", ...}}
		if (!l.startsWith('{"error"')) continue;
		try {
			const e = JSON.parse(l).error;
			if (e && typeof e.message === "string") return `Error: ${e.message}${e.hint ? ` — ${e.hint}` : ""}`;
		} catch {
			// not acpmem's object: fall through to the plain lines
		}
	}
	return lines.find((l) => l.startsWith("Error:")) ?? lines[lines.length - 1] ?? fallback;
}

export default async function acpmem(pi: ExtensionAPI): Promise<void> {
	if (settingOff(process.env.ACPMEM_PI)) return;
	const bin = process.env.ACPMEM_BIN?.trim() || "acp";
	const timeout = Number(process.env.ACPMEM_PI_TIMEOUT_MS) > 0 ? Number(process.env.ACPMEM_PI_TIMEOUT_MS) : 30000;

	/** why memory is off for the whole process (no `acp`); undefined while it works. */
	let processOff: string | undefined;
	let processWarned = false;
	let session: SessionState | undefined;
	let nudge: string | undefined;

	/** `acp memory <args>`; `input`, when given, is written to its standard input. */
	function acp(args: string[], cwd: string, signal?: AbortSignal, input?: string): Promise<Run> {
		return new Promise((resolve) => {
			const child = execFile(bin, ["memory", ...args], { cwd, timeout, maxBuffer: MAX_OUTPUT, signal, encoding: "utf8" },
				(err, stdout, stderr) => {
					if (!err) return resolve({ ok: true, stdout, error: "", missing: false });
					const code = (err as NodeJS.ErrnoException).code;
					if (code === "ENOENT" || code === "EACCES") {
						return resolve({ ok: false, stdout: "", missing: true,
							error: `\`${bin}\` not found (install acpmem, or set ACPMEM_BIN to the acp command)` });
					}
					const why = (err as { killed?: boolean }).killed ? `\`acp memory ${args[0]}\` timed out` :
						`\`acp memory ${args[0]}\` failed`;
					resolve({ ok: false, stdout, missing: false, error: firstErrorLine(stderr ?? "", why) });
				});
			if (input !== undefined) {
				child.stdin?.on("error", () => {}); // a command that exits early: its result says why
				child.stdin?.end(input);
			}
		});
	}

	function say(ctx: ExtensionContext | undefined, text: string): void {
		const line = `acpmem: ${text}`;
		if (ctx?.hasUI) ctx.ui.notify(line, "warning");
		else process.stderr.write(`${line}\n`);
	}

	/** One visible warning: once per process for a missing `acp`, once per session otherwise. */
	function warn(ctx: ExtensionContext | undefined, text: string, whole = false, off = true): void {
		if (whole) {
			processOff ??= text;
			if (processWarned) return;
			processWarned = true;
		} else {
			if (processWarned || session?.warned) return;
			if (session) session.warned = true;
		}
		say(ctx, off ? `${text}; pi carries on without memory.` : text);
	}

	/** Take memory out of this session: the index is not sent and the two tools are not offered. */
	function switchOff(ctx: ExtensionContext, why: string, whole = false): void {
		if (session && !whole) session.off ??= why;
		warn(ctx, why, whole);
		deactivate();
	}

	function deactivate(): void {
		const active = pi.getActiveTools();
		if (active.some((t) => TOOLS.includes(t))) pi.setActiveTools(active.filter((t) => !TOOLS.includes(t)));
	}

	function failed(ctx: ExtensionContext, r: Run): void {
		if (r.missing) switchOff(ctx, r.error, true);
		else warn(ctx, r.error, false, false);
	}

	function current(ctx: ExtensionContext): SessionState {
		const id = ctx.sessionManager.getSessionId();
		if (session?.id !== id) session = { id, warned: false };
		return session;
	}

	/** The 0-based line of the session file holding `entryId`: acpmem's seq for a pi session log. */
	function lineOf(file: string, entryId: string | null): number | undefined {
		let text: string;
		try {
			text = readFileSync(file, "utf8");
		} catch {
			return undefined;
		}
		const lines = text.split("\n");
		for (let n = lines.length - 1; n >= 0; n--) {
			if (!entryId || !lines[n].includes(entryId)) continue;
			try {
				if (JSON.parse(lines[n]).id === entryId) return n;
			} catch {
				// a line cut short while pi writes: not the entry
			}
		}
		return undefined;
	}

	function text(s: string) {
		return { content: [{ type: "text" as const, text: s }], details: {} };
	}

	// ------------------------------------------------------------------------------------------------ the tools
	// `acp memory tools` starts with the session, in the background; the first turn waits for it
	let loading: Promise<void> | undefined;
	const ready = (cwd: string) => (loading ??= loadTools(cwd));

	async function loadTools(cwd: string): Promise<void> {
		const exported = await acp(["tools", "--for", "main", "--format", "openai"], cwd);
		let schemas: Record<string, { description: string; parameters: Record<string, unknown> }> = {};
		if (exported.ok) {
			try {
				for (const t of JSON.parse(exported.stdout)) schemas[t.function.name] = t.function;
			} catch {
				exported.ok = false;
				exported.error = "`acp memory tools` printed something that is not the tool list";
			}
		}
		if (!exported.ok) {
			processOff = exported.error;
			schemas = {};
		}

		if (schemas.memory_commit) {
			pi.registerTool({
				name: "memory_commit",
				label: "Memory commit",
				description: schemas.memory_commit.description,
				parameters: schemas.memory_commit.parameters as never,
				async execute(_id, params: { type: string; note: string; importance: number; block?: string }, signal,
					_onUpdate, ctx) {
					const s = current(ctx);
					if (processOff || s.off) throw new Error(`memory is off in this session: ${processOff ?? s.off}`);
					const file = ctx.sessionManager.getSessionFile();
					if (!file) throw new Error("memory_commit needs a saved session (pi runs with --no-session)");
					const seq = lineOf(file, ctx.sessionManager.getLeafId());
					if (seq === undefined) throw new Error(`the current entry is not in ${file} yet; call memory_commit again`);
					const args = ["commit", "--type", params.type, "--note", params.note, "--importance",
						String(params.importance), "--session", s.id, "--seq", String(seq), "--transcript", file];
					if (params.block) args.push("--block", params.block);
					const r = await acp(args, ctx.cwd, signal);
					if (!r.ok) {
						failed(ctx, r);
						throw new Error(r.error);
					}
					return text(r.stdout.trim());
				},
			});
		}

		if (schemas.memory_recall) {
			pi.registerTool({
				name: "memory_recall",
				label: "Memory recall",
				description: schemas.memory_recall.description,
				parameters: schemas.memory_recall.parameters as never,
				async execute(_id, params: { query: string }, signal, _onUpdate, ctx) {
					const s = current(ctx);
					if (processOff || s.off) throw new Error(`memory is off in this session: ${processOff ?? s.off}`);
					const r = await acp(["recall", params.query, "--session", s.id], ctx.cwd, signal);
					if (!r.ok) {
						failed(ctx, r);
						throw new Error(r.error);
					}
					return text(r.stdout.trim());
				},
			});
		}
	}

	// ------------------------------------------------------------------------------------------------ the index
	function index(ctx: ExtensionContext): Promise<string | undefined> {
		const s = current(ctx);
		if (processOff || s.off) return Promise.resolve(undefined);
		s.index ??= acp(["list", "--format", "prompt", "--session", s.id], ctx.cwd).then((r) => {
			if (r.ok) return r.stdout.trimEnd();
			switchOff(ctx, r.error, r.missing);
			return undefined;
		});
		return s.index;
	}

	pi.on("session_start", async (_event, ctx) => {
		// both calls start now and run while the user types; the first turn waits for what is not done yet
		void ready(ctx.cwd);
		void index(ctx);
	});

	// ------------------------------------------------------------------------------- what the prompt is about
	/** The memories this prompt is about that the session has not seen yet ('' when none, or when it fails). */
	async function surfaced(ctx: ExtensionContext, prompt: string): Promise<string> {
		const s = current(ctx);
		if (processOff || s.off || !prompt.trim()) return "";
		const r = await acp(["surface", "--session", s.id, "--prompt", "-"], ctx.cwd, undefined, prompt);
		if (r.ok) return r.stdout.trimEnd();
		failed(ctx, r);
		return "";
	}

	pi.on("before_agent_start", async (event, ctx) => {
		await ready(ctx.cwd);
		if (processOff) return void switchOff(ctx, processOff, true);
		const idx = await index(ctx);
		if (!idx) return void deactivate();
		// The index keeps the system prompt the same bytes every turn; what this prompt is about follows the
		// user's message as a message of its own, kept in the session, so later requests repeat it unchanged.
		const found = await surfaced(ctx, event.prompt ?? "");
		return {
			systemPrompt: `${event.systemPrompt}\n\n${idx}`,
			...(found ? { message: { customType: SURFACE_TYPE, content: found, display: false } } : {}),
		};
	});

	// --------------------------------------------------------------------------------------- after a compaction
	async function guidance(ctx: ExtensionContext): Promise<void> {
		const s = current(ctx);
		if (processOff || s.off) return;
		const file = ctx.sessionManager.getSessionFile();
		if (nudge === undefined) {
			const r = await acp(["nudge"], ctx.cwd);
			if (!r.ok) return failed(ctx, r);
			nudge = r.stdout.trimEnd();
		}
		let tail = "";
		if (file) {
			const r = await acp(["blocks", file, "--json"], ctx.cwd);
			if (r.ok) {
				try {
					const blocks: { id: string; topic?: string | null; at?: number | null }[] =
						JSON.parse(r.stdout).blocks ?? [];
					const newest = blocks.reduce<(typeof blocks)[number] | undefined>(
						(best, b) => (best === undefined || (b.at ?? -1) >= (best.at ?? -1) ? b : best), undefined);
					if (newest) {
						const topic = newest.topic ? ` (${JSON.stringify(newest.topic)})` : "";
						tail = `\nThe compaction that just ran is block ${newest.id}${topic}. If its summary holds something a ` +
							`future session needs, keep it: memory_commit({ type, note, importance, block: "${newest.id}" }).`;
					}
				} catch {
					// no block list: the guidance still stands, without naming one
				}
			}
		}
		pi.sendMessage({ customType: GUIDANCE_TYPE, content: `${nudge}${tail}`, display: true });
	}

	pi.on("session_compact", async (_event, ctx) => {
		await guidance(ctx);
	});

	// billion-context-pi compacts through its `compress` tool; the block it made is in <session>.jsonl.acp.json
	pi.on("tool_execution_end", async (event, ctx) => {
		if (event.toolName === "compress" && !event.isError) await guidance(ctx);
	});

	// ------------------------------------------------------------------------------------------------ /memory
	pi.registerCommand("memory", {
		description: "acpmem: the memory index; `/memory recall <words>`; `/memory review` (the review queue)",
		handler: async (args, ctx) => {
			const [action, ...rest] = (args ?? "").trim().split(/\s+/).filter(Boolean);
			const show = (s: string): void => void (ctx.hasUI ? ctx.ui.notify(s, "info") : process.stdout.write(`${s}\n`));
			await ready(ctx.cwd);
			if (processOff) return warn(ctx, processOff, true);
			const s = current(ctx);
			if (!action || action === "list") {
				const r = await acp(["list", "--format", "prompt", "--session", s.id], ctx.cwd);
				return r.ok ? show(r.stdout.trimEnd()) : failed(ctx, r);
			}
			if (action === "recall") {
				if (!rest.length) return show("usage: /memory recall <words>");
				const r = await acp(["recall", rest.join(" "), "--session", s.id], ctx.cwd);
				return r.ok ? show(r.stdout.trimEnd()) : failed(ctx, r);
			}
			if (action === "review") {
				const r = await acp(["review", "--json"], ctx.cwd);
				if (!r.ok) return failed(ctx, r);
				let items: { id?: string; layer?: string; title?: string; kind?: string }[] = [];
				try {
					items = JSON.parse(r.stdout).items ?? [];
				} catch {
					return show(r.stdout.trimEnd());
				}
				if (!items.length) return show("Nothing to review.");
				const lines = items.map((i) => `#${i.id} ${i.layer ? `(${i.layer}) ` : ""}${i.title ?? ""}`.trimEnd());
				return show([`To review (${items.length}); decide with \`acp memory review\`:`, ...lines].join("\n"));
			}
			show("usage: /memory | /memory recall <words> | /memory review");
		},
	});
}
