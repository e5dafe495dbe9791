"""English word lists the search engine uses: stop words, irregular-verb lemmas, words that frame a question, and
a general alias list. (The English↔Chinese dictionary is ``acpmem.search.cedict``.)

Pure data; no scoring here (that is ``acpmem.search.ranking``). The lists are general vocabulary for notes written
by and about software work and everyday life — never tuned to one benchmark query.
"""
from __future__ import annotations

import functools
from collections.abc import Callable

# Function words that carry no topic. Applied to documents and queries alike.
STOP_WORDS = frozenset("""
a an the and or but if then else of at by for with about against between into through during before after
above below to from up down in out on off over under again further once here there when where why how all
any both each few more most other some such no nor not only own same so than too very can will just should
now is are was were be been being have has had having do does did doing i me my myself we our ours ourselves
you your yours yourself yourselves he him his himself she her hers herself it its itself they them their
theirs themselves what which who whom this that these those am would could ought shall might must also
let s t d ll m re ve don didn doesn isn aren wasn weren hasn haven hadn wouldn couldn shouldn
""".split())

# Words that frame a question rather than name its topic; a query weighs them down (documents keep them).
QUERY_FILLER = frozenset("""
kind kinds type types sort sorts way ways thing things something anything mention mentions mentioned
happen happens happened specific specifically particular example examples describe described name named
""".split())

# Irregular forms → lemma, so "went"/"gone" meet "go" and "bought" meets "buy" after stemming.
_IRREGULAR = """
arise arose arisen|awake awoke awoken|be was were been|bear bore borne born|beat beaten|become became|
begin began begun|bend bent|bet|bite bitten|bleed bled|blow blew blown|break broke broken|breed bred|
bring brought|build built|burn burnt|buy bought|catch caught|choose chose chosen|come came|cost|
creep crept|cut|deal dealt|dig dug|do did done|draw drew drawn|dream dreamt|drink drank drunk|
drive drove driven|eat ate eaten|fall fell fallen|feed fed|feel felt|fight fought|find found|flee fled|
fly flew flown|forbid forbade forbidden|forget forgot forgotten|forgive forgave forgiven|freeze froze frozen|
get got gotten|give gave given|go went gone|grow grew grown|hang hung|have had has|hear heard|
hide hid hidden|hit|hold held|hurt|keep kept|kneel knelt|know knew known|lay laid|lead led|lean leant|
leap leapt|learn learnt|leave|lend lent|let|lie lain|lose lost|make made|mean meant|
meet met|pay paid|put|quit|read|ride rode ridden|ring rang rung|rise risen|run ran|say said|see saw seen|
seek sought|sell sold|send sent|set|shake shook shaken|shine shone|shoot shot|show shown|shrink shrank shrunk|
shut|sing sang sung|sink sank sunk|sit sat|sleep slept|slide slid|speak spoke spoken|speed sped|spend spent|
spin spun|split|spread|spring sprang sprung|stand stood|steal stole stolen|stick stuck|sting stung|
stink stank stunk|strike struck stricken|strive strove striven|swear swore sworn|sweep swept|swim swam swum|
swing swung|take took taken|teach taught|tear tore torn|tell told|think thought|throw threw thrown|
understand understood|wake woke woken|wear wore worn|weave wove woven|weep wept|win won|
withdraw withdrew withdrawn|write wrote written|child children|man men|woman women|person people|
mouse mice|foot feet|tooth teeth|goose geese|good better best|bad worse worst|
"""
IRREGULAR: dict[str, str] = {}
for _group in _IRREGULAR.replace("\n", "").split("|"):
    _words = _group.split()
    for _w in _words[1:]:
        IRREGULAR.setdefault(_w, _words[0])

# General alias groups: words people use interchangeably for the same thing. Each group is symmetric.
_ALIASES = """
login logon signin sign-in log-in signon sso|logout logoff signout|signup register registration enroll|
credential password passwd passphrase secret token apikey api-key|auth authentication authenticate authn|
authorization authorize authz permission privilege access-control acl rbac|user account member|
admin administrator superuser root|database db datastore|postgres postgresql psql pg|mysql mariadb|
mongo mongodb|sqlite sqlite3|redis keyvalue|cache caching memoize memoization|config configuration settings
preferences options setup|repo repository|env environment|dir directory folder|doc docs documentation manual|
spec specification|dependency dependencies deps package library lib|deploy deployment release rollout ship|
publish release|ci pipeline build|test testing tests unittest|bug defect issue error fault|
fix patch hotfix bugfix|crash panic segfault abort|exception error failure|log logging logs journal|
monitor monitoring observability telemetry metrics|perf performance speed latency throughput|
profile profiling profiler benchmark|optimize optimise optimization speedup|memory ram heap|leak leaks leaking|
cpu processor|gpu graphics accelerator|disk storage drive|upload uploading|download downloading fetch|
file files attachment|image picture photo img pic|video clip movie film|email mail e-mail|
message msg chat dm|notification alert notify|schedule scheduling cron timer|
queue mq broker|api endpoint interface|rest restful http|websocket ws socket realtime|
graphql gql|frontend front-end ui client|backend back-end server service|microservice service|
container docker podman|kubernetes k8s kube|vm virtual-machine|cloud aws gcp azure|
i18n internationalization internationalisation localization localisation l10n translation|
js javascript|ts typescript|py python|golang go|rs rust|cpp c++|md markdown|yaml yml|
regex regexp regular-expression|async asynchronous concurrent|sync synchronous|thread threads threading|
encrypt encryption cipher|decrypt decryption|hash hashing digest checksum|sign signature signing|
security secure infosec|vuln vulnerability exploit cve|firewall waf|csp content-security-policy|
header headers|cookie cookies|session sessions|payment pay billing charge checkout invoice|
price pricing cost|subscription plan|customer client buyer|shop store|order purchase|
migrate migration migrations schema-change|schema model|refactor refactoring restructure cleanup|
delete remove erase drop|create add make new|update modify change edit|rename move|merge combine join|
conflict conflicts clash|branch fork|commit checkin|rollback revert undo|backup snapshot|restore recover|
compress compression zip gzip|decompress decompression unzip expand|search find lookup query retrieval|
rank ranking score scoring|recommend recommendation suggest suggestion|limit limiting throttle quota cap|
retry retries backoff|timeout timeouts deadline|circuit-breaker breaker|fallback degrade|
chart graph plot visualization visualisation diagram|dashboard panel|table grid|layout style css|
phone mobile cellphone smartphone|laptop computer pc notebook|car auto automobile vehicle|
kid child kids children|grandma grandmother granny nana|grandpa grandfather granddad|sister sis|brother bro|
boyfriend partner|girlfriend partner|mom mother mum mama|dad father papa|parent parents|
wife spouse|friend buddy pal|doctor physician|job career occupation profession|
school college university|teacher instructor tutor|student pupil learner|trip travel journey vacation holiday|
house home apartment flat|dog puppy pup|cat kitten kitty|painting paint artwork art|music song songs|
hobby hobbies pastime|sport sports exercise workout fitness|run running jog jogging|hike hiking trek|
cook cooking bake baking|food meal dish|book novel|buy purchase|
happy glad joyful|gift present|
sad unhappy upset|angry mad furious|sick ill unwell|
"""
ALIAS_GROUPS: tuple[tuple[str, ...], ...] = tuple(
    tuple(g.split()) for g in _ALIASES.replace("\n", " ").split("|") if g.split())


# Inflections taken off a word before it is looked up as an English word (``known_word``): (suffix, replacement).
_INFLECTIONS = (("ies", "y"), ("ied", "y"), ("es", ""), ("s", ""), ("ed", ""), ("ed", "e"), ("d", ""), ("ing", ""),
                ("ing", "e"), ("ly", ""), ("er", ""), ("est", ""), ("ness", ""), ("ment", ""), ("ful", ""), ("al", ""))


@functools.lru_cache(maxsize=1)
def _listed() -> frozenset[str]:
    return frozenset(STOP_WORDS | QUERY_FILLER | set(IRREGULAR) | set(IRREGULAR.values())
                     | {w for g in ALIAS_GROUPS for w in g})


def prepare() -> None:
    """Build the word list this module builds on first use (``acpmem.search.analysis.prepare``)."""
    _listed()


_PREFIXES = ("re", "un", "pre", "non", "over", "under", "out")


def word_forms(word: str) -> set[str]:
    """``word`` and what it may be inflected or derived from: a suffix off (with the ``y``/``e`` it replaced, and
    one of a doubled final consonant), keeping three letters at least; a prefix off, keeping four."""
    stems = {word} | {word[len(p):] for p in _PREFIXES if word.startswith(p) and len(word) - len(p) >= 4}
    out = set(stems)
    for stem in stems:
        for suffix, rep in _INFLECTIONS:
            if stem.endswith(suffix) and len(stem) - len(suffix) >= 3:
                base = stem[:-len(suffix)] + rep
                out.add(base)
                if base[-1] == base[-2]:
                    out.add(base[:-1])
    return out


def known_word(word: str, en_to_zh: Callable[[str], object]) -> bool:
    """Whether ``word`` (lower case) is an English word: in the lists here or a headword of the English↔Chinese
    dictionary (``en_to_zh``), as written or inflected. What tells a misspelling from a word the vault never used."""
    listed = _listed()
    return any(f in listed or en_to_zh(f) for f in word_forms(word))
