"""The model call of the fork.

Owns: resolving which OpenAI-compatible endpoint to use (``ModelConfig``), one chat-completions call with a timeout and
bounded retries (``call_chat``), and parsing the tool calls and token usage out of the answer (``ChatResult``). What
each call cost goes to the ledger (``acpmem.write.costs``).

Configuration precedence: explicit vault settings win, the ``OPENAI_*`` environment variables fill the gaps. The vault's
``acpmem.toml`` is committed and shared, so the key itself should come from the environment: settings may name the
variable that holds it (``api_key_env``) instead of holding it.

The ``openai`` package is imported inside the functions that call it: every hook process pays for what is imported at
start-up.
"""
from __future__ import annotations

import importlib
import json
import math
import os
import random
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from acpmem.core.errors import ExtractionError, SettingsError
from acpmem.core.limits import MAX_INT, int_between
from acpmem.core.values import Value
from acpmem.infra import progress
from acpmem.infra.files import atomic_write

OPENAI_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4.1-mini"   # only used against OpenAI itself; any other endpoint must name its model
DEFAULT_TIMEOUT = 60.0
DEFAULT_LOCAL_TIMEOUT = 900.0    # an endpoint on this machine runs at CPU speed: a cold fork takes minutes
DEFAULT_MAX_RETRIES = 3
BACKOFF_BASE = 0.5
BACKOFF_CAP = 20.0
MAX_RETRY_AFTER = 60.0           # a server that asks for a longer wait is not waited for: the request stays pending
ANSWER_SECONDS_MIN = 600.0       # the least a streamed answer is allowed in all (ModelConfig.answer_limit_s)
ANSWER_CHUNKS_PER_TOKEN = 4      # chunks allowed per max_tokens (a server sends about one a token, plus keep-alives)
ANSWER_BYTES_PER_TOKEN = 32      # bytes of text allowed per max_tokens (a token is rarely over 16)
ANSWER_SLACK = 256               # chunks, and bytes x 16, allowed beyond those
MAX_ANSWER_CHUNKS = 65_536       # without max_tokens in the body
MAX_ANSWER_BYTES = 4_000_000
_NOT_OURS = frozenset({"extractor", "max_entry_bytes", "retry_base_seconds", "max_attempts", "max_tokens_per_day",
                       "max_requests_per_hour", "max_tokens", "context_tokens",
                       "max_entries_per_answer", "temperature", "window_turns", "max_windows",
                       "evidence", "second_look", "answer"})   # read elsewhere


class ModelConfig(Value):
    """Where and how the fork calls a model. ``api_key`` never appears in repr or ``describe()``."""

    base_url: str | None
    model: str | None
    api_key: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    max_retries: int = DEFAULT_MAX_RETRIES
    stream: bool = False     # streamed: the timeout is the longest silence, not the whole answer
    answer_seconds: float | None = None   # the longest a streamed answer may take in all; None: ``answer_limit_s``
    _hidden = ("api_key",)

    @property
    def answer_limit_s(self) -> float:
        """How long one streamed answer may run in all, tokens arriving or not: ``answer_seconds``, else three
        times the silence allowed and at least ``ANSWER_SECONDS_MIN`` (a looping model that never repeats exactly
        otherwise held ``commit --wait`` and the worker without end)."""
        return self.answer_seconds or max(ANSWER_SECONDS_MIN, 3 * self.timeout)

    @property
    def configured(self) -> bool:
        """True when there is an endpoint to call: a custom base URL (local servers need no key) or an OpenAI key."""
        return bool(self.model) and (bool(self.base_url) or bool(self.api_key))

    @property
    def extractor(self) -> str:
        """The label written into an entry's ``source.extractor``."""
        return f"llm:{self.model}"

    def describe(self) -> dict:
        """The config as shown to a user (``extract --dry-run``, ``stats``): no secret."""
        return {"base_url": self.base_url or OPENAI_URL, "model": self.model, "api_key": "set" if self.api_key else None,
                "timeout": self.timeout, "max_retries": self.max_retries, "stream": self.stream}


class ToolCall(Value):
    """One tool call from the answer. ``arguments`` is the parsed object, or None with ``error`` saying why not."""

    id: str | None
    name: str
    arguments: dict | None
    raw_arguments: str
    error: str | None = None

    def to_json(self) -> dict:
        return {"id": self.id, "name": self.name, "arguments": self.arguments, "raw_arguments": self.raw_arguments,
                "error": self.error}


class ChatResult(Value):
    """What one successful call returned, with its accounting."""

    tool_calls: tuple[ToolCall, ...]
    text: str | None
    finish_reason: str | None
    model: str
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    latency_s: float
    attempts: int
    response: dict | None = None       # the raw answer (left out of comparison and repr)
    _hidden = ("response",)

    def to_json(self) -> dict:
        """As plain JSON-able data (``extract --json``), without the raw response."""
        d = {n: getattr(self, n) for n in self._compared}
        d["tool_calls"] = [c.to_json() for c in self.tool_calls]
        return d


def resolve_model_config(settings: Mapping[str, Any] | Any | None = None,
                         env: Mapping[str, str] | None = None) -> ModelConfig:
    """Build the ``ModelConfig`` from the vault's extraction settings and the environment.

    ``settings`` is ``Settings.extraction`` (a settings section, which reads as a mapping) or a mapping; keys, all optional, empty meaning unset:
    ``base_url``, ``model``, ``api_key_env`` (name of the variable holding the key, default ``OPENAI_API_KEY``),
    ``api_key``, ``timeout_seconds`` (or ``timeout``), ``local_timeout_seconds``, ``max_retries``. Settings win;
    ``OPENAI_BASE_URL``, ``OPENAI_MODEL`` and the key variable fill what they leave out. ``env`` defaults to
    ``os.environ``. An endpoint on this machine (``is_local``) whose timeout is left at the default 60 s gets
    ``local_timeout_seconds`` (default 900 s) instead: CPU inference of a cold fork prompt takes minutes.
    ``stream`` (auto | on | off, or a bool): the call is streamed (``call_chat``); auto streams to a local endpoint.
    """
    s = dict(settings or {})
    if "timeout_seconds" in s:   # the name acpmem.toml uses
        s["timeout"] = s.pop("timeout_seconds")
    e = os.environ if env is None else env
    local_timeout = s.pop("local_timeout_seconds", DEFAULT_LOCAL_TIMEOUT)
    stream = s.pop("stream", "auto")
    unknown = set(s) - {"base_url", "model", "api_key", "api_key_env", "timeout", "max_retries"} - _NOT_OURS
    if unknown:
        raise SettingsError(f"Unknown extraction setting(s): {', '.join(sorted(unknown))}",
                            "use base_url, model, api_key_env, timeout_seconds or max_retries")
    for key in ("base_url", "model", "api_key", "api_key_env"):
        if key in s and s[key] is not None and not isinstance(s[key], str):
            raise SettingsError(f"Extraction setting '{key}' must be text, got {s[key]!r}", "fix acpmem.toml")
    key_env = s.get("api_key_env") or "OPENAI_API_KEY"
    base_url = (s.get("base_url") or e.get("OPENAI_BASE_URL") or "").strip().rstrip("/") or None
    api_key = s.get("api_key") or e.get(key_env) or None
    model = s.get("model") or e.get("OPENAI_MODEL") or None
    if model is None and base_url in (None, OPENAI_URL) and api_key:
        model = DEFAULT_MODEL
    timeout = s.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not (0 < timeout <= 3600):
        raise SettingsError(f"Extraction timeout must be a number of seconds in (0, 3600], got {timeout!r}",
                            "fix acpmem.toml")
    if is_local(base_url) and float(timeout) == DEFAULT_TIMEOUT:
        if isinstance(local_timeout, bool) or not isinstance(local_timeout, (int, float)) \
                or not (0 < local_timeout <= 3600):
            raise SettingsError(f"Extraction local_timeout_seconds must be a number of seconds in (0, 3600], got "
                                f"{local_timeout!r}", "fix acpmem.toml")
        timeout = local_timeout
    retries = s.get("max_retries", DEFAULT_MAX_RETRIES)
    if isinstance(retries, bool) or not isinstance(retries, int) or not (0 <= retries <= 10):
        raise SettingsError(f"Extraction max_retries must be an integer 0..10, got {retries!r}", "fix acpmem.toml")
    if stream not in (True, False, "auto", "on", "off"):
        raise SettingsError(f"Extraction stream must be auto, on or off, got {stream!r}", "fix acpmem.toml")
    streamed = stream is True or stream == "on" or (stream == "auto" and is_local(base_url))
    return ModelConfig(base_url, model, api_key, float(timeout), retries, streamed)


def is_local(base_url: str | None) -> bool:
    """True for an endpoint on this machine: localhost, a loopback address, or a unix socket."""
    if not base_url:
        return False

    try:
        u = urlsplit(base_url)
        host = (u.hostname or "").lower()
    except ValueError:
        return False
    if "unix" in u.scheme or host.endswith(".sock") or "%2f" in (u.netloc or "").lower():
        return True
    return host in ("localhost", "::1", "0.0.0.0") or host.startswith("127.") or host.endswith(".localhost")


CONTEXT_TIMEOUT_S = 3.0


def served_context(config: ModelConfig, timeout: float = CONTEXT_TIMEOUT_S) -> int | None:
    """The context window (tokens) the endpoint says it serves, or None when it does not say: llama-server's
    ``GET /props`` (``default_generation_settings.n_ctx``), else ``n_ctx`` in a ``/models`` entry's ``meta``
    (llama-server lists the training context there). urllib, bounded, every failure is None."""
    # lazy: `commit` does not need them (measured +19 ms to its start-up)
    import urllib.error
    import urllib.request

    if not config.base_url:
        return None
    root = config.base_url[:-3] if config.base_url.endswith("/v1") else config.base_url

    def get(url: str) -> object:
        req = urllib.request.Request(url, headers={"Accept": "application/json"})
        if config.api_key:
            req.add_header("Authorization", f"Bearer {config.api_key}")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return json.loads(resp.read(2_000_000).decode("utf-8"))
        except (urllib.error.URLError, OSError, ValueError, UnicodeDecodeError):
            return None

    props = get(root + "/props")
    if isinstance(props, dict):
        gen = props.get("default_generation_settings")
        n = gen.get("n_ctx") if isinstance(gen, dict) else props.get("n_ctx")
        if int_between(n, 256, MAX_INT):
            return n
    return None


MODELS_CACHE = "models.json"     # under .acpmem/: the model an endpoint serves, when the settings name none
MODELS_CACHE_S = 3600.0
MODELS_TIMEOUT_S = 3.0


def with_served_model(config: ModelConfig, state_dir: Path | None = None, *, clock: Callable[[], float] = time.time,
                      timeout: float = MODELS_TIMEOUT_S) -> ModelConfig:
    """``config`` with its model filled in when an endpoint is set but no model is: the one model the endpoint serves
    (``GET {base_url}/models``, remembered for an hour in ``.acpmem/models.json``). An endpoint that serves several
    models, none, or cannot be asked is a ``SettingsError`` saying which variable to set: a request the fork could
    not run would otherwise fall back to the offline extractor without a word."""
    if config.model or not config.base_url:
        return config
    cache = Path(state_dir) / MODELS_CACHE if state_dir is not None else None
    now = clock()
    if cache is not None:
        try:
            hit = json.loads(cache.read_text("utf-8")).get(config.base_url)
            # an hour from when it was asked; one dated later than now (a clock set back, a file from elsewhere)
            # would never expire, so it is asked again
            if isinstance(hit, dict) and isinstance(hit.get("model"), str) and \
                    0 <= now - float(hit["at"]) < MODELS_CACHE_S:
                return config.with_changes(model=hit["model"])
        except (OSError, ValueError, TypeError, KeyError):
            pass
    models = _served_models(config, timeout)
    hint = "set OPENAI_MODEL (or [extraction] model in acpmem.toml) to the model to use"
    if len(models) != 1:
        shown = ", ".join(models[:8]) + (" …" if len(models) > 8 else "")
        raise SettingsError(f"an extraction endpoint is set ({config.base_url}) but no model, and it serves "
                            f"{len(models)} models" + (f" ({shown})" if models else ""), hint)
    if cache is not None:
        try:
            try:
                known = json.loads(cache.read_text("utf-8"))
                known = known if isinstance(known, dict) else {}
            except (OSError, ValueError):
                known = {}
            known[config.base_url] = {"model": models[0], "at": now}
            atomic_write(cache, json.dumps(known, ensure_ascii=False), durable=False)
        except OSError:
            pass    # only a cache
    return config.with_changes(model=models[0])


def _served_models(config: ModelConfig, timeout: float) -> list[str]:
    """The model ids ``GET {base_url}/models`` lists (urllib, not openai: this runs at commit time)."""
    # lazy: `commit` does not need them (measured +19 ms to its start-up)
    import urllib.error
    import urllib.request

    req = urllib.request.Request(f"{config.base_url}/models", headers={"Accept": "application/json"})
    if config.api_key:
        req.add_header("Authorization", f"Bearer {config.api_key}")
    hint = "set OPENAI_MODEL (or [extraction] model in acpmem.toml), or check the endpoint"
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            doc = json.loads(resp.read(1_000_000).decode("utf-8"))
    except urllib.error.HTTPError as exc:
        raise SettingsError(f"an extraction endpoint is set ({config.base_url}) but no model, and asking it which "
                            f"models it serves failed: HTTP {exc.code}", hint) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        why = getattr(exc, "reason", None) or exc
        raise SettingsError(f"an extraction endpoint is set ({config.base_url}) but no model, and it could not be "
                            f"asked which models it serves ({why})", hint) from None
    data = doc.get("data") if isinstance(doc, dict) else None
    return [m["id"] for m in data or () if isinstance(m, dict) and isinstance(m.get("id"), str) and m["id"]]


# What the HTTP client reads from the environment when it is made: proxies, and what its TLS context reads (the CA
# store, a key log file).
_TLS_ENV = ("SSL_CERT_FILE", "SSL_CERT_DIR", "SSLKEYLOGFILE")
_HTTP_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy",
             "no_proxy", *_TLS_ENV)
_HTTP_CLIENTS: dict[tuple, Any] = {}
_TLS_CONTEXTS: dict[tuple, Any] = {}


def _http_client(openai) -> Any:
    """The HTTP client every model call of this process sends through: made once, its connections kept between
    calls (a worker draining the queue, the MCP server), its TLS context made once (reading and parsing the CA store
    costs ~19 ms, whether the endpoint speaks TLS or not). Made again where what it read from the environment
    changed, and in a child forked after it was made: a pooled connection is never shared by two processes, the TLS
    context (settings and the CA store, no connection) is."""
    key = (os.getpid(), *(os.environ.get(k) for k in _HTTP_ENV))
    client = _HTTP_CLIENTS.get(key)
    if client is None:
        for old in [k for k in _HTTP_CLIENTS if k[0] == key[0]]:
            _HTTP_CLIENTS.pop(old).close()
        tls_key = tuple(os.environ.get(k) for k in _TLS_ENV)
        tls = _TLS_CONTEXTS.get(tls_key)
        if tls is None:   # what the client would make for itself from the same environment
            try:
                made = _transport().create_ssl_context()
            except OSError as exc:   # ssl.SSLError too: SSL_CERT_FILE names no file, or one without certificates
                var = next((k for k in _TLS_ENV[:2] if os.environ.get(k)), None)
                what = f"the CA certificates {var} names ({os.environ[var]})" if var else "the system's CA certificates"
                raise _fail(f"Cannot read {what}: {getattr(exc, 'strerror', None) or exc}", "connection", 0, None,
                            (f"point {var} at CA certificates in PEM, or unset it" if var else "check the system's CA "
                             "certificates (or set SSL_CERT_FILE)") + "; the request stays pending") from None
            tls = _TLS_CONTEXTS.setdefault(tls_key, made)
        client = _HTTP_CLIENTS.setdefault(key, openai.DefaultHttpxClient(verify=tls))
    return client


def call_chat(config: ModelConfig, body: dict, *, clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep, rng: random.Random | None = None) -> ChatResult:
    """Send ``body`` to ``POST {base_url}/chat/completions`` exactly as given and parse the answer.

    ``model`` is filled from the config only when the body has none. Retries 429, 5xx and connection errors up to
    ``config.max_retries`` times with exponential backoff and jitter, honouring ``Retry-After``/``retry-after-ms``; a
    timeout is not retried here (the pending queue retries the request later).

    A body with ``stream: true`` (``stream_body``; the fork sends one when ``config.stream``): the chunks are put
    together into the one answer a plain call gets, and ``config.timeout`` is the longest silence — from the
    request to the first chunk (the prompt's processing) and between chunks — so a long answer still arriving is
    never cut off. An endpoint that answers a streamed request with plain JSON is read as such; one that rejects
    streaming (HTTP 400/422 naming it) is asked again without it, in the same attempt. ``clock`` measures latency, ``sleep``
    waits between attempts, ``rng`` draws the jitter. Raises ``ExtractionError`` whose ``data`` has ``reason``
    (no_endpoint, timeout, rate_limited, server_error, connection, rejected, context_length — the endpoint said
    the prompt is over its window: the caller sends a shorter one —, bad_response, repetition: a streamed
    answer caught repeating itself is stopped there, not at ``max_tokens``; runaway: a streamed answer past
    ``answer_bounds`` or ``config.answer_limit_s``), ``attempts``,
    ``retryable``, ``status`` and ``latency_s`` (the time spent before giving up).
    """
    if not config.configured:
        what = "no model" if (config.base_url or config.api_key) else "no endpoint"
        raise ExtractionError(f"Cannot call a model: {what} configured",
                              "set OPENAI_API_KEY (and OPENAI_MODEL / OPENAI_BASE_URL for other endpoints), "
                              "set [extraction] in acpmem.toml, or use --extractor offline",
                              reason="no_endpoint", attempts=0, retryable=False, status=None)
    streamed = body.get("stream") is True
    if "model" not in body:
        body = {**body, "model": config.model}
    # lazy: openai is heavy, never imported at start-up
    import openai

    rng = rng or random.Random()
    client = openai.OpenAI(base_url=config.base_url or OPENAI_URL, api_key=config.api_key or "not-needed",
                           timeout=config.timeout, max_retries=0, http_client=_http_client(openai))
    start = clock()
    attempts = 0
    try:
        while True:
            attempts += 1
            wait = None
            try:
                with progress.waiting("waiting for the model"):   # said on a terminal after a few seconds
                    data = _streamed(client, body, config.answer_limit_s, clock) if streamed else \
                        client.post("/chat/completions", body=body, cast_to=object)
            except (ValueError, openai.APIResponseValidationError) as exc:   # a body that is not JSON at all
                raise _fail(f"Malformed answer from the endpoint: not JSON ({str(exc)[:80]})", "bad_response",
                            attempts, 200, "check the endpoint speaks OpenAI chat completions") from None
            except (openai.APITimeoutError, _StreamTimeout):
                what = f"sent no token for {config.timeout:g} s" if streamed else f"timed out after {config.timeout:g} s"
                raise _fail(f"Model call {what}", "timeout", attempts, None,
                            "raise [extraction] timeout or try a faster model; the request stays pending") from None
            except openai.APIConnectionError as exc:
                reason, status, detail = "connection", None, str(exc.__cause__ or exc)
            except _StreamBroken as exc:
                reason, status, detail = "connection", None, STREAM_BROKE + str(exc)
            except _StreamRunaway as exc:
                err = _fail(f"The answer did not end: stopped after {exc.args[0]}", "runaway", attempts, None,
                            "the request stays pending and the queue moves on; a looping model: lower max_tokens "
                            "or try another model")
                err.data["text"] = exc.args[1]
                raise err from None
            except _StreamLoop as exc:
                err = _fail(f"The answer repeats itself: stopped after {exc.args[0]} chunks", "repetition",
                            attempts, None, "the request stays pending; its retry samples warmer")
                err.data["text"] = exc.args[1]   # what it wrote until then, for doctor and extract --failed
                raise err from None
            except (ValueError, RecursionError):   # an answer that is no JSON, or JSON Python cannot read
                raise _fail("Malformed answer from the endpoint: not JSON acpmem can read", "bad_response", attempts,
                            200, "check the endpoint speaks OpenAI chat completions") from None
            except openai.APIStatusError as exc:
                status = exc.status_code
                if streamed and status in (400, 422) and "stream" in _error_text(exc).lower():
                    streamed = False   # "stream not supported": the same request, plain
                    body = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
                    attempts -= 1
                    continue
                if status in (400, 413, 422) and _context_exceeded(exc):
                    raise _fail(f"The prompt is over the model's context: HTTP {status} {_error_text(exc)}",
                                "context_length", attempts, status,
                                "it is sent again shorter; set [extraction] context_tokens to the model's window")\
                        from None
                if status != 429 and status < 500:
                    raise _fail(f"Endpoint rejected the request: HTTP {status} {_error_text(exc)}", "rejected",
                                attempts, status, _rejected_hint(status)) from None
                reason = "rate_limited" if status == 429 else "server_error"
                detail = _error_text(exc)
                wait = _retry_after(exc.response.headers)
            else:
                return _parse(data, body, attempts, clock() - start)
            # a certificate that cannot be verified will not be by the next try: the queue retries it later
            untrusted = _untrusted(reason, detail)
            if attempts > config.max_retries or (wait is not None and wait > MAX_RETRY_AFTER) or untrusted:
                raise _fail(_give_up_message(reason, status, attempts, detail, wait, config), reason, attempts, status,
                            "the request stays pending and is retried later; "
                            + ("set SSL_CERT_FILE to the certificate of the authority that signed the endpoint's"
                               if untrusted else "check the endpoint"))
            sleep(wait if wait is not None else _backoff(attempts, rng))
    except ExtractionError as exc:   # what the failed call cost in time, for the ledger
        exc.data.setdefault("latency_s", round(clock() - start, 3))
        raise


def stream_body(body: dict) -> dict:
    """``body`` asking for a streamed answer, its usage in the last chunk."""
    return {**body, "stream": True, "stream_options": {"include_usage": True}}


LOOP_CHECK_EVERY = 16   # chunks between two looks for a loop
LOOP_TAIL = 60          # the answer's last characters, looked for earlier in it
LOOP_TIMES = 4          # the same stretch this many times in a row at the end: a loop


def _looping(answer: dict) -> bool:
    """True when the answer so far ends in one stretch written ``LOOP_TIMES`` times in a row (a stretch shorter than
    ``LOOP_TAIL`` characters: as many times as fill ``LOOP_TAIL * LOOP_TIMES``): a small model at temperature 0 caught in a repetition loop, which would only stop at
    ``max_tokens``. Several calls in one answer repeat their JSON around different content, so are no loop."""
    text = "".join(answer["content"]) + "".join(c["function"]["arguments"] for c in answer["calls"].values())
    n = len(text)
    if n < LOOP_TAIL * LOOP_TIMES:
        return False
    j = text.rfind(text[-LOOP_TAIL:], 0, n - 1)
    period = n - LOOP_TAIL - j if j >= 0 else 0
    if period < 1:
        return False
    # a stretch shorter than the tail (one short bullet written over and over) must fill as much as a long one
    times = max(LOOP_TIMES, -(-LOOP_TAIL * LOOP_TIMES // period))
    if period * times > n:
        return False
    block = text[n - period:]
    return text[n - period * times:] == block * times


class _StreamLoop(Exception):
    """The streamed answer repeats itself: stopped."""


class _StreamRunaway(Exception):
    """The streamed answer went past its bound in chunks, bytes or total time: stopped."""


def answer_bounds(body: dict) -> tuple[int, int]:
    """The most chunks and bytes of text one streamed answer to ``body`` may send: from its ``max_tokens`` (a
    server that ignores it, or keeps sending empty chunks, is stopped there), else ``MAX_ANSWER_CHUNKS`` and
    ``MAX_ANSWER_BYTES``."""
    n = body.get("max_tokens")
    if not int_between(n, 1, MAX_INT):
        return MAX_ANSWER_CHUNKS, MAX_ANSWER_BYTES
    return n * ANSWER_CHUNKS_PER_TOKEN + ANSWER_SLACK, n * ANSWER_BYTES_PER_TOKEN + ANSWER_SLACK * 16


class _StreamTimeout(Exception):
    """No chunk for the whole timeout."""


class _StreamBroken(Exception):
    """The stream ended or broke before the answer was complete."""


def _streamed(client, body: dict, limit_s: float = math.inf, clock: Callable[[], float] = time.monotonic) -> dict:
    """One streamed call, its chunks put together into a chat completion (``_parse`` reads it like a plain one).
    The client's read timeout is the silence allowed between chunks (and before the first); ``answer_bounds`` and
    ``limit_s`` (by ``clock``, from the request) bound the whole answer (``_StreamRunaway``)."""
    # lazy: openai is heavy, never imported at start-up
    import openai

    start = clock()
    max_chunks, max_bytes = answer_bounds(body)

    httpx = _transport()
    stream = client.post("/chat/completions", body=body, cast_to=object, stream=True,
                         stream_cls=openai.Stream[object])
    answer = {"content": [], "calls": {}, "finish": None, "usage": None, "model": None, "extra": {}, "size": 0}
    try:
        kind = stream.response.headers.get("content-type", "")
        if "event-stream" not in kind:   # a server that ignored "stream": its plain answer
            return json.loads(stream.response.read())
        done = False
        for n, chunk in enumerate(stream):
            if n >= max_chunks or answer["size"] > max_bytes or clock() - start > limit_s:
                what = (f"{n} chunks" if n >= max_chunks else f"{answer['size']} bytes" if answer["size"] > max_bytes
                        else f"{limit_s:g} s")
                raise _StreamRunaway(what, "".join(answer["content"]))
            if not isinstance(chunk, dict):
                continue
            _add_chunk(answer, chunk)
            done = done or answer["finish"] is not None
            if not done and n % LOOP_CHECK_EVERY == 0 and _looping(answer):
                raise _StreamLoop(n, "".join(answer["content"]))
        if not done:
            raise _StreamBroken("the stream ended before the answer finished")
    except (httpx.TimeoutException, openai.APITimeoutError):
        raise _StreamTimeout() from None
    except (httpx.TransportError, httpx.StreamError) as exc:
        raise _StreamBroken(f"the stream broke: {exc}") from None
    except openai.APIError as exc:   # an error sent as a chunk
        if isinstance(exc, (openai.APIStatusError, openai.APIConnectionError)):
            raise
        raise _StreamBroken(f"the endpoint sent an error in the stream: {str(exc)[:200]}") from None
    finally:
        stream.close()
    message: dict = {"role": "assistant", "content": "".join(answer["content"]) if answer["content"] else None}
    if answer["calls"]:
        message["tool_calls"] = [answer["calls"][i] for i in sorted(answer["calls"])]
    out = {"object": "chat.completion", "model": answer["model"] or body.get("model"),
           "choices": [{"index": 0, "message": message, "finish_reason": answer["finish"]}],
           **answer["extra"]}
    if answer["usage"] is not None:
        out["usage"] = answer["usage"]
    return out


def _transport():
    """The HTTP library the installed ``openai`` client runs on (``httpx``, or ``httpx2`` in newer releases): a
    stream's read timeout and broken connection are its exceptions, raised while the chunks are read."""
    # lazy: openai is heavy, never imported at start-up
    from openai import _base_client

    for name in ("httpx", "httpx2"):
        mod = getattr(_base_client, name, None)
        if mod is not None and hasattr(mod, "TimeoutException"):
            return mod
    return importlib.import_module("httpx")


def _add_chunk(answer: dict, chunk: dict) -> None:
    """One streamed chunk added to the answer being put together: text pieces, tool-call pieces by index (the id
    and name from the first, the arguments joined), the finish reason, the usage (the last chunk's), the model, and
    what else the server sends beside (llama-server's ``timings``)."""
    if chunk.get("model"):
        answer["model"] = chunk["model"]
    if isinstance(chunk.get("usage"), dict):
        answer["usage"] = chunk["usage"]
    for key in ("timings", "id", "created", "system_fingerprint"):
        if key in chunk:
            answer["extra"][key] = chunk[key]
    for choice in chunk.get("choices") or ():
        if not isinstance(choice, dict) or choice.get("index", 0) != 0:
            continue
        if choice.get("finish_reason"):
            answer["finish"] = choice["finish_reason"]
        delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
        if isinstance(delta.get("content"), str):
            answer["content"].append(delta["content"])
            answer["size"] = answer.get("size", 0) + len(delta["content"].encode("utf-8"))
        for piece in delta.get("tool_calls") or ():
            if not isinstance(piece, dict):
                continue
            i = piece.get("index", len(answer["calls"]))
            call = answer["calls"].setdefault(i, {"id": None, "type": "function",
                                                  "function": {"name": "", "arguments": ""}})
            if piece.get("id"):
                call["id"] = piece["id"]
            fn = piece.get("function") if isinstance(piece.get("function"), dict) else {}
            if isinstance(fn.get("name"), str):
                call["function"]["name"] += fn["name"]
            if isinstance(fn.get("arguments"), str):
                call["function"]["arguments"] += fn["arguments"]
                answer["size"] = answer.get("size", 0) + len(fn["arguments"].encode("utf-8"))
            elif isinstance(fn.get("arguments"), dict):   # some servers send the object whole
                call["function"]["arguments"] = json.dumps(fn["arguments"], ensure_ascii=False)


def _backoff(attempt: int, rng: random.Random) -> float:
    ceiling = min(BACKOFF_CAP, BACKOFF_BASE * 2 ** (attempt - 1))
    return ceiling * (0.5 + 0.5 * rng.random())


def _retry_after(headers: Mapping[str, str]) -> float | None:
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            value = float(ms) / 1000
            if math.isfinite(value) and value >= 0:
                return value
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        value = float(raw)
        return value if math.isfinite(value) and value >= 0 else None
    except ValueError:
        pass
    # An HTTP date needs the wall clock, which the caller did not give us: fall back to our own backoff.
    return None


def _error_text(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        msg = err.get("message") if isinstance(err, dict) else err
        if msg:
            return str(msg)[:200]
    return str(getattr(exc, "message", "") or "")[:200]


CONTEXT_EXCEEDED = ("context_length_exceeded", "context length", "context window", "maximum context",
                    "prompt is too long", "too many tokens", "exceeds the available context", "exceed_context_size")


def _context_exceeded(exc: Any) -> bool:
    """True when a rejection says the prompt is over the model's context window (OpenAI's code
    ``context_length_exceeded``, llama-server's ``exceed_context_size_error``, the usual wordings): a body to send
    again shorter, never the same."""
    body = getattr(exc, "body", None)
    err = body.get("error", body) if isinstance(body, dict) else None
    words = [str(err.get(k) or "") for k in ("code", "type", "message")] if isinstance(err, dict) else []
    words.append(_error_text(exc))
    text = " ".join(words).lower()
    return any(w in text for w in CONTEXT_EXCEEDED)


def _rejected_hint(status: int) -> str:
    if status in (401, 403):
        return "check the API key (OPENAI_API_KEY or [extraction] api_key_env)"
    if status == 404:
        return "check the base URL and the model name"
    return "the request is kept pending with this error; check the model supports tools"


def _give_up_message(reason: str, status: int | None, attempts: int, detail: str, wait: float | None,
                     config: ModelConfig) -> str:
    tries = f"{attempts} {'try' if attempts == 1 else 'tries'}"
    if reason == "rate_limited":
        if wait is not None and wait > MAX_RETRY_AFTER:
            return f"Rate limited: the endpoint asks to wait {wait:g} s (after {tries})"
        return f"Rate limited after {tries}"
    if reason == "server_error":
        return f"HTTP {status} after {tries}" + (f": {detail}" if detail else "")
    if detail.startswith(STREAM_BROKE):
        return f"The streamed answer broke off ({detail[len(STREAM_BROKE):]}) after {tries}"
    if _untrusted(reason, detail):
        why = detail.split("certificate verify failed:", 1)[-1].split("(_ssl.c", 1)[0].strip()
        return f"Cannot connect to {config.base_url or OPENAI_URL}: its TLS certificate is not trusted " \
               f"({why or 'verify failed'}) after {tries}"
    return f"Cannot connect to {config.base_url or OPENAI_URL} after {tries}"


def _untrusted(reason: str, detail: str) -> bool:
    """The connection failed because the endpoint's TLS certificate could not be verified."""
    return reason == "connection" and "CERTIFICATE_VERIFY_FAILED" in detail


STREAM_BROKE = "stream: "


def _fail(message: str, reason: str, attempts: int, status: int | None, hint: str) -> ExtractionError:
    retryable = reason in ("timeout", "rate_limited", "server_error", "connection", "repetition", "context_length",
                           "runaway")
    return ExtractionError(message, hint, reason=reason, attempts=attempts, retryable=retryable, status=status)


def _parse(data: object, body: dict, attempts: int, latency: float) -> ChatResult:
    def bad(why: str) -> ExtractionError:
        return _fail(f"Malformed answer from the endpoint: {why}", "bad_response", attempts, 200,
                     "check the endpoint speaks OpenAI chat completions")

    if not isinstance(data, dict):
        raise bad("not a JSON object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise bad("no choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise bad("no message in the first choice")
    calls = []
    for raw in message.get("tool_calls") or ():
        if not isinstance(raw, dict) or not isinstance(raw.get("function"), dict):
            raise bad("a tool call without a function")
        fn = raw["function"]
        calls.append(_tool_call(raw.get("id"), str(fn.get("name") or ""), fn.get("arguments")))
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    details = usage.get("prompt_tokens_details") if isinstance(usage.get("prompt_tokens_details"), dict) else {}
    # DeepSeek-style servers report the cache hit as prompt_cache_hit_tokens.
    cached = details.get("cached_tokens", usage.get("prompt_cache_hit_tokens", 0))
    text = message.get("content")
    return ChatResult(
        tool_calls=tuple(calls),
        text=text if isinstance(text, str) else None,
        finish_reason=choices[0].get("finish_reason"),
        model=str(data.get("model") or body.get("model") or ""),
        prompt_tokens=_int(usage.get("prompt_tokens")),
        cached_tokens=_int(cached),
        completion_tokens=_int(usage.get("completion_tokens")),
        latency_s=latency,
        attempts=attempts,
        response=data,
    )


def _tool_call(call_id: object, name: str, arguments: object) -> ToolCall:
    if isinstance(arguments, dict):   # some servers send the object itself
        return ToolCall(str(call_id) if call_id else None, name, arguments, json.dumps(arguments, ensure_ascii=False))
    raw = arguments if isinstance(arguments, str) else ""
    try:
        parsed = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        return ToolCall(str(call_id) if call_id else None, name, None, raw,
                        f"arguments are not valid JSON ({exc.msg} at char {exc.pos})")
    except (ValueError, RecursionError):   # a number of more than 4,300 digits, nesting deeper than the stack
        return ToolCall(str(call_id) if call_id else None, name, None, raw,
                        "arguments hold a number too long or nesting too deep to read")
    if not isinstance(parsed, dict):
        return ToolCall(str(call_id) if call_id else None, name, None, raw,
                        f"arguments must be a JSON object, got {type(parsed).__name__}")
    return ToolCall(str(call_id) if call_id else None, name, parsed, raw)


def _int(value: object) -> int:
    """A token count as the endpoint reported it, if it is one SQLite and the cost ledger can hold; else 0."""
    return value if int_between(value, 0, MAX_INT) else 0
