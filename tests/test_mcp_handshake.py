"""`acp memory serve` answers the MCP `initialize` itself, before importing the `mcp` package (clients that start
their servers asynchronously leave out a server that answers late); the package then gets the same request replayed
and its own answer is not sent twice. These tests talk raw JSON-RPC lines to a real server process."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from acpmem.integrations.mcp_server import HANDSHAKE_VERSIONS, early_answer

ACP = str(Path(sys.executable).parent / "acp")


def _env(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("CLAUDE_CODE_SESSION_ID", "CLAUDE_PROJECT_DIR")}
    env.update(ACPMEM_USER_VAULT="none", HOME=str(tmp_path))
    return env


def _talk(vault_root: Path, tmp_path, messages: list, answers: int) -> tuple[list[dict], str]:
    """Send ``messages`` (dicts, or raw lines) one per line, read ``answers`` lines back, then close stdin (as a
    client does when it is done: the server cancels what is still running at end of input); return every line the
    server wrote and its stderr."""
    p = subprocess.Popen([ACP, "memory", "serve", "--vault", str(vault_root)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(tmp_path))
    try:
        p.stdin.write("".join((m if isinstance(m, str) else json.dumps(m)) + "\n" for m in messages).encode())
        p.stdin.flush()
        out = [json.loads(p.stdout.readline()) for _ in range(answers)]
        p.stdin.close()
        out += [json.loads(x) for x in p.stdout.read().decode().splitlines() if x.strip()]
        err = p.stderr.read().decode()
        assert p.wait(timeout=60) == 0, err
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()
        p.stderr.close()
    return out, err


def _init(ident, version="2025-06-18"):
    return {"jsonrpc": "2.0", "id": ident, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


def test_the_copied_protocol_versions_are_the_mcp_packages():
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    assert HANDSHAKE_VERSIONS == HANDSHAKE_PROTOCOL_VERSIONS


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25", "1999-01-01"])
def test_one_answer_to_initialize_the_packages_own_and_the_session_goes_on(vault, tmp_path, version):
    msgs = [_init(7, version), {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 8, "method": "tools/list"}, {"jsonrpc": "2.0", "id": 9, "method": "resources/list"},
            {"jsonrpc": "2.0", "id": 10, "method": "resources/templates/list"},
            {"jsonrpc": "2.0", "id": 11, "method": "resources/read", "params": {"uri": "memory://index"}}]
    out, err = _talk(vault.root, tmp_path, msgs, 5)
    assert [m.get("id") for m in out] == [7, 8, 9, 10, 11]   # each answered once, in order
    assert out[0] == json.loads(early_answer(json.dumps(_init(7, version)).encode())[1])
    assert out[0]["result"]["protocolVersion"] == (version if version in HANDSHAKE_VERSIONS else "2025-11-25")
    assert "differs" not in err                          # the package's own answers were the same
    assert out[3]["result"]["resourceTemplates"][0]["uriTemplate"] == "memory://entry/{id}/source"
    assert "Long-term memory" in out[4]["result"]["contents"][0]["text"]
    assert {t["name"] for t in out[1]["result"]["tools"]} == {"memory_commit", "memory_recall"}


BLOCK_MCP = """
import sys, time
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("mcp", "mcp_types", "anyio", "pydantic"):
            time.sleep(0.5)   # the import thread fails, late: the main thread answers meanwhile
            raise ImportError("blocked by the test: " + name)
sys.meta_path.insert(0, Block())
from acpmem.cli.main import acp_main
sys.argv = ["acp", "memory", "serve", "--vault", sys.argv[1]]
acp_main()
"""


def test_initialize_and_tools_list_are_answered_without_the_mcp_package(vault, tmp_path):
    # with mcp (and what it brings) made unimportable, the answer to initialize is still written: nothing heavy
    # stands between the client's request and its answer
    lines = [_init(3), {"jsonrpc": "2.0", "method": "notifications/initialized"},
             {"jsonrpc": "2.0", "id": 4, "method": "tools/list"}]
    p = subprocess.run([sys.executable, "-c", BLOCK_MCP, str(vault.root)],
                       input="".join(json.dumps(m) + "\n" for m in lines).encode(),
                       capture_output=True, env=_env(tmp_path), timeout=120)
    out = [json.loads(x) for x in p.stdout.decode().splitlines() if x.strip()]
    assert [m["id"] for m in out] == [3, 4], p.stderr
    assert out[0]["result"]["serverInfo"]["name"] == "acpmem"
    assert {t["name"] for t in out[1]["result"]["tools"]} == {"memory_commit", "memory_recall"}
    assert b"blocked by the test" in p.stderr     # the import came after, and failed there


def test_the_session_goes_on_while_the_client_keeps_stdin_open(vault, tmp_path):
    p = subprocess.Popen([ACP, "memory", "serve", "--vault", str(vault.root)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(tmp_path))
    try:
        p.stdin.write((json.dumps(_init("a")) + "\n").encode())
        p.stdin.flush()
        first = json.loads(p.stdout.readline())
        assert first["id"] == "a" and first["result"]["serverInfo"]["name"] == "acpmem"
        p.stdin.write((json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n"
                       + json.dumps({"jsonrpc": "2.0", "id": "b", "method": "resources/list"}) + "\n").encode())
        p.stdin.flush()
        second = json.loads(p.stdout.readline())
        assert second["id"] == "b" and second["result"]["resources"][0]["uri"] == "memory://index"
    finally:
        p.stdin.close()
        p.wait(timeout=60)
        p.stdout.close()
        p.stderr.close()


def test_a_first_line_that_is_not_a_plain_initialize_is_left_to_the_package(vault, tmp_path):
    assert early_answer(b"not json") is None
    assert early_answer(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()) is None
    bad = _init(1)
    del bad["params"]["clientInfo"]
    assert early_answer(json.dumps(bad).encode()) is None
    out, _ = _talk(vault.root, tmp_path, [bad], 1)
    assert len(out) == 1 and out[0]["id"] == 1 and "error" in out[0]   # the package's own refusal, once


def test_a_broken_settings_file_leaves_a_working_server_and_a_warning(vault, tmp_path):
    """A teammate's acpmem.toml that does not load never takes the tools away: the server answers with the last good
    settings (here the defaults) and says why on stderr, the client's log."""
    (vault.root / "acpmem.toml").write_text("[surface\nnot toml")
    msgs = [_init(1), {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]
    out, err = _talk(vault.root, tmp_path, msgs, 2)
    assert [m["id"] for m in out] == [1, 2]
    assert {t["name"] for t in out[1]["result"]["tools"]} == {"memory_commit", "memory_recall"}
    assert "acpmem.toml" in err and "last good settings" in err
