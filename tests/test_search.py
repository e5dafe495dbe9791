"""acpmem.search: tokenizers, parity with acp-kernel's searchBlocks over its golden output, and the default engine
(typos, Chinese, English↔Chinese, spreading, boosts, and ranking from postings alone)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from acpmem.search import cedict
from acpmem.core.errors import AcpmemError
from acpmem.search.ranking import (DUPLICATE, CorpusStats, SearchDoc, _diversify, analyze, latin_words, plan_query,
                                   query_dates, rank)
from acpmem.search.kernel import KernelDoc, kernel_search, kernel_stem, kernel_tokenize
from acpmem.search.reference import MemoryIndex, Vocabulary

FIXTURES = Path(__file__).parent / "fixtures" / "kernel"
CORPUS = json.loads((FIXTURES / "kernel-search-corpus.json").read_text(encoding="utf-8"))
GOLDEN = json.loads((FIXTURES / "kernel-search-golden.json").read_text(encoding="utf-8"))
KDOCS = [KernelDoc(d["id"], d["text"]) for d in CORPUS["docs"]]


@pytest.fixture(scope="module")
def kernel_index() -> MemoryIndex:
    return MemoryIndex(SearchDoc(d["id"], d["topic"], d["summary"]) for d in CORPUS["docs"])


# ─────────────────────────────── tokenizers ───────────────────────────────

@pytest.mark.parametrize("word,stem", [
    ("implemented", "imple"), ("authentication", "authenticat"), ("responses", "respons"), ("httponly", "httpon"),
    ("queries", "query"), ("boxes", "box"), ("branches", "branch"), ("class", "class"), ("pooling", "pool"),
    ("connections", "connect"), ("migration", "migrat"), ("settings", "sett"), ("api", "api"), ("uses", "us"),
])
def test_kernel_stemmer(word, stem):
    assert kernel_stem(word) == stem


def test_kernel_tokenizer_latin_numbers_and_punctuation():
    assert kernel_tokenize("Fixed 401 expired-token handling in src/auth/token.ts!") == [
        "fix", "expir", "token", "handl", "in", "src", "auth", "token", "ts"]
    assert kernel_tokenize("i18n a b") == ["i18n"]  # single letters and bare numbers are dropped


def test_kernel_tokenizer_matches_kernel_output_on_latin_docs():
    latin = [d for d in CORPUS["docs"] if not any("\u3400" <= c <= "\u9fff" for c in d["text"])]
    assert len(latin) >= 20
    for d in latin:
        assert kernel_tokenize(d["text"]) == GOLDEN["docTokens"][d["id"]], d["id"]


def test_kernel_tokenizer_chinese_words_and_fallback():
    assert kernel_tokenize("试验证明") == ["试验", "证明"]
    # a run with no word of two characters falls back to bigrams plus single characters
    assert kernel_tokenize("子") == ["子"]


def test_latin_words_split_camel_case_and_compounds():
    assert latin_words("refreshToken()") == ["refresh", "token", "refreshtoken"]
    assert latin_words("HTTPServer auth-token") == ["http", "server", "httpserver", "auth", "token", "authtoken"]
    assert latin_words("i18n k8s") == ["i18n", "k8s"]
    assert latin_words("Caroline's dog") == ["caroline", "dog"]
    assert latin_words("Caroline’s dog") == ["caroline", "dog"]       # a typographic apostrophe too


def test_wont_is_will_not_and_never_a_win():
    """"won't" kept its head "won", which the lemma table reads as the past of "win": a lesson "we won't deploy on
    Fridays" was found by a question about who won, and ranked for it."""
    assert latin_words("We won't deploy on Fridays") == ["we", "will", "deploy", "on", "fridays"]
    assert latin_words("Won’t") == ["will"] and latin_words("shan't") == ["shall"]
    assert latin_words("She won the cup") == ["she", "won", "the", "cup"]      # the past of "win" is still one
    docs = [SearchDoc("wont", "Release rule", "We won't deploy on Fridays."),
            SearchDoc("cup", "Dance contest", "Jon's crew won the regional dance contest.")]
    assert [h.id for h in MemoryIndex(docs).search("who won the contest")] == ["cup"]
    assert [h.id for h in MemoryIndex(docs).search("what did Jon win")] == ["cup"]


def test_words_of_other_alphabets_are_kept_and_accents_folded():
    assert latin_words("Café Straße Привет") == ["cafe", "strasse", "привет"]
    index = MemoryIndex([SearchDoc("fr", "Réunion à Paris", "Le café était fermé"),
                         SearchDoc("ru", "Встреча в Москве", "Кафе было закрыто")])
    assert [h.id for h in index.search("cafe reunion")] == ["fr"]
    assert [h.id for h in index.search("кафе")] == ["ru"]


def test_analyze_snowball_lemmas_stopwords_numbers():
    assert analyze("The authentication was running") == ["authent", "run"]
    assert analyze("She went home and bought 3 books") == ["go", "home", "buy", "3", "book"]
    assert analyze("databases, caching; profiling!") == ["databas", "cach", "profil"]


def test_analyze_chinese_and_mixed():
    terms = analyze("国际化和i18n：身份验证失败返回401")
    assert terms[:2] == ["i18n", "401"]
    assert "国际化" in terms and "身份验证" in terms and "失败" in terms
    assert "和" not in terms  # single-character words are not index terms when the run has words


@pytest.mark.parametrize("run,want", [
    ("试验证明", ["试验", "证明"]),          # two words beat the index term 验证 straddling them
    ("所有权限", ["所有", "权限"]),          # and beat a dictionary word straddling them
    ("身份验证失败", ["身份验证", "失败"]),    # a long indexed word is kept whole
    ("图表可视化", ["图表", "可视化"]),
    ("驴驴驴", ["驴驴", "驴驴", "驴", "驴", "驴"]),  # no known word: bigrams and characters, as in documents
])
def test_query_chinese_is_segmented_against_the_vocabulary(run, want):
    from acpmem.search.ranking import query_cjk_words

    vocab = Vocabulary(analyze("身份验证失败返回。我们验证了。文件上传到阿里云，所有权限。图表可视化。"))
    assert "验证" in vocab
    assert query_cjk_words(run, vocab) == want


def test_a_chinese_query_does_not_load_jieba(tmp_path):
    """Planning a Chinese query uses the vocabulary and the dictionary only: jieba's ~0.2 s load is for documents."""
    import subprocess
    import sys

    code = ("import sys; from acpmem.search.reference import Vocabulary; from acpmem.search.ranking import plan_query; "
            "v = Vocabulary(['身份验证', '失败', 'login']); "
            "g = plan_query('身份验证失败 login', v); "
            "print([x.word for x in g], 'rjieba' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**__import__("os").environ, "XDG_CACHE_HOME": str(tmp_path)}).stdout
    assert out.strip() == "['login', '身份验证', '失败'] False"


# ─────────────────────────────── parity with acp-kernel ───────────────────────────────

@pytest.mark.parametrize("algorithm", ["hybrid", "bm25", "fuzzy"])
def test_parity_with_kernel_golden(algorithm):
    assert len(GOLDEN["results"][algorithm]) == 48
    for item in GOLDEN["results"][algorithm]:
        q = item["q"]
        got = kernel_search(KDOCS, q, algorithm, doc_tokens=GOLDEN["docTokens"], query_tokens=GOLDEN["queryTokens"][q])
        want = item["top"]
        assert [r.ref for r in got] == [w["ref"] for w in want], (algorithm, q)
        for r, w in zip(got, want):
            assert abs(r.score - w["score"]) < 1e-4, (algorithm, q, r.ref)
            if "preview" in w:
                assert r.preview == w["preview"], (algorithm, q, r.ref)


def test_kernel_role_weights_and_errors():
    docs = [KernelDoc("m1", "deploy the worker", kind="message", role="tool"),
            KernelDoc("m2", "deploy the worker", kind="message", role="user")]
    got = kernel_search(docs, "deploy worker", "bm25")
    assert [r.ref for r in got] == ["m2", "m1"]
    assert got[0].score == pytest.approx(got[1].score * 1.5 / 0.6)
    with pytest.raises(AcpmemError):
        kernel_search(docs, "x", "semantic")


# ─────────────────────────────── the default engine ───────────────────────────────

def _rank_of(index: MemoryIndex, query: str, want: str) -> int:
    ids = [h.id for h in index.search(query, limit=10)]
    return ids.index(want) + 1 if want in ids else 0


def test_default_engine_beats_kernel_on_its_corpus(kernel_index):
    rr = [_rank_of(kernel_index, q["q"], q["relevant"][0]) for q in CORPUS["queries"]]
    mrr = sum(1 / r for r in rr if r) / len(rr)
    assert mrr >= 0.95


@pytest.mark.parametrize("query,want", [("tokan", "b1"), ("authentication tokan", "b1"), ("webpak", "b10"),
                                        ("circiut breaker", "b25")])
def test_typo_queries(kernel_index, query, want):
    assert _rank_of(kernel_index, query, want) == 1


def test_a_swapped_pair_of_letters_is_one_typo():
    """An adjacent transposition counts as one edit (it is two for plain Levenshtein, too many for a short word)."""
    index = MemoryIndex([SearchDoc("a", "Antagonism between the two teams"), SearchDoc("b", "Agonizing waits")])
    hits = index.search("anatgonism")
    assert hits and hits[0].id == "a" and hits[0].explain["terms"]["anatgonism"]["via"] == "typo"


@pytest.mark.parametrize("query,want", [("缓存", "b19"), ("文件上传", "b30"), ("试验证明", "b31"), ("图表可视化", "b32"),
                                        ("身份验证", "b5")])
def test_chinese_queries(kernel_index, query, want):
    assert _rank_of(kernel_index, query, want) == 1


@pytest.mark.parametrize("query,want", [("upload", "b30"), ("login", "b5"), ("permission", "b27")])
def test_english_query_finds_chinese_entry(kernel_index, query, want):
    assert _rank_of(kernel_index, query, want) == 1


def test_chinese_query_finds_english_entry():
    index = MemoryIndex([
        SearchDoc("a", "Session data lives in the Redis cache", "Cached for 30 minutes; evict with LRU."),
        SearchDoc("b", "Database migrations run before deploy", "Knex migrations; never edit an applied one."),
        SearchDoc("c", "Upload images through a signed URL", "The browser uploads straight to object storage."),
    ])
    assert index.search("缓存")[0].id == "a"
    assert index.search("数据库迁移")[0].id == "b"
    hits = index.search("上传图片")
    assert hits[0].id == "c" and hits[0].explain["terms"]["上传"]["via"] == "dict"


def test_words_that_frame_a_chinese_request_weigh_little():
    """"帮我写一下…", "一个…": a request's framing words are in few entries, so by IDF alone they outweighed the
    thing asked for (a coding session's prompt "加一个'再次购买'按钮" found entries with 一个 first)."""
    index = MemoryIndex([
        SearchDoc("a", "输出文件太多了，一个分区上千个小文件"),
        SearchDoc("c", "按钮文案一律用 $t('页面.键')，禁止硬编码"),
        SearchDoc("e", "按钮的颜色用主题色"),
        SearchDoc("d", "部署前先跑数据库迁移"),
    ])
    hits = index.search("加一个按钮，帮我写一下")
    assert hits[0].id in ("c", "e"), [h.id for h in hits]           # 按钮, in two entries, over 一个, in one
    assert hits[0].explain["terms"]["按钮"]["via"] == "exact"
    assert index.search("一个")[0].id == "a"                          # asked alone, it still finds what holds it


def test_aliases_and_clipped_words(kernel_index):
    assert _rank_of(kernel_index, "signin", "b5") == 1
    explain = kernel_index.search("authentication")[0].explain
    assert explain["terms"]["authentication"]["via"] in ("clipped", "alias")


def test_a_words_aliases_are_those_of_every_group_holding_it_found_by_its_first_letter(monkeypatch):
    """``aliases_of`` looks only at the alias groups filed under the term's first letter (stemming all of them cost
    every query ~2 ms): for every term of every group, and for other words, it gives what stemming all of them
    gives — the union of the groups holding the term, the term itself left out, the aliases sorted (the order the
    query's candidate terms are tried in, and so which wins a tie, no longer hangs on string hashing)."""
    from acpmem.search import english, ranking
    from acpmem.search.analysis import normalize_word

    terms_of: dict[str, set[str]] = {}
    words_of: dict[str, set[str]] = {}
    for group in english.ALIAS_GROUPS:
        words = {w.replace("-", "") for w in group}
        terms = {normalize_word(w) or w for w in words}
        for t in terms:
            terms_of.setdefault(t, set()).update(terms - {t})
            words_of.setdefault(t, set()).update(words)
    assert len(terms_of) > 400
    for t in terms_of:
        assert ranking.aliases_of(t) == (tuple(sorted(terms_of[t])), frozenset(words_of[t])), t
    others = {normalize_word(w) for w in english.STOP_WORDS | set(english.IRREGULAR) | set(english.QUERY_FILLER)
              | {"deploy", "gateway", "retry", "sqlite", "k8s", "1999", "café", "x"}} - set(terms_of) - {None}
    assert len(others) > 50
    for t in others:
        assert ranking.aliases_of(t) == ((), frozenset()), t
    assert ranking.aliases_of("") == ((), frozenset())
    # a query of one word stems the groups of its letter only
    ranking._alias_group.cache_clear()
    assert normalize_word("buy") in ranking.aliases_of(normalize_word("purchase"))[0]
    assert 0 < ranking._alias_group.cache_info().currsize < len(english.ALIAS_GROUPS) // 4
    # an alias word whose lemma starts with another letter ("went" is "go") is found under the lemma's letter too
    monkeypatch.setattr(english, "ALIAS_GROUPS", english.ALIAS_GROUPS + (("went", "travelled"),))
    ranking._alias_group.cache_clear()
    ranking._alias_groups_by_letter.cache_clear()
    try:
        assert normalize_word("went") == "go" and normalize_word("travelled") == "travel"
        terms, words = ranking.aliases_of("go")
        assert "travel" in terms and {"went", "travelled"} <= words
    finally:
        monkeypatch.undo()
        ranking._alias_group.cache_clear()
        ranking._alias_groups_by_letter.cache_clear()


def test_title_weighs_more_than_body():
    index = MemoryIndex([SearchDoc("body", "Notes on the release", "The scheduler retries failed jobs."),
                         SearchDoc("title", "Scheduler retries failed jobs", "Notes on the release.")])
    assert [h.id for h in index.search("scheduler")] == ["title", "body"]


def test_spreading_reaches_entries_citing_neighbouring_turns():
    docs = [SearchDoc("hit", "Melanie painted a sunrise over the lake", citations=(("1", 12),)),
            SearchDoc("near", "She finished it last year", citations=(("1", "13-14"),)),
            SearchDoc("far", "She likes camping", citations=(("1", 40),)),
            SearchDoc("kernel-ref", "She sold it to a friend", citations=(("1", "m00011"),)),
            SearchDoc("block-ref", "She framed it", citations=(("1", "b3"),)),
            SearchDoc("other-session", "She finished a mural", citations=(("2", 12),))]
    hits = MemoryIndex(docs).search("sunrise painting", limit=5)
    ids = [h.id for h in hits]
    assert ids[0] == "hit" and set(ids[1:]) == {"near", "kernel-ref"}
    assert all(h.explain["spread"] > 0 for h in hits[1:])
    assert [h.id for h in MemoryIndex(docs).search("sunrise painting", spread=False)] == ["hit"]


def test_tag_boost_prefers_entries_about_the_named_person():
    docs = [SearchDoc("m", "Went hiking with the kids", tags=("Melanie",)),
            SearchDoc("c", "Went hiking with the kids", tags=("Caroline",))]
    assert [h.id for h in MemoryIndex(docs).search("When did Caroline go hiking?")][:1] == ["c"]


def test_query_dates_and_date_boost():
    assert [(d.isoformat(), tol) for d, tol in query_dates("What did she do on 8 May, 2023?")] == [("2023-05-08", 3)]
    assert [(d.isoformat(), tol) for d, tol in query_dates("in July 2023")] == [("2023-07-15", 16)]
    assert query_dates("no date here") == []
    docs = [SearchDoc("may", "Visited the museum", created="2023-05-09T13:56:00"),
            SearchDoc("june", "Visited the museum", created="2023-06-20T10:00:00")]
    hits = MemoryIndex(docs).search("museum visit on 8 May 2023")
    assert hits[0].id == "may" and hits[0].explain["date"] > 0


def test_the_words_of_a_named_date_weigh_as_one_word_and_the_date_boost_places_it():
    """A model copying a session's header into its notes ("… on 13 October, 2023") made every such note outrank the
    one the question is about: three rare words matched against one topical word. The date is one thing the query
    names, and the entries written that day are found by the date boost."""
    day = "2023-10-13T10:31:00Z"
    docs = [SearchDoc("paint", "Melanie painted an abstract painting with blue streaks", created=day),
            SearchDoc("mentor", "Caroline contacted her mentor for adoption advice on 13 October, 2023", created=day),
            SearchDoc("tips", "Melanie gave Caroline tips on adoption on 13 October, 2023", created=day),
            SearchDoc("trip", "Caroline and Melanie went on a trip together on 13 October, 2023", created=day),
            SearchDoc("sunset", "Melanie painted a sunset with a pink sky", created="2023-05-08T13:56:00Z"),
            SearchDoc("yoga", "Caroline started yoga classes at the community center", created="2023-06-01T09:00:00Z"),
            SearchDoc("pottery", "Melanie and her kids made bowls at a pottery workshop", created="2023-07-15T13:51:00Z")]
    hits = MemoryIndex(docs).search("What painting did Melanie show to Caroline on October 13, 2023?")
    assert hits[0].id == "paint" and hits[0].explain["date"] == 1.0
    assert hits[1].id in {"mentor", "tips", "trip"}          # written that day, they still come before other days'
    why = hits[0].explain["terms"]
    assert why["painting"]["score"] > 0 and "october" not in why
    spelled = MemoryIndex(docs).search("What painting did Melanie show to Caroline on October 13, 2023?")[1]
    dated = sum(spelled.explain["terms"][w]["score"] for w in ("october", "13", "2023"))
    assert dated < why["painting"]["score"]       # three words of one date weigh less than the topic's one word
    # without a date the query names, the same words are words like any other
    plain = MemoryIndex(docs).search("adoption October")
    assert plain[0].id in {"mentor", "tips"} and plain[0].explain["terms"]["october"]["score"] > 1.0


_LETTERS = "abcdeéßж"


def _edited(word: str, edit: tuple[str, int, str]) -> str:
    kind, i, c = edit
    i = min(i, len(word))
    if kind == "insert":
        return word[:i] + c + word[i:]
    i = min(i, len(word) - 1)
    if kind == "swap" and i + 1 < len(word):
        return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    return word[:i] + (c if kind == "replace" else "") + word[i + 1:]


@settings(max_examples=300, deadline=None)
@given(terms=st.lists(st.text(_LETTERS, min_size=1, max_size=7), max_size=60),
       word=st.text(_LETTERS, min_size=1, max_size=8), limit=st.integers(1, 6),
       edits=st.lists(st.lists(st.tuples(st.sampled_from(["delete", "swap", "replace", "insert"]),
                                         st.integers(0, 8), st.sampled_from(_LETTERS)), min_size=1, max_size=2),
                      max_size=8))
def test_a_words_neighbours_one_edit_away_are_rapidfuzzs_without_loading_it(terms, word, limit, edits):
    """A word of up to seven letters is looked up at one edit by making every string one edit away (only letters
    some term has) and looking each up: the same terms, distances and order as rapidfuzz's OSA search over the
    sorted terms gives — ties in the terms' order, the word itself counted among the ``limit`` and then left out.
    A few letters (one outside Latin-1, one that changes under casefolding) so that terms crowd and tie, and terms
    made from the word by one or two edits of each kind."""
    from rapidfuzz import process
    from rapidfuzz.distance import OSA

    from acpmem.search.typos import typo_neighbours
    for chain in edits:   # terms one and two edits from the word, besides the random ones
        variant = word
        for edit in chain:
            variant = _edited(variant, edit)
        terms.append(variant)
    terms = sorted({t for t in terms if t})
    want = [(t, int(d)) for t, d, _ in process.extract(word, terms, scorer=OSA.distance, score_cutoff=1,
                                                          limit=limit) if t != word]
    assert typo_neighbours(word, terms, 1, limit) == want
    assert typo_neighbours(word, list(terms), 1, limit) == want   # another list of the same terms: its own set


def test_a_prompts_short_unknown_word_does_not_load_rapidfuzz_and_a_long_one_does():
    """rapidfuzz costs ~10 ms to import; a word of up to seven letters that the index lacks no longer loads it (one
    edit away is found by lookups), a longer one (two edits) still does. Run in a fresh interpreter."""
    import subprocess
    import sys
    code = ("import sys\nfrom acpmem.search.reference import Vocabulary\nfrom acpmem.search.ranking import plan_query\n"
            "vocab = Vocabulary(['token', 'tokenizer', 'deployment', 'gateway'])\n"
            "groups = plan_query(sys.argv[1], vocab)\n"
            "print(sorted(t.term for g in groups for t in g.terms if t.via == 'typo'), 'rapidfuzz' in sys.modules)")
    run = lambda q: subprocess.run([sys.executable, "-c", code, q], capture_output=True, text=True,  # noqa: E731
                                   timeout=60, check=True).stdout.split()
    assert run("tokan gatewya") == ["['gateway',", "'token']", "False"]
    assert run("deploymnet") == ["['deployment']", "True"]


def test_vocabulary_works_without_documents():
    vocab = Vocabulary(["token", "tokenizer", "postgresql", "auth", "缓存"])
    assert vocab.with_prefix("token") == ["token", "tokenizer"]
    assert vocab.typo_neighbours("tokan", 1) == [("token", 1)]
    assert vocab.has_cjk and vocab.has_latin
    groups = plan_query("postgres tokan", vocab)
    assert [(g.word, sorted(t.term for t in g.terms)) for g in groups] == [
        ("postgres", ["postgresql"]), ("tokan", ["token"])]


class DictPostings:
    """A second PostingSource built only from postings, df, lengths and stats, as a persistent index holds them."""

    def __init__(self, postings, lens, stats, docs, neighbours):
        self._postings, self._lens, self.stats, self._docs, self._nb = postings, lens, stats, docs, neighbours
        self.vocabulary = Vocabulary(postings)

    def df(self, term):
        return len(self._postings.get(term, ()))

    def postings(self, term):
        return self._postings.get(term, ())

    def doc_len(self, key):
        return self._lens[key]

    def doc(self, key):
        return self._docs[key]

    def neighbours(self, key, radius):
        return self._nb[key]


def test_rank_runs_from_postings_alone(kernel_index):
    n = len(kernel_index)
    src = DictPostings({t: list(kernel_index.postings(t)) for t in kernel_index._postings},
                       [kernel_index.doc_len(k) for k in range(n)], CorpusStats(*kernel_index.stats.__dict__.values()),
                       [kernel_index.doc(k) for k in range(n)], [list(kernel_index.neighbours(k, 2)) for k in range(n)])
    for q in ("auth token", "缓存", "upload", "tokan", "circuit breaker"):
        assert rank(src, q, limit=5) == kernel_index.search(q, limit=5)


def test_empty_and_stopword_queries():
    index = MemoryIndex([SearchDoc("a", "Something", "about the thing")])
    assert index.search("") == []
    assert index.search("the of and") == []
    assert MemoryIndex([]).search("anything") == []


def test_preview_is_a_window_around_the_match():
    body = "x " * 300 + "the circuit breaker opens after five failures" + " y" * 300
    hit = MemoryIndex([SearchDoc("a", "Resilience notes", body)]).search("circuit breaker", preview_length=80)[0]
    assert "circuit breaker" in hit.preview and hit.preview.startswith("…") and hit.preview.endswith("…")
    assert len(hit.preview) <= 82


def test_dictionary_loads_both_directions():
    assert "缓存" in cedict.en_to_zh("cache")
    assert "upload" in cedict.zh_to_en("上传")
    assert cedict.en_to_zh("no-such-word") == ()


def test_entries_citing_an_already_covered_moment_step_back():
    docs = [SearchDoc("x1", "Caroline adopted a dog", citations=(("1", 1),)),
            SearchDoc("x2", "Caroline adopted a dog", citations=(("1", 1),)),
            SearchDoc("y", "Caroline adopted a dog last spring", citations=(("1", 9),))]
    hits = MemoryIndex(docs).search("Caroline adopted dog", limit=3, spread=False)
    assert hits[2].score > hits[1].score  # y ranks second despite a lower score: x2 repeats x1's moment
    assert [h.id for h in hits] == ["x1", "y", "x2"]


def _step_back_by_weighing_all(final: dict[int, float], cites: dict[int, frozenset], limit: int) -> list[int]:
    """The choice ``_diversify`` makes, as its rule says it: each time, every candidate weighed again (its score, or
    its score × DUPLICATE once the chosen entries cover its citations), the best taken, the first on a tie."""
    pending = sorted(final, key=lambda k: (-final[k], k))[: limit * 4]
    chosen, covered = [], set()
    while pending and len(chosen) < limit:
        best = max(pending, key=lambda k: final[k] * (DUPLICATE if cites[k] and cites[k] <= covered else 1.0))
        pending.remove(best)
        chosen.append(best)
        covered |= cites[best]
    return chosen


_SCORES = st.one_of(st.sampled_from([0.0, -0.0, 1.0, 0.6, 0.36, 2.5, 1.5, -1.0, 1e300, math.inf, -math.inf]),
                    st.floats(allow_nan=False, width=32), st.floats(allow_nan=False))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(_SCORES, st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 5)), max_size=3)),
                max_size=40), st.integers(0, 25))
def test_stepping_back_covered_moments_chooses_what_weighing_every_candidate_each_time_chooses(docs, limit):
    """The near-duplicate step-back picks, in the same order, what weighing every candidate again for each choice
    picks (ties, negative and infinite scores, entries without citations, shared and nested citation sets)."""
    index = MemoryIndex([SearchDoc(f"d{i}", "x", citations=tuple(c)) for i, (_, c) in enumerate(docs)])
    final = {i: s for i, (s, _) in enumerate(docs)}
    cites = {i: frozenset(c) for i, (_, c) in enumerate(docs)}
    assert _diversify(index, final, limit) == _step_back_by_weighing_all(final, cites, limit)


_NONNEGATIVE = st.one_of(st.sampled_from([0.0, -0.0, 1.0, 0.6, 0.36, 2.5, 1.5, 1e300, math.inf]),
                         st.floats(min_value=0.0, allow_nan=False, width=32), st.integers(0, 3).map(float))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(_NONNEGATIVE, st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 4)),
                                                 max_size=3)), max_size=60), st.integers(0, 30))
def test_stepping_back_reads_the_citations_it_needs_and_chooses_the_same(docs, limit):
    """With no negative score (as every ranking gives), the step-back reads the citations of the entries up to
    the first one it can take only, and picks what weighing every candidate again for each choice picks (ties,
    zero and infinite scores, the same moments cited again and again)."""
    read: list[int] = []

    class Counting(MemoryIndex):
        def citations(self, key):
            read.append(key)
            return self.doc(key).citations

    index = Counting([SearchDoc(f"d{i}", "x", citations=tuple(c)) for i, (_, c) in enumerate(docs)])
    final = {i: s for i, (s, _) in enumerate(docs)}
    cites = {i: frozenset(c) for i, (_, c) in enumerate(docs)}
    chosen = _diversify(index, final, limit)
    assert chosen == _step_back_by_weighing_all(final, cites, limit)
    ranked = sorted(final, key=lambda k: (-final[k], k))
    # each read once, in rank order from the top: the entries down to the first one it could take
    assert [ranked.index(k) for k in read] == list(range(len(read)))


def test_stepping_back_reads_no_citation_below_the_entries_it_takes():
    """Forty candidates citing moments of their own, ten asked for: the ten best are taken, and only their
    citations are read (a long session's later prompt asks for a hundred of four hundred)."""
    read: list[int] = []

    class Counting(MemoryIndex):
        def citations(self, key):
            read.append(key)
            return self.doc(key).citations

    index = Counting([SearchDoc(f"d{i}", "x", citations=(("s", i),)) for i in range(40)])
    final = {i: 100.0 - i for i in range(40)}
    assert _diversify(index, final, 10) == list(range(10))
    assert sorted(read) == list(range(10))
