"""The README and the docs/ pages as a stranger uses them: every shell and Python block runs as written, a page's
blocks in order in one shell (the way a reader types them into one terminal), in a fresh folder with its own HOME.

Which blocks run. A fenced block whose info string is ``sh``, ``bash`` or ``python`` runs, unless the line just
before its opening fence is one of these HTML comments (invisible on a rendered page):

``<!-- docs-test: skip — WHY -->``
    not run: it installs from the network, needs a model endpoint or a host program, or only illustrates; the
    reason is required.
``<!-- docs-test: run by tests/FILE.py::TEST -->``
    not run here: that test runs it as written and checks its output (the test must exist).
``<!-- docs-test: setup COMMAND -->``
    run COMMAND (shell) first, unseen by the reader: what the page takes for granted, e.g. a vault from the README's
    tour (``acp memory init --example >/dev/null``).
``<!-- docs-test: fails -->``
    the block's last command is shown failing: everything before it must succeed, it must fail with one
    ``Error:`` line.

Other blocks (``json``, ``toml``, ``yaml``, ``text``, diagrams) are data, not commands. ``$EDITOR`` is an editor that
saves an entry unchanged and writes one line into an empty draft; no model endpoint is set, so the fork is the
offline extractor. The pages' ``acp`` is ``tests/support/launcher.py``'s (a real process without a fresh
interpreter); the README's tour runs the installed console script.
"""
from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import launcher

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = {"sh", "bash", "python"}
_FENCE = re.compile(r"^(?P<indent> *)```(?P<info>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
_MARK = re.compile(r"<!--\s*docs-test:\s*(?P<kind>skip|run by|setup|fails)\b\s*(?P<arg>.*?)\s*-->")


class Block:
    def __init__(self, page: Path, line: int, info: str, body: str, kind: str | None, arg: str) -> None:
        self.page, self.line, self.info, self.body, self.kind, self.arg = page, line, info, body, kind, arg

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    text = page.read_text("utf-8")
    out = []
    for m in _FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").rpartition("\n")[2].strip()
        mark = _MARK.fullmatch(before)
        indent = len(m["indent"])
        body = "".join(ln[indent:] + "\n" for ln in m["body"].splitlines())
        out.append(Block(page, text.count("\n", 0, m.start()) + 1, m["info"], body,
                         mark["kind"] if mark else None, mark["arg"] if mark else ""))
    return out


def _editor(tmp: Path) -> Path:
    p = tmp / "editor.sh"   # a person who saves an entry as it was, and writes a line into an empty draft
    p.write_text("#!/bin/sh\ngrep -q '^id:' \"$1\" && exit 0\n"
                 "printf 'Run the migrations before the deploy, never after.\\n' > \"$1\"\n")
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return p


def _script(page: Path) -> str:
    parts = ["set -euo pipefail"]
    for b in blocks(page):
        if b.info not in RUNNABLE or b.kind in ("skip", "run by"):
            continue
        parts.append(f"echo '@@ {b.where}' >&2")
        if b.kind == "setup":
            parts.append(b.arg)
        body = b.body
        if b.info == "python":
            body = f"python - <<'ACPMEM_DOCS_PY'\n{body}ACPMEM_DOCS_PY\n"
        if b.kind == "fails":
            lines = body.rstrip("\n").splitlines()
            last = max(i for i, ln in enumerate(lines) if ln.strip() and not ln.lstrip().startswith("#"))
            assert not lines[last].rstrip().endswith("\\"), f"{b.where}: the failing command must be one line"
            body = "\n".join(lines[:last]) + (
                f"\nif {lines[last]} 2>\"$TMPDIR/docs-err\"; then echo '{b.where}: expected to fail' >&2; exit 99; fi"
                f"\ncat \"$TMPDIR/docs-err\" >&2\n"
                f"[ \"$(grep -c '^Error: ' \"$TMPDIR/docs-err\")\" = 1 ] && [ \"$(wc -l < \"$TMPDIR/docs-err\")\" = 1 ]"
                f" || {{ echo '{b.where}: not one Error: line' >&2; exit 98; }}\n")
        parts.append(body)
    return "\n".join(parts) + "\n"


def _run_page(page: Path, tmp: Path) -> subprocess.CompletedProcess:
    home = tmp / "home"
    home.mkdir()
    proj = tmp / "proj"   # a project, as a clone of this repository is: its examples/ at hand
    proj.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=proj, check=True)
    (proj / "examples").symlink_to(ROOT / "examples")
    # `acp` is the launcher's (tests/support/launcher.py): each a process of its own, without a fresh interpreter;
    # the README's tour (below) and tests/test_readme_sections.py run the installed console script
    env = dict(os.environ, PATH=launcher.path_env(), TMPDIR=str(tmp), HOME=str(home), EDITOR=str(_editor(tmp)),
               ACPMEM_NO_WATCH="1")
    for k in ("VISUAL", "ACPMEM_VAULT", "ACPMEM_USER_VAULT", "ACPMEM_SESSION", "OPENAI_BASE_URL", "OPENAI_MODEL",
              "OPENAI_API_KEY"):
        env.pop(k, None)
    return subprocess.run(["bash", "-c", _script(page)], capture_output=True, text=True, env=env, cwd=proj,
                          timeout=300)


def test_every_block_of_every_page_runs_as_written(tmp_path):
    ran = 0
    for page in PAGES:
        runnable = [b for b in blocks(page) if b.info in RUNNABLE and b.kind not in ("skip", "run by")]
        if not runnable:
            continue
        tmp = tmp_path / page.stem
        tmp.mkdir()
        r = _run_page(page, tmp)
        last = re.findall(r"^@@ (.*)$", r.stderr, re.M)
        assert r.returncode == 0, (f"block at {last[-1] if last else page}", r.stdout[-2000:], r.stderr[-3000:])
        assert "Traceback" not in r.stderr, r.stderr[-3000:]
        ran += len(runnable)
    assert ran >= 10


def test_every_mark_is_understood_and_every_skip_says_why():
    seen = set()
    for page in PAGES:
        text = page.read_text("utf-8")
        assert len(re.findall(r"<!--\s*docs-test", text)) == len(_MARK.findall(text)), f"{page}: an unknown mark"
        for b in blocks(page):
            if b.kind is None:
                continue
            seen.add(b.kind)
            assert b.info in RUNNABLE, f"{b.where}: a mark on a {b.info or 'plain'} block, which never runs"
            if b.kind == "skip":
                assert len(b.arg.strip("—- ")) > 10, f"{b.where}: say why it is not run"
            if b.kind == "run by":
                file, _, name = b.arg.partition("::")
                assert f"def {name}(" in (ROOT / file).read_text("utf-8"), f"{b.where}: no test {b.arg}"
            if b.kind == "setup":
                assert b.arg, f"{b.where}: setup without a command"
    assert {"skip", "run by"} <= seen


def test_every_link_between_the_pages_leads_somewhere():
    def slug(heading: str) -> str:   # GitHub's anchors: lower case, punctuation dropped, spaces to hyphens
        return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")

    for page in PAGES:
        text = page.read_text("utf-8")
        for href in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", href):
                continue
            file, _, anchor = href.partition("#")
            target = (page.parent / file) if file else page
            assert target.exists(), f"{page.name}: {href} leads nowhere"
            if anchor:
                heads = {slug(h) for h in re.findall(r"^#+ (.*)$", target.read_text("utf-8"), re.M)}
                assert anchor in heads, f"{page.name}: no heading #{anchor} in {target.name}"


def test_the_index_lists_every_page():
    index = (ROOT / "docs" / "index.md").read_text("utf-8")
    for page in PAGES[1:]:
        if page.name != "index.md":
            assert f"]({page.name})" in index, f"docs/index.md does not list {page.name}"


def test_the_configuration_reference_has_every_setting_with_its_default():
    from acpmem.core.settings import _SECTIONS, Settings

    ref = (ROOT / "docs" / "configuration.md").read_text("utf-8")

    def row(section: str, key: str) -> str:
        part = ref[ref.index(f"## `[{section}]`"):]
        part = part[:part.find("\n## ", 1)]
        m = re.search(rf"^\| `{key}` \| (.*?) \|", part, re.M)
        assert m, f"docs/configuration.md: no row for [{section}] {key}"
        return m.group(1)

    def toml(v: object) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return f'"{v}"'
        if isinstance(v, tuple):
            return "[" + ", ".join(toml(x) for x in v) + "]"
        return repr(v)

    s = Settings()
    assert row("vault", "types") == f"`{toml(s.types)}`" and row("vault", "language") == f"`{toml(s.language)}`"
    for name in _SECTIONS:
        section = getattr(s, name)
        for key in section.keys():
            assert row(name, key) == f"`{toml(section[key])}`", f"[{name}] {key}: the default is {section[key]!r}"
    template = (ROOT / "acpmem" / "vault_template" / "acpmem.toml").read_text("utf-8")
    for section in re.findall(r"^\[(\w+)\]$", template, re.M):
        assert f"## `[{section}]`" in ref, section


def test_the_tour_runs_as_written(tmp_path):
    text = README.read_text("utf-8")
    tour = text[text.index("## A short tour"):]
    block = re.search(r"```sh\n(.*?)```", tour, re.S).group(1)
    assert block.startswith(". .venv/bin/activate")
    lines = block.splitlines()[1:]           # the venv this test runs in is already "activated" through PATH
    script = "set -euo pipefail\n" + "\n".join(lines) + "\n"
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}", TMPDIR=str(tmp_path),
               EDITOR="true")   # the person's editor: one that saves without changes
    env.pop("ACPMEM_VAULT", None)
    env.pop("VISUAL", None)
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=240)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    assert "Error" not in r.stderr and "Traceback" not in r.stderr
    assert "Use SQLite WAL mode" in r.stdout and "Forgot #" in r.stdout and "forget" in r.stdout
    assert "No changes to #" in r.stdout     # the editor step ran, through $EDITOR
