"""Secret detection and redaction: every provider shape is caught, ordinary text is left alone."""
from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acpmem.core.redact import SecretMatch as Finding, find_secrets, redact

# Fake secrets are assembled at run time so that secret scanners do not flag this file.
ALNUM = "aB3dE5gH7jK9mN1pQ2rS4tU6vW8xY0z"


def body(n: int, alphabet: str = ALNUM) -> str:
    return (alphabet * (n // len(alphabet) + 1))[:n]


PEM = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA" + body(48) + "\n" + body(60) + "==\n"
       "-----END RSA PRIVATE KEY-----")
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9" + "." + "eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ" + "."
       + "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")

POSITIVES = [  # (text around the secret, the secret, kind)
    ("my key is {} ok", "sk-" + "proj-" + body(40) + "_" + body(20), "openai"),
    ("OPENAI_API_KEY={}", "sk-" + body(48), "openai"),
    ("legacy {}", "sk-" + body(20) + "T3Blbk" + "FJ" + body(20), "openai"),
    ("ANTHROPIC_API_KEY={}", "sk-" + "ant-api03-" + body(80) + "-" + body(6), "anthropic"),
    ("aws_access_key_id = {}", "AKIA" + "IOSFODNN7EXAMPL1", "aws-access-key-id"),
    ("session {} expires", "ASIA" + "Y34FZKBOKMUTVV7A", "aws-access-key-id"),
    ("aws_secret_access_key = {}", "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY", "aws-secret-key"),
    ("token: {}", "ghp" + "_" + body(36), "github-token"),
    ("{} was rotated", "gho" + "_" + body(36), "github-token"),
    ("x {}", "ghs" + "_" + body(36), "github-token"),
    ("pat {}", "github" + "_pat_" + body(22) + "_" + body(59), "github-token"),
    ("maps key={}", "AIza" + body(35), "google-api-key"),
    ("bot {}", "xoxb" + "-123456789012-1234567890123-" + body(24), "slack-token"),
    ("user {}", "xoxp" + "-123456789012-" + body(30), "slack-token"),
    ("post to {} daily", "https://hooks.slack.com/services/" + "T0123ABCD/B0123ABCD/" + body(24), "slack-webhook"),
    ("{}\nafter", PEM, "private-key"),
    ("auth header {} sent", JWT, "jwt"),
    ("stripe {}", "sk_" + "live_" + body(24), "stripe-key"),
    ("stripe {}", "rk_" + "test_" + body(24), "stripe-key"),
    ("password = {}", "hunter2", "credential"),
    ("DB_PASSWORD='{}'", "S3cr3t!pass", "credential"),
    ('"api_key": "{}"', "a8f5f167f44f4964e6c998dee827110c", "credential"),
    ("SECRET={}", "Zx9vQ2mL8kP4rT6wY1", "credential"),
    ("client_secret: {}", "q7Hd92kLmP0xZ4vB", "credential"),
    ("Authorization: Bearer {}", "abc123def456ghi789jkl", "bearer-token"),
    ("Authorization: token {}", body(40, "0123456789abcdef"), "bearer-token"),
    ("postgres://admin:{}@db.internal:5432/app", "s3cretPw", "url-password"),
    ("密码：{}", "Abc12345xyz", "credential"),
    ("hf {}", "hf_" + body(34), "huggingface-token"),
    ("gitlab {}", "glpat" + "-" + body(20), "gitlab-token"),
]


@pytest.mark.parametrize("template,secret,kind", POSITIVES, ids=[p[2] + str(i) for i, p in enumerate(POSITIVES)])
def test_each_secret_shape_is_found_and_redacted(template: str, secret: str, kind: str) -> None:
    text = template.format(secret)
    findings = find_secrets(text, deep=False)
    assert [f.kind for f in findings] == [kind]
    f = findings[0]
    assert text[f.start:f.end] == secret
    assert secret not in f.preview and kind in f.preview
    redacted, again = redact(text, deep=False)
    assert redacted == template.format(f"[REDACTED:{kind}]")
    assert again == findings
    assert redact(redacted, deep=False) == (redacted, [])        # redaction is stable


def test_private_key_block_without_end_line_is_removed_whole() -> None:
    text = "key:\n-----BEGIN OPENSSH PRIVATE KEY-----\n" + body(70) + "\n" + body(70) + "\n\nThe rest stays."
    redacted, findings = redact(text, deep=False)
    assert redacted == "key:\n[REDACTED:private-key]\n\nThe rest stays."
    assert [f.kind for f in findings] == ["private-key"]


@pytest.mark.parametrize("block", [
    "PuTTY-User-Key-File-2: ssh-rsa\nEncryption: none\nPublic-Lines: 1\n" + body(40) + "\nPrivate-Lines: 1\n"
    + body(40) + "\nPrivate-MAC: " + body(40, "0123456789abcdef"),
    "---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----\nComment: k\n" + body(64) + "\n---- END SSH2 ENCRYPTED PRIVATE KEY ----",
    "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n" + body(64) + "\n-----END PGP PRIVATE KEY BLOCK-----",
])
def test_other_private_key_formats_are_removed_whole(block: str) -> None:
    assert redact(f"before\n{block}\nafter, with spaces", deep=False)[0] == (
        "before\n[REDACTED:private-key]\nafter, with spaces")


def test_several_secrets_in_one_text_and_overlaps_merge() -> None:
    gh = "ghp" + "_" + body(36)
    text = f"GITHUB_TOKEN={gh}\nthen AKIA{'IOSFODNN7EXAMPL1'} and api_key: 'sk-{body(48)}'"
    redacted, findings = redact(text, deep=False)
    assert [f.kind for f in findings] == ["github-token", "aws-access-key-id", "openai"]
    assert redacted == ("GITHUB_TOKEN=[REDACTED:github-token]\nthen [REDACTED:aws-access-key-id] and "
                        "api_key: '[REDACTED:openai]'")
    starts = [f.start for f in findings]
    assert starts == sorted(starts) and all(a.end <= b.start for a, b in zip(findings, findings[1:]))


BENIGN = [
    "Session append must be re-entrant — the hook can fire while a write is in flight.",
    "The tokenizer uses cl100k_base; set max_tokens: 4096 and temperature=0.2.",
    "Fixed in commit 3fa9c2e1b7d04f5a8c6e2d1b0a9f8e7d6c5b4a39 (short: 3fa9c2e), merged from a1b2c3d.",
    'sha = "3fa9c2e1b7d04f5a8c6e2d1b0a9f8e7d6c5b4a39"',
    "request id 550e8400-e29b-41d4-a716-446655440000 failed; retry with id 6ba7b810-9dad-11d1-80b4-00c04fd430c8",
    "config lives in /home/user/.config/acpmem/settings.toml and src/acpmem/vault.py",
    "C:\\Users\\dev\\AppData\\Local\\acpmem\\index.sqlite3",
    "password = get_password()", "token = self.token", "api_key: str", "secret_name = prod-db-credentials",
    "password: ${DB_PASSWORD}", "api_key = os.environ['OPENAI_API_KEY']", "token: <your-token-here>",
    "The password must be at least 8 characters long.", "Use the token budget wisely; token counting is cheap.",
    "apiKey = userApiKey", "pwd = /home/user/projects", "auth: required", "password = None",
    "sklearn.model_selection and sk-learn are fine; ticket sk-12; ghp_short", "The basic idea is simple.",
    "def test_token_refresh_handles_expiry(self): pass", "token_count = 128000", "SECRET_KEY = settings.SECRET_KEY",
    "AWS_REGION=us-east-1", "passwordless = true", "access_token_ttl: 3600",
    "使用密码学的基本原理。令牌桶算法限流，密钥轮换每 90 天一次。",
    "Use `AbstractSingletonProxyFactoryBean` and `getUserAccessTokenFromCache()` in UserService.java.",
    "https://github.com/openai/openai-python/blob/main/src/openai/_client.py#L120",
    "base64 of hello is aGVsbG8=; the image is data:image/png;base64,iVBORw0KGgo=",
    "Embedding model all-MiniLM-L6-v2 scored R@5 0.546 on LoCoMo; BM25 0.481.",
]


@pytest.mark.parametrize("deep", [False, True])
def test_ordinary_text_has_no_findings(deep: bool) -> None:
    for text in BENIGN:
        assert find_secrets(text, deep=deep) == [], text
        assert redact(text, deep=deep) == (text, [])


def test_detect_secrets_layer_adds_what_the_regex_layer_misses() -> None:
    twilio = "SK" + body(32, "0123456789abcdef")
    text = f"twilio api key {twilio} in the env"
    assert find_secrets(text, deep=False) == []
    findings = find_secrets(text, deep=True)
    assert [(f.kind, text[f.start:f.end]) for f in findings] == [("twilio-key", twilio)]
    assert twilio not in findings[0].preview


def test_default_does_not_import_detect_secrets() -> None:
    code = ("import sys, acpmem.core.redact as s\n"
            "assert s.find_secrets('password = hunter2')[0].kind == 'credential'\n"
            "print('detect_secrets' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def _fresh(code: str) -> list[str]:
    """What ``code`` prints in an interpreter of its own (nothing imported yet), split into words."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


TWILIO_CHECK = ("twilio = 'SK' + '0123456789abcdef' * 2\n"
                "from acpmem.core import redact\n"
                "got = redact.find_secrets(f'twilio api key {twilio} in the env', deep=True)\n"
                "assert [f.kind for f in got] == ['twilio-key'], got\n")


def test_detect_secrets_loads_without_requests_which_later_importers_still_get_whole() -> None:
    """Its plugins import ``requests`` for ``verify`` alone (never called): it is left out of their import, and
    whoever imports it afterwards, or asks a plugin module for it, gets the real module."""
    code = TWILIO_CHECK + (
        "import sys\n"
        "print('requests' in sys.modules)\n"
        "import detect_secrets.plugins.base as base, requests\n"
        "assert type(requests).__name__ == 'module' and sys.modules['requests'] is requests\n"
        "assert base.requests.exceptions.RequestException is requests.exceptions.RequestException\n"
        "import requests.adapters\n"
        "print(requests.adapters.HTTPAdapter.__name__)\n")
    assert _fresh(code) == ["False", "HTTPAdapter"]


def test_a_name_of_requests_asked_outside_detect_secrets_while_it_loads_is_the_real_one() -> None:
    """The stand-in answers a placeholder only to a detect-secrets module as it loads (another thread importing
    ``requests`` meanwhile gets the real thing)."""
    code = ("import sys\n"
            "from acpmem.core import redact\n"
            "stand_in = redact._RequestsLater('requests')\n"
            "sys.modules['requests'] = stand_in\n"
            "session = stand_in.Session\n"
            "import requests\n"
            "assert session is requests.Session and sys.modules['requests'] is requests, session\n"
            "print('ok')\n")
    assert _fresh(code) == ["ok"]


def test_where_detect_secrets_cannot_load_without_requests_it_is_imported_plainly() -> None:
    """Another version of either package that needs ``requests`` as it loads (here, one plugin module refusing
    the stand-in): the import is undone and done plainly, and the scan is the same."""
    code = ("import sys, importlib.abc\n"
            "class Refuse(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'detect_secrets.plugins.aws' and \\\n"
            "                type(sys.modules.get('requests')).__name__ == '_RequestsLater':\n"
            "            raise ImportError('needs the real requests')\n"
            "sys.meta_path.insert(0, Refuse())\n"
            + TWILIO_CHECK +
            "import detect_secrets.plugins.aws as aws\n"
            "print(type(aws.requests).__name__, type(sys.modules['requests']).__name__)\n")
    assert _fresh(code) == ["module", "module"]


def test_findings_are_values() -> None:
    f = find_secrets("password = hunter2")[0]
    assert isinstance(f, Finding)
    with pytest.raises(AttributeError):
        f.kind = "x"  # type: ignore[misc]


SECRETS = st.one_of(
    st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=36, max_size=36)
    .filter(lambda s: any(c.isdigit() for c in s) and any(c.isalpha() for c in s)).map(lambda s: "ghp" + "_" + s),
    st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", min_size=16, max_size=16).map(lambda s: "AKIA" + s),
    st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=40, max_size=60)
    .filter(lambda s: any(c.isdigit() for c in s) and any(c.isalpha() for c in s)).map(lambda s: "sk-" + s),
)
PROSE = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=80)


@settings(max_examples=200, deadline=None)
@given(before=PROSE, secret=SECRETS, after=PROSE)
def test_a_secret_anywhere_in_prose_never_survives_redaction(before: str, secret: str, after: str) -> None:
    text = f"{before} {secret} {after}"
    redacted, findings = redact(text, deep=False)
    assert secret not in redacted
    assert findings and all(secret not in f.preview for f in findings)
    assert redact(redacted, deep=False)[0] == redacted


def test_a_redaction_marker_followed_by_a_value_is_not_an_assignment() -> None:
    """Found by the property above: "[REDACTED:github-token] :001234567:" read as `token: 001234567`, so a second
    redaction changed the text again."""
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    once, findings = redact(f"{token} :001234567:", deep=False)
    assert once == "[REDACTED:github-token] :001234567:" and [f.kind for f in findings] == ["github-token"]
    assert redact(once, deep=False)[0] == once
    # a real assignment after a marker is still found
    twice, found = redact(f"{once} token: 9f8e7d6c5b4a39281706", deep=False)
    assert "9f8e7d6c5b4a39281706" not in twice and [f.kind for f in found] == ["credential"]
