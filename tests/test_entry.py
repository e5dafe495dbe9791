"""The entry model: byte-exact round trip, minimal diffs on change, and strict refusal of malformed frontmatter."""
from __future__ import annotations

import pytest

from acpmem.core.errors import EntryInvalid
from acpmem.core.entry import Citation, Entry
from acpmem.core.entryfile import dump_entry, new_entry_text, parse_entry, parse_entry_bytes

SPEC_EXAMPLE = """---
id: k3f9q2            # short, stable, unique; commands accept any unique prefix
title: Session append must be re-entrant — the hook can fire while a write is in flight
type: lesson          # from the vault's enum
importance: 7         # 1..10
created: 2026-11-29T14:03:11Z
last_read: 2026-11-30T09:12:40Z   # or null when never read
citation:
  - session: 7d2c1e0a
    seq: 1283         # an int, a range "1270-1290", or a kernel ref m00012 / b3
tier: 3
source: {request: r-20261129-0f3a, extractor: "llm:gpt-4.1-mini"}
supersedes: []        # ids this entry replaces (optional)
---
- `session.append` is called from the post-tool hook, which can fire again before the first append returns.
- Guard it with the per-session lock in `state.ts`; a plain boolean flag lost entries under load.
"""

CHINESE_UNKNOWN_KEYS = """---
id: zh01ab
title: 上传大文件必须分片，网关限制 100 MB
type: lesson
importance: 8
created: 2026-11-01T08:00:00Z
last_read: null
citation:
- session: s-中文
  seq: 1270-1290
- session: s2
  seq: m00012
tags: [网关, upload]
reviewed_by: 张三
tier: 3
---
- 网关对单个请求体有 100 MB 的硬限制。
- 超过时连接被重置。
"""


@pytest.mark.parametrize("text", [SPEC_EXAMPLE, CHINESE_UNKNOWN_KEYS, SPEC_EXAMPLE.replace("\n", "\r\n"),
                                  "\ufeff" + CHINESE_UNKNOWN_KEYS])
def test_round_trip_is_byte_exact(text):
    e = parse_entry(text, "entries/x.md")
    assert dump_entry(e) == text
    assert parse_entry_bytes(text.encode("utf-8"), "entries/x.md") == e


def test_fields_parse_as_strings_not_dates():
    e = parse_entry(SPEC_EXAMPLE, "entries/x.md")
    assert e.created == "2026-11-29T14:03:11Z" and isinstance(e.created, str)
    assert e.last_read == "2026-11-30T09:12:40Z"
    assert e.citation == (Citation("7d2c1e0a", 1283),)
    assert e.source == {"request": "r-20261129-0f3a", "extractor": "llm:gpt-4.1-mini"}


def test_unknown_keys_are_kept_in_order_on_change():
    e = parse_entry(CHINESE_UNKNOWN_KEYS, "entries/zh.md")
    assert list(e.extra) == ["tags", "reviewed_by"]
    assert e.citation[0].seq == "1270-1290" and e.citation[1].seq == "m00012"
    changed = e.with_changes(importance=9, superseded_by="abc123")
    text = dump_entry(changed)
    # only the importance line changed, and superseded_by was added; everything else is byte-identical
    old_lines, new_lines = CHINESE_UNKNOWN_KEYS.splitlines(), text.splitlines()
    assert [ln for ln in new_lines if ln not in old_lines] == ["importance: 9", "superseded_by: abc123"]
    assert [ln for ln in old_lines if ln not in new_lines] == ["importance: 8"]
    again = parse_entry(text, "entries/zh.md")
    assert again.extra == {"tags": ["网关", "upload"], "reviewed_by": "张三"}
    assert again.importance == 9 and again.superseded_by == "abc123"


def test_change_keeps_crlf_and_comments():
    crlf = SPEC_EXAMPLE.replace("\n", "\r\n")
    e = parse_entry(crlf, "entries/x.md").with_changes(importance=3)
    text = dump_entry(e)
    assert "importance: 3\r\n" in text
    assert "\n" not in text.replace("\r\n", "")
    assert "# short, stable, unique" in text
    assert parse_entry(text, "x").importance == 3


def test_body_change_only_changes_body():
    e = parse_entry(SPEC_EXAMPLE, "entries/x.md")
    text = dump_entry(e.with_changes(body="- new body\n"))
    assert text.split("---\n", 2)[1] == SPEC_EXAMPLE.split("---\n", 2)[1]
    assert text.endswith("---\n- new body\n")


def test_new_entry_text_is_clean_yaml_with_plain_dates():
    e = Entry(id="abc123", title="no", type="fact", importance=5, created="2026-11-29T12:00:00Z", body="- x\n",
              citation=(Citation("s1", 4),), source={"request": "r-1", "extractor": "offline"})
    text = new_entry_text(e)
    assert "created: 2026-11-29T12:00:00Z\n" in text          # dates stay plain ISO strings
    assert "title: 'no'\n" in text                             # YAML 1.1 readers would read a bare no as false
    back = parse_entry(text, "x")
    assert back.title == "no" and back == e.with_changes(path="x")
    assert dump_entry(back) == text


def _fm(body: str) -> str:
    return "---\n" + body + "---\nbody\n"


GOOD = ("id: a1\ntitle: t\ntype: fact\nimportance: 5\ncreated: 2026-11-29T12:00:00Z\n")

MALFORMED = [
    ("alias bomb", _fm('a: &a ["x","x"]\nb: &b [*a,*a]\nc: [*b,*b]\n' + GOOD), None, "anchors and aliases"),
    ("python tag", _fm(GOOD + "x: !!python/object/apply:os.system ['echo hi']\n"), None, "tags are not allowed"),
    ("duplicate key", _fm(GOOD + "importance: 6\n"), None, "duplicate key"),
    ("no coerced", _fm(GOOD.replace("title: t", "title: no")), None, None),  # valid: stays the string "no"
    ("012 importance", _fm(GOOD.replace("importance: 5", "importance: 012")), "importance", "integer from 1 to 10"),
    ("unclosed", "---\n" + GOOD + "body without a closing line\n", None, "never closed"),
    ("no frontmatter", "just text\n", None, "does not start with"),
    ("not a mapping", _fm("- a\n- b\n"), None, "must be a YAML mapping"),
    ("bad yaml", _fm(GOOD + "x: [unclosed\n"), None, "not valid YAML"),
    ("missing title", _fm(GOOD.replace("title: t\n", "")), "title", "missing"),
    ("bad type", _fm(GOOD.replace("type: fact", "type: gossip")), "type", "not one of"),
    ("importance 11", _fm(GOOD.replace("importance: 5", "importance: 11")), "importance", "1 to 10"),
    ("importance bool", _fm(GOOD.replace("importance: 5", "importance: true")), "importance", "1 to 10"),
    ("date not iso", _fm(GOOD.replace("2026-11-29T12:00:00Z", "29/11/2026")), "created", "ISO 8601"),
    ("id with dots", _fm(GOOD.replace("id: a1", "id: ../../etc")), "id", "letters, digits"),
    ("bad citation", _fm(GOOD + "citation:\n- session: s\n  seq: abc\n"), "citation", "seq must be"),
    ("multiline title", _fm(GOOD.replace("title: t", "title: |\n  a\n  b")), "title", "one line"),
]


@pytest.mark.parametrize("name,text,field,reason", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_frontmatter_is_refused_with_field_and_reason(name, text, field, reason):
    if reason is None:
        assert parse_entry(text, "entries/bad.md").title == "no"
        return
    with pytest.raises(EntryInvalid) as ei:
        parse_entry(text, "entries/bad.md")
    err = ei.value
    assert err.path == "entries/bad.md"
    assert err.field == field
    assert reason in err.reason
    assert "\n" not in str(err)


def test_huge_frontmatter_non_utf8_and_nul_are_refused():
    huge = "---\n" + GOOD + "pad: " + "x" * 10_000_000 + "\n---\nbody\n"
    with pytest.raises(EntryInvalid, match="larger than"):
        parse_entry_bytes(huge.encode(), "entries/huge.md")
    with pytest.raises(EntryInvalid, match="not UTF-8"):
        parse_entry_bytes(_fm(GOOD).encode() + b"\xff\xfe", "entries/latin1.md")
    with pytest.raises(EntryInvalid, match="NUL"):
        parse_entry_bytes(_fm(GOOD).encode().replace(b"body", b"bo\x00dy"), "entries/nul.md")


def test_values_behave_like_frozen_dataclasses():
    import pickle

    from acpmem.core.values import FrozenInstanceError

    e = parse_entry(_fm(GOOD), "entries/a1.md")
    assert e.raw is not None
    same = e.with_changes(raw=None)
    assert same == e and same is not e  # raw is the file as read: not part of the value
    assert "raw=" not in repr(e) and repr(e).startswith("Entry(id='a1', title='t', type='fact', importance=5")
    assert e.with_changes(title="u") != e and e.with_changes(title="u").title == "u"
    with pytest.raises(FrozenInstanceError):
        e.title = "changed"
    with pytest.raises(AttributeError):
        del e.id
    c = Citation("s1", 4)
    assert c == Citation(session="s1", seq=4) and hash(c) == hash(Citation("s1", 4))
    assert len({c, Citation("s1", 4)}) == 1
    assert c != Citation("s1", 5) and repr(c) == "Citation(session='s1', seq=4)" and str(c) == "s1#4"
    assert pickle.loads(pickle.dumps(e)) == e
    assert Entry(id="x", title="t", type="fact", importance=1, created="c", body="").extra == {}
    with pytest.raises(TypeError, match="colour"):
        c.with_changes(colour="red")


def test_settings_are_values_with_json_and_mapping_forms():
    from acpmem.core.settings import ExtractionSettings, ScoreSettings, Settings, settings_from_json

    s = Settings()
    assert s == Settings() and s.score == ScoreSettings() and s.score.top_n == 5
    d = s.to_json()
    assert d["score"] == {"importance_weight": 1.0, "recency_divisor_days": 30.0, "recency_cap": 5.0,
                          "jitter_max": 0.5, "top_n": 5}
    assert d["index"]["watch_min_entries"] == 5000 and d["language"] == "en"
    assert settings_from_json(d) == s
    changed = s.with_changes(score=s.score.with_changes(top_n=9))
    assert changed.score.top_n == 9 and s.score.top_n == 5 and changed != s
    assert dict(ExtractionSettings(model="m")) == {**ExtractionSettings().to_json(), "model": "m"}
    from acpmem.search.catalog import Problem

    with pytest.raises(TypeError, match="missing field 'reason'"):
        Problem("entries/x.md")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected field 'colour'"):
        s.with_changes(colour="red")


def test_frontmatter_acpmem_writes_is_parsed_once_and_hostile_yaml_is_still_walked():
    from acpmem.core.frontmatter import _needs_no_event_check
    from acpmem.core.entryfile import load_yaml_mapping

    fm = new_entry_text(parse_entry(_fm(GOOD), "entries/a1.md")).split("---\n")[1]
    assert _needs_no_event_check(fm)  # acpmem's own files: one parse
    # Whatever could hold an anchor, alias, tag, directive or second document is walked event by event first, so
    # the refusal (or the first syntax error, even in a later document) is what it always was.
    for text, reason in [("a: &x 1\nb: *x\n", "anchors and aliases"), ("a: !!str 1\n", "tags are not allowed"),
                         ("a: 1\n--- \nb: [\n", "line 5: did not find expected node content"),
                         ("a: 1\n--- \nb: 2\n", "found another document")]:
        assert not _needs_no_event_check(text)
        with pytest.raises(EntryInvalid, match=reason):
            load_yaml_mapping(text, "entries/x.md")
    assert load_yaml_mapping("%YAML 1.1\n--- \na: 1\n", "entries/x.md") == {"a": 1}


# ----------------------------------------------------------------------- the frontmatter fast path (no PyYAML)

def _typed(x):
    """A value with the type of every part spelled out (True == 1 and 1 == 1.0 in Python; not here)."""
    if isinstance(x, dict):
        return ("dict", [(_typed(k), _typed(v)) for k, v in x.items()])
    if isinstance(x, list):
        return ("list", [_typed(v) for v in x])
    return (type(x).__name__, x)


def _by_yaml(text: str):
    from acpmem.core import frontmatter

    yaml, Loader, _ = frontmatter._yaml()
    try:
        return _typed(yaml.load(text, Loader=Loader))
    except yaml.YAMLError:
        return "error"


_PIECES = ["a", "b", "id", "seq", "true", "Null", "x" * 130, "abc", "12", "-3", "+4", "0", "007", "1.5", ".5", "1e3",
           "~", "null", "True", "no", "2026-11-29T14:03:11Z", "12:30", "http://x.y/z", "50%", "a#b", "a #b", "a: b",
           "a:", ":a", "'q'", "'it''s'", '"dq"', '"a\\nb"', '"x', "'x", "é", "中文", "a  b", "a b", " ", "", "-", "- a",
           "[a]", "{a: 1}", "&x", "*x", "!t", "|", ">", "%", "@", "`", ",", "?", "\t", "\x85", "\u2028", "#c", "=",
           "<<", "..."]


def test_fast_frontmatter_reads_exactly_what_yaml_reads():
    """The hand parser either declines (None) or returns exactly what the restricted YAML loader returns, types
    included, over generated frontmatter built from awkward pieces."""
    from hypothesis import given, settings, strategies as st

    from acpmem.core import frontmatter

    keys = ["id", "title", "citation", "seq", "session", "x_y", "_"] * 3 + ["true", "null", "k" * 130]
    safe = st.sampled_from(["a", "abc", "12", "0", "1.5", "+4", "null", "True", "2026-11-29T14:03:11Z", "12:30",
                            "http://x.y/z", "中文", "a b", "'it''s'", '"dq"', "50%", "a#b", ".5", "no", "~"])
    value = st.one_of(*[safe] * 6, st.lists(st.sampled_from(_PIECES), max_size=3).map("".join))
    sep = st.sampled_from([": "] * 12 + [":", ":  ", " : "])

    def mapping_lines(pairs, first_prefix="", prefix=""):
        return [(first_prefix if i == 0 else prefix) + f"{k}{s}{v}" for i, (k, s, v) in enumerate(pairs)]

    pairs = st.lists(st.tuples(st.sampled_from(keys), sep, value), min_size=1, max_size=3, unique_by=lambda t: t[0])
    item = pairs.map(lambda ps: "\n".join(mapping_lines(ps, "- ", "  ")))
    odd = st.sampled_from(["", "# comment", "  indented: x", "- loose", "---", "  - nested: 1", "\t", "key:   x"])
    flow_value = st.one_of(*[safe] * 4, st.sampled_from(["'llm:gpt-4.1-mini'", "llm:x", "a,b", "{x: 1}", "[1]", "",
                                                        "'a, b'", "x}", " y"]))
    flow = st.lists(st.tuples(st.sampled_from(keys), flow_value), max_size=3).map(
        lambda kvs: "{" + ", ".join(f"{k}: {v}" for k, v in kvs) + "}")
    seq = st.lists(st.one_of(flow_value, st.sampled_from(["src/a.py", ".github/ci.yml", "a b.md", "-x", "x]"])),
                   max_size=3).map(lambda vs: "[" + ", ".join(vs) + "]")
    flow = st.one_of(flow, flow.map(lambda f: f.replace(", ", ",")), flow.map(lambda f: f + " "),
                     flow.map(lambda f: f.replace("{", "{ ", 1)), seq, seq.map(lambda f: f.replace(", ", ",")),
                     seq.map(lambda f: f + " "), seq.map(lambda f: f.replace("[", "[ ", 1)))

    # built once, not at every draw (hypothesis validates a strategy when it is first drawn from): the same values
    n_lines = st.integers(1, 6)
    kinds = st.sampled_from(["scalar"] * 8 + ["block"] * 3 + ["flow"] * 3 + ["odd"] + ["dup"])
    key = st.sampled_from(keys)
    items = st.lists(item, min_size=1, max_size=3)

    @st.composite
    def text(draw):
        lines, used = [], set()
        for _ in range(draw(n_lines)):
            kind = draw(kinds)
            k = draw(key)
            if kind == "odd":
                lines.append(draw(odd))
                continue
            if k in used and kind != "dup":
                continue
            used.add(k)
            if kind == "block":
                lines.append(k + ":\n" + "\n".join(draw(items)))
            elif kind == "flow":
                lines.append(f"{k}: {draw(flow)}")
            else:
                lines.append(f"{k}{draw(sep)}{draw(value)}")
        return "\n".join(lines) + "\n"

    seen = {"fast": 0, "declined": 0}

    @settings(max_examples=2000, deadline=None, database=None)
    @given(text())
    def check(t):
        fast = frontmatter._fast_mapping(t)
        if fast is None:
            seen["declined"] += 1
            return
        seen["fast"] += 1
        assert _typed(fast) == _by_yaml(t), t

    check()
    # both sides of the line were exercised (hypothesis may stop short of 2000 examples: the bound leaves room)
    assert seen["fast"] > 100 and seen["declined"] > 100


def test_fast_frontmatter_takes_what_acpmem_writes():
    from acpmem.core import frontmatter

    e = Entry(id="k3f9x2", title="Retry: uploads #3 — don't give up", type="lesson", importance=7,
              created="2026-11-01T10:00:00Z", body="b\n", citation=(Citation("a41f0c2e", 213),
                                                                      Citation("s-2", "1270-1290")),
              superseded_by="q8z", source={"request": "r-k3f9q2ab", "extractor": "llm:gpt-4.1-mini"},
              extra={"files": ["src/auth/login.ts", ".github/ci.yml", "docs/a b.md"],
                     "commit": "3f2a9c1e0b7d4a5c6e8f9a0b1c2d3e4f5a6b7c8d"})
    fm = new_entry_text(e).split("---\n")[1]
    assert frontmatter._fast_mapping(fm) is not None
    assert parse_entry(new_entry_text(e)).meta() == e.meta()


def test_dumping_a_whole_frontmatter_equals_dumping_each_key():
    """``dump_yaml`` renders runs of keys in one call; the text must be what rendering key by key gives."""
    from hypothesis import example, given, settings, strategies as st

    from acpmem.core import frontmatter

    text = st.one_of(st.text(st.sampled_from(list("ab :#-'\\\"\n\t中é{}[]&*!|>%@`,?0123456789.~")), max_size=12),
                     st.sampled_from(["null", "true", "no", "2026-11-29T14:03:11Z", "007", "1e3", ""]))
    scalar = st.one_of(text, st.integers(-5, 10**12), st.none(), st.booleans(), st.floats(allow_nan=False))
    value = st.one_of(scalar, scalar, st.lists(text, max_size=2), st.dictionaries(text, scalar, max_size=2),
                      st.lists(st.fixed_dictionaries({"session": text, "seq": scalar}), max_size=2))
    keys = st.sampled_from(["id", "title", "citation", "source", "supersedes", "x", "tier", "note"])

    @settings(max_examples=400, deadline=None, database=None)
    @given(st.dictionaries(keys, value, max_size=6))
    # found once: a citation with a line break in its session is a block scalar inside a run of keys
    @example({"citation": [{"session": "3", "seq": None}, {"seq": None, "session": "\n"}], "id": None})
    def check(meta):
        assert frontmatter.dump_yaml(meta) == "".join(frontmatter.render_key(k, v, "\n") for k, v in meta.items())

    check()


def test_an_entry_with_only_the_required_keys_round_trips_and_changes_one_line():
    """A hand-written file that leaves out the optional keys (last_read, citation, tier) is given back byte for byte,
    and a change rewrites that key's line only — the left-out keys are not added."""
    text = ("---\nid: min1\ntitle: Minimal\ntype: fact\nimportance: 4\ncreated: 2026-11-29T14:03:11Z\n---\n"
            "- body\n")
    e = parse_entry(text, "entries/min1.md")
    assert dump_entry(e) == text
    changed = dump_entry(e.with_changes(title="Minimal, corrected"))
    assert changed == text.replace("title: Minimal\n", "title: Minimal, corrected\n")
    read = dump_entry(e.with_changes(last_read="2026-12-01T00:00:00Z"))
    assert read == text.replace("created: 2026-11-29T14:03:11Z\n",
                                "created: 2026-11-29T14:03:11Z\nlast_read: 2026-12-01T00:00:00Z\n")


def test_conflict_markers_are_refused_and_a_heading_underline_is_not_one():
    from acpmem.core.entryfile import defuse_conflict_markers, has_conflict_markers

    conflicted = SPEC_EXAMPLE.replace("- Guard it", "<<<<<<< HEAD\n- Guard it\n=======\n- Lock it\n>>>>>>> main\n- G")
    with pytest.raises(EntryInvalid) as exc:
        parse_entry(conflicted, "entries/k3f9q2.md")
    assert "conflict markers" in exc.value.reason and "acp memory sync" in exc.value.hint
    with pytest.raises(EntryInvalid):
        parse_entry(conflicted.replace("\n", "\r\n"), "entries/k3f9q2.md")
    # '=======' under a heading, or one marker without the other, is markdown, not a conflict
    for body in ("Notes\n=======\n- kept\n", "<<<<<<< only an opening line\n", "a >>>>>>> b\n<<<<<<<x\n"):
        text = SPEC_EXAMPLE + body
        assert not has_conflict_markers(text)
        assert parse_entry(text).body.endswith(body)
    defused = defuse_conflict_markers(conflicted)
    assert not has_conflict_markers(defused) and parse_entry(defused).id == "k3f9q2"
