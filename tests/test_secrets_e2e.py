"""Secrets never reach an entry file, a commit, the index or a log, end to end.

Real secrets-shaped strings (built at run time, so this file does not itself trip secret scanners) are planted in
hand-written entries, in a hand edit through ``acp memory edit --from``, in what a model writes through the fork (the
fake OpenAI server), in the transcript the offline extractor quotes and in a commit note. Then every byte acpmem keeps
is searched: every object git stores (``git cat-file --batch-all-objects``, packed or loose), every file under
``.git`` raw and zlib-inflated, and every file under ``.acpmem`` (the catalog and search index, logs, ledgers, pending
requests, drafts).
"""
from __future__ import annotations

import json
from pathlib import Path

import helpers_proc as hp
from openai_server import reply
from acpmem.upkeep import doctor as health
from acpmem.vault import reader
from acpmem.read import resident
from acpmem.read.retrieval import recall
from acpmem.core.redact import find_secrets
from acpmem.vault.writer import Vault
from helpers_person import set_person

CHAT = Path(__file__).parent / "fixtures" / "transcripts" / "openai_chat.json"


def planted() -> dict[str, tuple[str, str]]:
    """kind -> (text to plant, the secret part that must never be stored)."""
    pem_body = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw7onLRnrq0"
    pairs = {
        "openai": "sk-" + "T9x2Lq7Vb4Nc8Zr1Wm6Kp3Hy5Js0Df2Ga7Qe",
        "openai-proj": "sk-proj-" + "Pq4Rk9_Xz2Lm7Nb3Vc8Wd1Fe6Gh5Jk0Tt",
        "anthropic": "sk-ant-api03-" + "Hn3Kd8Pq2Lx7Vb4Zr9Mc1Wf6Jt0Gy5Sa",
        "aws-id": "AKIA" + "Q7WE2RT5YU9IOP3A",
        "aws-secret": "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYz9Q2kL5mN8pR",
        "github": "ghp_" + "Zq8Xw3Lm7Kd2Pv9Nb4Rt6Yh1Jc5Gs0Fa3Ue8",
        "google": "AIza" + "SyD4k9Lq2Xv7Nm3Pb8Zr1Wc6Tj0Hg5Fd2Ka",
        "slack": "xoxb-" + "2741938561-" + "Qm7Lk2Px9Vn4Zb8R",
        "jwt": "eyJhbGciOiJIUzI1NiJ9" + ".eyJzdWIiOiJhY3BtZW0tdGVzdCJ9" + ".Xq7Lm2Pk9Vb4Nz8Rc1Wd6Fj",
        "password": "Tr0ub4dor" + "&3xQzP9vLm",
        "pem": pem_body,
    }
    texts = {
        "aws-secret": f"aws_secret_access_key = {pairs['aws-secret']}",
        "password": f'db_password = "{pairs["password"]}"',
        "pem": "-----BEGIN RSA PRIVATE KEY-----\n" + pem_body + "\nlZmXw2Yx9QmKp3Lr8Vn5Tb0Hc7Gj4Fd6Sa1Zq\n"
               "-----END RSA PRIVATE KEY-----",
    }
    return {k: (texts.get(k, v), v) for k, v in pairs.items()}


def all_planted_text() -> str:
    return "\n".join(f"{i}. {text}" for i, (text, _) in enumerate(planted().values(), 1))


def assert_nowhere(root: Path, secrets: dict[str, tuple[str, str]] | None = None) -> None:
    blob = hp.every_stored_byte(root)
    found = [k for k, (_, needle) in (secrets or planted()).items() if needle.encode() in blob]
    assert not found, f"planted secrets stored by acpmem: {found}"


def test_the_planted_strings_are_secrets():
    for kind, (text, needle) in planted().items():
        found = find_secrets(text, deep=False)
        assert found and needle in text, kind
        assert any(text[f.start:f.end].find(needle[:12]) >= 0 or needle.find(text[f.start:f.end][:12]) >= 0
                   for f in found), kind


def test_a_label_before_an_assignment_does_not_hide_the_secret():
    for kind in ("password", "aws-secret"):
        text, needle = planted()[kind]
        assert find_secrets(f"- {kind}: {text}", deep=False), kind


def test_hand_written_entries_with_secrets_are_never_committed_indexed_or_logged(vault, cli):
    root = vault.root
    vault.write_entries([hp.make_entry("good01", "Deploy notes", "Deploys go through the queue.")],
                        subject="add", why="t")
    # a new file written by hand, and a hand edit of a committed entry, both with secrets
    new_rel = "entries/hand01-keys.md"
    (root / new_rel).write_text(
        "---\nid: hand01\ntitle: Keys for the deploy\ntype: reference\nimportance: 5\n"
        f"created: 2026-11-29T12:00:00Z\n---\nzebra-marker\n{all_planted_text()}\n")
    good = next((root / "entries").glob("good01-*.md"))
    good.write_text(good.read_text() + f"Also: {planted()['github'][0]} zebra-marker\n")
    vault.close()
    v = Vault(root, clock=lambda: hp.PINNED)
    try:
        v.write_entries([hp.make_entry("next01", "Next", "Another entry.")], subject="add", why="t")
        entries, problems = reader.list_entries(v)
        assert {p.path for p in problems} >= {new_rel, good.relative_to(root).as_posix()}
        assert all("secret" in p.reason for p in problems)
        assert recall(v, "zebra-marker") == []
        assert "hand01" not in resident.resident_index(v)
        rep = health.check_vault(v, fix=True)
        assert any("secret" in f.what for f in rep.findings)
    finally:
        v.close()
    for args in (("list", "--json"), ("recall", "zebra-marker"), ("doctor",), ("log",)):
        res = cli("memory", "--vault", str(root), *args)
        for _, needle in planted().values():
            assert needle not in res.stdout + res.stderr
    assert new_rel not in hp.head_files(root)
    assert "zebra-marker" not in hp.git_out(root, "show", f"HEAD:{good.relative_to(root).as_posix()}")
    assert_nowhere(root)


def test_edit_from_a_file_with_a_secret_is_refused_and_nothing_is_kept(vault, cli, tmp_path):
    root = vault.root
    vault.write_entries([hp.make_entry("good01", "Deploy notes", "Deploys go through the queue.")],
                        subject="add", why="t")
    path = next((root / "entries").glob("good01-*.md"))
    draft = tmp_path / "draft.md"
    draft.write_text(path.read_text() + f"token: {planted()['slack'][0]}\n{planted()['pem'][0]}\n")
    vault.close()
    res = cli("memory", "--vault", str(root), "edit", "good01", "--from", str(draft))
    assert res.returncode != 0 and "secret" in res.stderr
    assert planted()["slack"][1] not in path.read_text()
    assert_nowhere(root, {k: planted()[k] for k in ("slack", "pem")})


def test_fork_output_with_secrets_is_redacted_before_anything_is_stored(vault, openai_server):
    from acpmem.write import requests, worker

    toml = vault.root / "acpmem.toml"
    text = toml.read_text()
    set_person("extraction", {"base_url": openai_server.base_url, "model": "test-model"})   # the person's own
    text = text.replace("max_retries = 3", "max_retries = 0")
    toml.write_text(text)
    hp.git_out(vault.root, "commit", "-q", "-m", "point at the fake server", "--", "acpmem.toml")
    vault.close()
    v = Vault(vault.root, clock=lambda: hp.PINNED)
    openai_server.enqueue(reply.writes(
        reply.write(f"- The deploy uses these credentials:\n{all_planted_text()}",
                    title=f"Deploy credentials {planted()['openai'][0]}")))
    req = requests.make_request(types=v.settings.types, type="reference", note="deploy credentials", importance=6,
                             session="s1", seq=6, transcript=CHAT, host_tools=None, lang="en", created=v.now(),
                             request_id=requests.new_request_id(v.rng))
    requests.save_request(v.state_dir, req, new=True)
    try:
        (out,) = worker.process_now(v, [req.id])
        assert out.status == "written", out
        loaded = v.load()
        assert not loaded.problems, loaded.problems
        (entry,) = loaded.entries
        assert "[REDACTED:" in entry.body and "[REDACTED:" in entry.title
        assert recall(v, "deploy credentials")[0].entry.id == entry.id
    finally:
        v.close()
    assert_nowhere(vault.root)


def test_the_offline_extractor_never_quotes_a_secret_from_the_transcript(vault, cli, tmp_path):
    chat = json.loads(CHAT.read_text())
    chat[4]["content"] += " The staging key is " + planted()["anthropic"][0] + " and " + planted()["aws-id"][0] + \
        "; " + planted()["password"][0] + "."
    transcript = tmp_path / "chat.json"
    transcript.write_text(json.dumps(chat))
    root = vault.root
    vault.close()
    res = cli("memory", "--vault", str(root), "commit", "--type", "lesson", "--note",
              "re-entrant append and the staging key", "--importance", "7", "--session", "s1", "--seq", "6",
              "--transcript", str(transcript), "--wait", "--extractor", "offline", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)["outcome"]
    assert out["status"] == "written"
    body = (root / out["entries"][0]["path"]).read_text()
    assert "per-session lock" in body and "[REDACTED:" in body
    assert_nowhere(root, {k: planted()[k] for k in ("anthropic", "aws-id", "password")})


def test_a_secret_in_the_commit_note_is_not_stored(vault, cli):
    root = vault.root
    vault.close()
    res = cli("memory", "--vault", str(root), "commit", "--type", "reference", "--note",
              f"the CI token is {planted()['github'][0]}", "--importance", "5", "--session", "s1", "--seq", "6",
              "--transcript", str(CHAT), "--wait", "--extractor", "offline", "--json")
    for _, needle in planted().values():
        assert needle not in res.stdout + res.stderr
    assert_nowhere(root, {"github": planted()["github"]})


def test_a_secret_split_by_a_zero_width_character_is_refused_on_remember_and_edit(vault, cli, tmp_path):
    """Framing strips the zero-width character, so the model would be served the whole, working token: the scan
    reads the text as framing shows it."""
    root = vault.root
    vault.write_entries([hp.make_entry("good01", "Deploy notes", "Deploys go through the queue.")],
                        subject="add", why="t")
    vault.close()
    key = planted()["github"][0]
    hidden = key[:10] + "\u200b" + key[10:]
    assert find_secrets(hidden) and find_secrets(hidden)[0].end == len(hidden)   # the span covers the stored text
    res = cli("memory", "--vault", str(root), "remember", f"The CI token is {hidden}")
    assert res.returncode == 1 and "secret" in res.stderr, res.stdout + res.stderr
    path = next((root / "entries").glob("good01-*.md"))
    draft = tmp_path / "draft.md"
    draft.write_text(path.read_text() + f"token {key[:4]}\u2060{key[4:]}\n")
    res = cli("memory", "--vault", str(root), "edit", "good01", "--from", str(draft))
    assert res.returncode == 1 and "secret" in res.stderr, res.stdout + res.stderr
    assert key[10:] not in path.read_text()
    assert len(hp.git_out(root, "log", "--format=%H").split()) == 2            # init and the add: nothing else
