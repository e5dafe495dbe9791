"""Secret detection and redaction: secrets never reach an entry, a commit, the index or a log.

Pure functions over text. Two layers:

- a fast regex layer owned here, always used: provider keys with a recognisable shape (OpenAI, Anthropic, AWS,
  GitHub, Google, Slack, Stripe, ...), PEM private-key blocks, JWTs, passwords in URLs, bearer tokens and
  credential-looking values assigned to secret-sounding names;
- the plugins of Yelp's ``detect-secrets`` as a second opinion. Loading them costs about 50 ms of CPU (115 ms
  with the ``requests`` they import for ``verify``, which is left out: ``_import_detect_secrets``), too much for a
  hook, so by default it joins only when the process has already imported it; ``deep=True`` pays the import (a
  write does), ``deep=False`` never.

``redact`` replaces each finding by ``[REDACTED:<kind>]``; a ``SecretMatch`` carries only a preview that names the
kind and the public prefix, never the secret.
"""
from __future__ import annotations

import base64
import binascii
import bisect
import functools
import json
import math
import re
import sys
from collections import Counter

from acpmem.core.framing import without_invisible
from acpmem.core.values import Value

REDACTED_RE = re.compile(r"\[REDACTED:[a-z0-9-]+\]")


class SecretMatch(Value):
    """One secret in a text: its kind, its span ``text[start:end]`` and a preview safe to print or log."""

    kind: str
    start: int
    end: int
    preview: str


# --- the regex layer --------------------------------------------------------------------------------------------

# Private keys are found block-wise by _key_blocks (a lazy regex from each BEGIN to its END is quadratic when
# END is missing).
_BLOCKS = [  # (BEGIN line, END line, public prefix)
    (re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"),
     re.compile(r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"), "-----BEGIN"),
    (re.compile(r"---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----"),
     re.compile(r"---- END SSH2 ENCRYPTED PRIVATE KEY ----"), "---- BEGIN"),
    (re.compile(r"PuTTY-User-Key-File-\d+:"), re.compile(r"Private-MAC:[^\n]*"), "PuTTY"),
]
# Without an END line, the block is the BEGIN line and the key-body lines (base64 or "Header: value") after it.
_KEY_BODY = re.compile(r"[^\n]*(?:\r?\n[ \t]*(?:[A-Za-z0-9+/=]+|[A-Za-z-]+:[^\n]*))*")

# (kind, regex source, group holding the secret, public prefix shown in previews, literals one of which must occur).
# The literal test skips most rules on most texts, and a rule is compiled only when first needed (re caches it):
# importing this module stays cheap for the hook paths that never scan. Specific shapes come first: when spans
# overlap, the earlier rule names the merged finding.
_B = r"(?<![A-Za-z0-9_])"          # left boundary: not inside a longer word
_E = r"(?![A-Za-z0-9_])"           # right boundary
_SPECIFIC: list[tuple[str, str, int, str, tuple[str, ...]]] = [
    ("anthropic", _B + r"sk-ant-[A-Za-z0-9_-]{20,}", 0, "sk-ant-", ("sk-ant-",)),
    ("openai", _B + r"sk-[A-Za-z0-9_-]*[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9_-]{20,}",
     0, "sk-", ("T3BlbkFJ",)),
    ("openai", _B + r"sk-(?:proj|svcacct|admin|None)-[A-Za-z0-9_-]{20,}", 0, "sk-", ("sk-",)),
    ("openai", _B + r"sk-(?=[A-Za-z0-9]*[0-9])(?=[A-Za-z0-9]*[A-Za-z])[A-Za-z0-9]{32,}" + _E,
     0, "sk-", ("sk-",)),
    ("aws-access-key-id", r"(?<![A-Z0-9])(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}(?![A-Z0-9])",
     0, "", ("AKIA", "ASIA", "ABIA", "ACCA", "A3T")),
    ("aws-secret-key",
     r"(?i:aws[A-Za-z0-9_.-]{0,30}?(?:secret|key)[A-Za-z0-9_.-]{0,20}['\"]?\s*(?:=|:=|:|=>)\s*['\"]?)"
     r"([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])", 1, "", ("aws", "AWS", "Aws")),
    ("github-token", _B + r"(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,255}" + _E,
     0, "gh", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")),
    ("github-token", _B + r"github_pat_[A-Za-z0-9_]{22,255}", 0, "github_pat_", ("github_pat_",)),
    ("gitlab-token", _B + r"gl(?:pat|dt|rt|ptt|oas)-[A-Za-z0-9_-]{20,}", 0, "gl", ("gl",)),
    ("google-api-key", _B + r"AIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])", 0, "AIza", ("AIza",)),
    ("google-oauth", _B + r"GOCSPX-[A-Za-z0-9_-]{24,}", 0, "GOCSPX-", ("GOCSPX-",)),
    ("google-oauth", _B + r"ya29\.[A-Za-z0-9_-]{20,}", 0, "ya29.", ("ya29.",)),
    ("slack-webhook", r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/+-]{8,}",
     0, "https://hooks.slack.com/", ("hooks.slack.com",)),
    ("slack-token", _B + r"xox[abposre]-(?:[0-9]+-)?[A-Za-z0-9-]{10,}", 0, "xox", ("xox",)),
    ("slack-token", _B + r"xapp-\d-[A-Za-z0-9-]{10,}", 0, "xapp-", ("xapp-",)),
    ("stripe-key", _B + r"(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{10,}", 0, "", ("k_live_", "k_test_")),
    ("stripe-key", _B + r"whsec_[0-9A-Za-z]{20,}", 0, "whsec_", ("whsec_",)),
    ("huggingface-token", _B + r"hf_[A-Za-z0-9]{30,}" + _E, 0, "hf_", ("hf_",)),
    ("npm-token", _B + r"npm_[A-Za-z0-9]{36}" + _E, 0, "npm_", ("npm_",)),
    ("pypi-token", _B + r"pypi-AgE[A-Za-z0-9_-]{50,}", 0, "pypi-", ("pypi-AgE",)),
    ("sendgrid-key", _B + r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}", 0, "SG.", ("SG.",)),
    ("groq-key", _B + r"gsk_[A-Za-z0-9]{40,}" + _E, 0, "gsk_", ("gsk_",)),
    ("xai-key", _B + r"xai-[A-Za-z0-9]{60,}" + _E, 0, "xai-", ("xai-",)),
    ("jwt", _B + r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*", 0, "eyJ", ("eyJ",)),
    ("url-password", r"\b[a-zA-Z][a-zA-Z0-9+.-]{1,20}://[^\s:/@]{1,64}:([^\s/@]{1,128})@",
     1, "", ("://",)),
]

# A name that says "this holds a secret", ending the key (so `tokenizer` and `passwordless` do not count).
_SECRET_NAME = (r"(?:password|passwd|passphrase|pwd|secret|api[_-]?key|apikey|access[_-]?key|secret[_-]?key"
                r"|private[_-]?key|auth[_-]?key|client[_-]?secret|token|credentials?|auth|密码|口令|密钥|秘钥|令牌)")
_ASSIGN = re.compile(
    r"(?i)(?P<name>" + _SECRET_NAME + r")(?![A-Za-z0-9])"
    r"['\"\]]{0,2}[ \t]*(?:=|:=|:|=>|：|::)[ \t]*"
    r"(?:(?P<q>['\"`])(?P<qv>[^'\"`\r\n]{1,300})(?P=q)|(?P<v>[^\s'\"`,;]{1,300}))")
# Every _SECRET_NAME and _BEARER key contains one of these (lowercase).
_NAME_NEEDLES = ("pass", "pwd", "secret", "key", "token", "credential", "auth", "bearer", "basic")
_KEY_TAIL = re.compile(r"[A-Za-z0-9_.-]{0,40}$")
_BEARER = re.compile(r"(?i)\b(?P<key>bearer|token|basic)[ \t]+(?P<v>[A-Za-z0-9._~+/=-]{16,})")
_PASSWORDISH = re.compile(r"(?i)(?:password|passwd|passphrase|pwd|密码|口令)$")

_PLACEHOLDER_WORDS = {
    "none", "null", "nil", "true", "false", "undefined", "required", "optional", "changeme", "password", "secret",
    "example", "redacted", "string", "str", "bytes", "int", "empty", "hidden", "dummy", "test", "todo",
}


def _entropy(s: str) -> float:
    counts = Counter(s)
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _classes(s: str) -> int:
    return (any(c.islower() for c in s) + any(c.isupper() for c in s) + any(c.isdigit() for c in s)
            + any(not c.isalnum() for c in s))


# kebab-case, snake_case, dotted names, paths
_WORDS = re.compile(r"[~./\\]*[A-Za-z]+(?:[-_./\\]+[A-Za-z]+)*[/\\]?")
_CAMEL = re.compile(r"[A-Za-z][a-z]+(?:[A-Z][a-z]+)+|[a-z]+")       # camelCase / CamelCase / a plain word
_CODE = re.compile(r"^[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*(?:\(.*|\[.*)?$")


def _credential_like(value: str, passwordish: bool) -> bool:
    """Is an assigned value a real credential rather than a placeholder, a type, a path or code?"""
    v = value.strip()
    low = v.lower()
    if not v or REDACTED_RE.fullmatch(v) or low in _PLACEHOLDER_WORDS:
        return False
    if any(m in v for m in ("${", "{{", "%(", "<", ">", "os.environ", "getenv", "process.env")) or v[0] in "$%@&*":
        return False
    if len(set(v)) <= 2 or "xxxx" in low or "example" in low or "your" in low or "placeholder" in low:
        return False
    if _WORDS.fullmatch(v) or _CAMEL.fullmatch(v) or v.isdigit():
        return False
    if any(c.isspace() for c in v):
        return False
    if _CODE.match(v) and ("(" in v or "[" in v or ("." in v and not any(c.isdigit() for c in v))):
        return False
    if passwordish:
        return len(v) >= 6 and _classes(v) >= 2 and _entropy(v) >= 2.3
    if len(v) >= 20 and _entropy(v) >= 3.5:
        return True
    return len(v) >= 10 and _classes(v) >= 2 and _entropy(v) >= 3.0 and any(c.isdigit() for c in v)


def _jwt_valid(token: str) -> bool:
    head = token.split(".", 1)[0]
    try:
        decoded = base64.urlsafe_b64decode(head + "=" * (-len(head) % 4))
        return isinstance(json.loads(decoded), dict)
    except (binascii.Error, ValueError):
        return False


def _preview(kind: str, prefix: str, secret: str, key: str = "") -> str:
    shown = prefix if prefix and secret.startswith(prefix) and len(secret) > len(prefix) + 8 else ""
    where = f"{key}=" if key else ""
    return f"{kind}: {where}{shown}…({len(secret)} chars)"


def _key_blocks(text: str) -> list[tuple[int, SecretMatch]]:
    out: list[tuple[int, SecretMatch]] = []
    for begin_re, end_re, prefix in _BLOCKS:
        ends = [m.end() for m in end_re.finditer(text)]
        for m in begin_re.finditer(text):
            i = bisect.bisect_left(ends, m.end())
            stop = ends[i] if i < len(ends) else _KEY_BODY.match(text, m.end()).end()
            preview = _preview("private-key", prefix, text[m.start():stop])
            out.append((0, SecretMatch("private-key", m.start(), stop, preview)))
    return out


@functools.lru_cache(maxsize=1)
def _any_needle() -> re.Pattern:
    """One search for every specific rule's needles: most text has none, and then no rule needs a look."""
    return re.compile("|".join(re.escape(n) for *_, needles in _SPECIFIC for n in needles))


def _regex_findings(text: str) -> list[tuple[int, SecretMatch]]:
    out = _key_blocks(text) if "PRIVATE KEY" in text or "PuTTY-User-Key-File" in text else []
    for rank, (kind, pattern, group, prefix, needles) in enumerate(_SPECIFIC if _any_needle().search(text) else ()):
        if not any(n in text for n in needles):
            continue
        for m in re.finditer(pattern, text):          # compiled on first use, then from re's cache
            secret = m.group(group)
            if REDACTED_RE.fullmatch(secret) or kind == "jwt" and not _jwt_valid(secret):
                continue
            out.append((rank, SecretMatch(kind, m.start(group), m.end(group), _preview(kind, prefix, secret))))
    generic = len(_SPECIFIC)
    # Both generic rules need a secret-ish name; most text has none, and the case-blind search is the slow part.
    # (Only for ASCII text: case-blind matching also folds characters such as the long s that lower() keeps.)
    if text.isascii():
        lower = text.lower()
        if not any(n in lower for n in _NAME_NEEDLES):
            return out
    # Our own markers name a kind ("[REDACTED:github-token]") that reads like a secret name; one followed by
    # ": value" must not be taken for an assignment, or redacting twice would not give the same text.
    markers = [(r.start(), r.end()) for r in REDACTED_RE.finditer(text)] if "[REDACTED:" in text else []
    pos = 0
    while (m := _ASSIGN.search(text, pos)) is not None:
        if any(a <= m.start("name") < b for a, b in markers):
            pos = m.end("name")
            continue
        group = "qv" if m.group("qv") is not None else "v"
        value, name = m.group(group), m.group("name")
        tail = _KEY_TAIL.search(text, max(0, m.start() - 40), m.start()).group()
        key = name if _credential_like(tail, False) else tail + name      # the preview must not leak a secret
        if _credential_like(value, bool(_PASSWORDISH.search(name))):
            out.append((generic, SecretMatch("credential", m.start(group), m.end(group),
                                         _preview("credential", "", value, key))))
            pos = m.end()
        else:
            pos = m.end("name")  # a label (`password: db_password = "…"`) must not hide the assignment after it
    for m in _BEARER.finditer(text):
        value = m.group("v")
        if _credential_like(value, False) and any(c.isdigit() for c in value):
            out.append((generic, SecretMatch("bearer-token", m.start("v"), m.end("v"),
                                         _preview("bearer-token", "", value, m.group("key")))))
    return out


# --- the detect-secrets layer -----------------------------------------------------------------------------------

# detect-secrets plugin type -> our kind. Left out on purpose: public IPs (not secrets), hex high entropy (flags
# quoted git SHAs), private keys (our block rule is a superset and removes the whole block, not one line).
_DS_KINDS = {
    "AWS Access Key": "aws-secret-key", "Artifactory Credentials": "artifactory-token",
    "Azure Storage Account access key": "azure-storage-key", "Basic Auth Credentials": "url-password",
    "Cloudant Credentials": "cloudant-credential", "Discord Bot Token": "discord-token",
    "GitHub Token": "github-token", "GitLab Token": "gitlab-token", "Base64 High Entropy String": "credential",
    "IBM Cloud IAM Key": "ibm-cloud-key", "IBM COS HMAC Credentials": "ibm-cos-key", "JSON Web Token": "jwt",
    "Secret Keyword": "credential", "Mailchimp Access Key": "mailchimp-key", "NPM tokens": "npm-token",
    "OpenAI Token": "openai", "PyPI Token": "pypi-token", "SendGrid API Key": "sendgrid-key",
    "Slack Token": "slack-token", "SoftLayer Credentials": "softlayer-key", "Square OAuth Secret": "square-secret",
    "Stripe Access Key": "stripe-key", "Telegram Bot Token": "telegram-token", "Twilio API Key": "twilio-key",
}
_GENERIC_DS = {"Base64 High Entropy String", "Secret Keyword"}
# Identifiers that are high-entropy but public: git SHAs and other hex digests, UUIDs. Not secrets unless a
# secret-sounding name is assigned them, which the keyword rules judge.
_PUBLIC_ID = re.compile(r"[0-9a-f]{7,64}|[0-9A-F]{7,64}|[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")
_ds_plugins: list | None = None


def _load_detect_secrets() -> list:
    global _ds_plugins
    if _ds_plugins is None:
        get_mapping_from_secret_type_to_class = _import_detect_secrets()
        plugins = []
        for secret_type, cls in get_mapping_from_secret_type_to_class().items():
            if secret_type in _DS_KINDS:
                plugins.append((secret_type, cls()))
        _ds_plugins = plugins
    return _ds_plugins


def _import_detect_secrets():
    """detect-secrets' plugin table, imported without ``requests``: its plugins import it at the top for ``verify``,
    which acpmem never calls (a secret is never sent anywhere to be checked), and it was more than half the cost of
    loading them (65 of 115 ms of CPU, on every write). While they load, ``requests`` is a stand-in: a name a
    detect-secrets module asks of it as it loads (a return annotation, ``-> requests.Response``) gets an inert
    placeholder; any other name, or one asked later, imports the real module and answers from it, as does
    ``__path__`` (a submodule imported). The stand-in is out of ``sys.modules`` once they are loaded. Where the
    import fails with the stand-in (another version of either package), it is undone and done plainly."""
    if "requests" in sys.modules or "detect_secrets" in sys.modules:
        # lazy: detect_secrets is heavy, never imported at start-up
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

        return get_mapping_from_secret_type_to_class
    stand_in = _RequestsLater("requests")
    sys.modules["requests"] = stand_in
    try:
        # lazy: detect_secrets is heavy, never imported at start-up
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

        get_mapping_from_secret_type_to_class()   # the plugin modules it imports on its first call
    except Exception:
        for name in [n for n in sys.modules if n == "detect_secrets" or n.startswith("detect_secrets.")]:
            del sys.modules[name]
        if sys.modules.get("requests") is stand_in:
            del sys.modules["requests"]
        # lazy: as above
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    finally:
        stand_in._loading = False
        if sys.modules.get("requests") is stand_in:
            del sys.modules["requests"]
    return get_mapping_from_secret_type_to_class


class _RequestsLater(type(sys)):
    """``requests`` until a name of it is used (``_import_detect_secrets``)."""

    _loading = True

    def __getattr__(self, name: str):
        if name.startswith("__") and name != "__path__":
            raise AttributeError(name)   # what the import system asks of any module
        if self._loading and name != "__path__" and \
                sys._getframe(1).f_globals.get("__name__", "").startswith("detect_secrets."):
            return _Placeholder(name)   # asked by a detect-secrets module as it loads; anyone else gets the real one
        if sys.modules.get("requests") is self:
            del sys.modules["requests"]
        # lazy: only a plugin's verify (never called) or a submodule import gets here
        import requests

        return getattr(requests, name)


class _Placeholder:
    """What a detect-secrets module gets for a name of ``requests`` while it loads (an annotation): never called."""

    def __init__(self, name: str):
        self.name = name

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(f"{self.name}.{name}")

    def __repr__(self) -> str:
        return f"<requests.{self.name}, not imported>"


def _ds_findings(text: str) -> list[tuple[int, SecretMatch]]:
    out: list[tuple[int, SecretMatch]] = []
    rank = len(_SPECIFIC) + 1
    offset = 0
    for line in text.splitlines(keepends=True):
        for secret_type, plugin in _load_detect_secrets():
            for value in set(plugin.analyze_string(line)):
                # Its generic plugins flag placeholders and identifiers; hold them to our own bar.
                if not value or (secret_type in _GENERIC_DS and not _credential_like(value, False)):
                    continue
                if secret_type == "Base64 High Entropy String" and _PUBLIC_ID.fullmatch(value):
                    continue
                kind = _DS_KINDS[secret_type]
                pos = line.find(value)
                while pos >= 0:
                    out.append((rank, SecretMatch(kind, offset + pos, offset + pos + len(value),
                                              _preview(kind, "", value))))
                    pos = line.find(value, pos + len(value))
        offset += len(line)
    return out


# --- public API ---------------------------------------------------------------------------------------------------

def find_secrets(text: str, *, deep: bool | None = None) -> list[SecretMatch]:
    """Every secret in ``text``, in order, overlapping detections merged into one span. The scan reads ``text``
    as a framed prompt shows it (invisible characters removed, ``framing.without_invisible``); spans refer to
    ``text``.

    ``deep``: ``None`` (default) adds detect-secrets only if this process already imported it (free);
    ``True`` imports it (~50 ms of CPU once per process); ``False`` uses the regex layer alone.
    """
    if not text:
        return []

    shown, where = without_invisible(text)
    if where is not None:
        # what framing will show a model, scanned: a token split by a zero-width character is whole there
        return [SecretMatch(f.kind, where[f.start], where[f.end - 1] + 1, f.preview)
                for f in find_secrets(shown, deep=deep)]
    raw = _regex_findings(text)
    if deep or (deep is None and "detect_secrets.core.plugins.util" in sys.modules):
        raw.extend(_ds_findings(text))
    raw.sort(key=lambda rf: (rf[1].start, -rf[1].end, rf[0]))
    merged: list[tuple[int, SecretMatch]] = []
    for rank, f in raw:
        if merged and f.start < merged[-1][1].end:
            prev_rank, prev = merged[-1]
            end = max(prev.end, f.end)
            best_rank, best = (prev_rank, prev) if prev_rank <= rank else (rank, f)
            merged[-1] = (best_rank, SecretMatch(best.kind, prev.start, end,
                                             _preview(best.kind, "", text[prev.start:end])
                                             if end != best.end or prev.start != best.start else best.preview))
        else:
            merged.append((rank, f))
    return [f for _, f in merged]


def redact(text: str, *, deep: bool | None = None) -> tuple[str, list[SecretMatch]]:
    """``text`` with each secret replaced by ``[REDACTED:<kind>]``, and the findings (spans refer to the input)."""
    findings = find_secrets(text, deep=deep)
    if not findings:
        return text, []
    parts, pos = [], 0
    for f in findings:
        parts.append(text[pos:f.start])
        parts.append(f"[REDACTED:{f.kind}]")
        pos = f.end
    parts.append(text[pos:])
    return "".join(parts), findings
