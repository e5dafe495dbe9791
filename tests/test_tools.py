"""Tool schemas, descriptions, nudge and fork texts, and strict argument parsing."""
import json

import jsonschema
import pytest

from acpmem.core.errors import EntryInvalid, UsageError
from acpmem.core.tools import nudge_text, parse_commit_args, parse_recall_args, parse_write_args, tool_definitions
from acpmem.write.prompts import fork_instruction

TYPES = ("decision", "lesson", "gotcha")


def _schema(tool, fmt):
    return {"openai": lambda t: t["function"]["parameters"], "anthropic": lambda t: t["input_schema"],
            "mcp": lambda t: t["inputSchema"]}[fmt](tool)


def _name(tool, fmt):
    return tool["function"]["name"] if fmt == "openai" else tool["name"]


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "mcp"])
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_permission_separation_in_every_format(fmt, lang):
    main = tool_definitions("main", fmt, lang, TYPES)
    fork = tool_definitions("fork", fmt, lang, TYPES)
    assert [_name(t, fmt) for t in main] == ["memory_commit", "memory_recall"]
    assert [_name(t, fmt) for t in fork] == ["memory_write"]
    for tool in main + fork:
        jsonschema.Draft202012Validator.check_schema(_schema(tool, fmt))
    commit = _schema(main[0], fmt)
    assert commit["properties"]["type"]["enum"] == list(TYPES)
    assert commit["required"] == ["type", "note", "importance"]
    # the commit schema has no room for content: the main conversation cannot write
    assert "content" not in commit["properties"] and commit["additionalProperties"] is False
    v = jsonschema.Draft202012Validator(commit)
    assert v.is_valid({"type": "gotcha", "note": "n", "importance": 7})
    assert not v.is_valid({"type": "fact", "note": "n", "importance": 7})
    assert not v.is_valid({"type": "lesson", "note": "n", "importance": 11})
    assert not v.is_valid({"type": "lesson", "note": "n", "importance": 3, "content": "smuggled"})
    write = jsonschema.Draft202012Validator(_schema(fork[0], fmt))
    assert write.is_valid({"content": "- x", "title": "t", "supersedes": ["k3f9q2"]})
    assert not write.is_valid({"title": "t"})


def test_shapes_of_each_format():
    o = tool_definitions("main", "openai")[1]
    assert o["type"] == "function" and set(o["function"]) == {"name", "description", "parameters"}
    a = tool_definitions("main", "anthropic")[1]
    assert set(a) == {"name", "description", "input_schema"}
    m = tool_definitions("main", "mcp")
    assert m[1]["annotations"]["readOnlyHint"] is True and m[0]["annotations"]["readOnlyHint"] is False
    json.dumps(tool_definitions("fork", "mcp", "zh"), ensure_ascii=False)


@pytest.mark.parametrize("lang, musts", [
    ("en", ["decision", "lesson", "user preference", "reference", "Do NOT", "git history", "debugging plans",
            "temporary task state", "AGENTS.md", "CLAUDE.md", "surprising or non-obvious"]),
    ("zh", ["决定", "教训", "用户偏好", "不要", "git 历史", "调试计划", "临时任务状态", "AGENTS.md", "出人意料"]),
])
def test_commit_description_says_when_and_when_not(lang, musts):
    desc = tool_definitions("main", "openai", lang)[0]["function"]["description"]
    for must in musts:
        assert must in desc, must


def test_type_descriptions_gloss_known_types_only():
    desc = tool_definitions("main", "openai", "en", TYPES)[0]["function"]["parameters"]["properties"]["type"]["description"]
    assert "lesson: a trap hit" in desc and "gotcha" not in desc


def test_bad_options_are_usage_errors():
    with pytest.raises(UsageError, match="Unknown for 'both'"):
        tool_definitions("both")
    with pytest.raises(UsageError, match="--format openai | anthropic | mcp | dsh"):
        tool_definitions("main", "gemini")
    with pytest.raises(UsageError, match="Unknown lang 'fr'"):
        nudge_text("fr")
    with pytest.raises(UsageError, match="Unknown voice 'loud'"):
        nudge_text("en", "loud")
    with pytest.raises(UsageError):
        tool_definitions("main", types=())


@pytest.mark.parametrize("voice", ["gentle", "emergency", "tier"])
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_nudge_has_two_parts_and_an_example_call(lang, voice):
    text = nudge_text(lang, voice)
    head, first, second = text.split("\n1. ")[0], *text.split("\n1. ")[1].split("\n2. ")
    assert head.startswith(("[LONG-TERM MEMORY]", "[长期记忆]"))    # a section of its own, like the kernel's
    assert "memory_commit({ type:" in first and 'block: "b12"' in first and "memory_commit" not in second
    assert "compress" in second
    assert len(text) < 700


def test_fork_instruction_carries_focus_rules_and_related_entries():
    related = '<<acpmem-data kind="related" id="k3f9q2" nonce="ab">>\nold text\n<</acpmem-data nonce="ab">>'
    text = fork_instruction("pnpm\n  over npm", "user-preference", 6, related)
    assert text.startswith("Extract the memories needed now; focus: pnpm over npm\n")
    for must in ["user-preference (importance 6)", "One fact per entry", "Self-contained", "\"above\"",
                 "supersedes", "do not call memory_write"]:
        assert must in text, must
    assert text.endswith(related)
    assert fork_instruction("n", "fact", 3, None).endswith("Related existing entries:\n(none)")
    zh = fork_instruction("用 pnpm", "fact", 3, "", lang="zh")
    assert zh.startswith("提取现在需要的记忆；重点：用 pnpm") and "supersedes" in zh and zh.endswith("（无）")


def test_parse_commit_args():
    assert parse_commit_args({"type": "lesson", "note": " a\n b ", "importance": "7"}) == \
        parse_commit_args({"type": "lesson", "note": "a b", "importance": 7})
    bad = [({"type": "gotcha", "note": "n", "importance": 5}, "type"),
           ({"type": "lesson", "note": "  ", "importance": 5}, "note"),
           ({"type": "lesson", "note": "n", "importance": 0}, "importance"),
           ({"type": "lesson", "note": "n", "importance": True}, "importance"),
           ({"type": "lesson", "note": "n", "importance": 5, "content": "x"}, "content")]
    for args, field in bad:
        with pytest.raises(EntryInvalid) as info:
            parse_commit_args(args)
        assert info.value.field == field and info.value.path == "memory_commit"
    with pytest.raises(EntryInvalid, match="arguments must be an object"):
        parse_commit_args(["lesson"])


def test_parse_recall_and_write_args():
    assert parse_recall_args({"query": "pnpm"}).limit == 5
    with pytest.raises(EntryInvalid, match="limit"):
        parse_recall_args({"query": "x", "limit": 500})
    w = parse_write_args({"content": "- Use pnpm.\n", "title": "Repo uses\npnpm", "supersedes": ["k3f9q2", "k3f9q2"]})
    assert (w.content, w.title, w.supersedes) == ("- Use pnpm.", "Repo uses pnpm", ("k3f9q2",))
    assert parse_write_args({"content": "x", "supersedes": "abc"}).supersedes == ("abc",)
    for args, field in [({"content": ""}, "content"), ({"content": "x" * 9000}, "content"),
                        ({"content": "x", "supersedes": ["../etc"]}, "supersedes"),
                        ({"content": "x", "title": "t" * 400}, "title"), ({"content": "x", "tags": []}, "tags")]:
        with pytest.raises(EntryInvalid) as info:
            parse_write_args(args)
        assert info.value.field == field


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_schema_bound_is_in_the_description_too(lang):
    """Codex (and other clients) strip minimum/maximum/maxLength/pattern from the schema they send the model: the
    description must still say them."""
    from acpmem.core.tools import tool_definitions

    for tool in tool_definitions(for_="main", format="mcp", lang=lang):
        for name, prop in tool["inputSchema"]["properties"].items():
            desc = prop["description"]
            if "minimum" in prop or "maximum" in prop:
                assert f"{prop['minimum']}-{prop['maximum']}" in desc, (tool["name"], name, desc)
            if "maxLength" in prop:
                assert str(prop["maxLength"]) in desc, (tool["name"], name, desc)
            if "pattern" in prop:
                assert "b12" in desc and "pi-compaction-" in desc, (tool["name"], name, desc)
