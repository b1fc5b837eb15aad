"""Text synthesis hits token budgets: exactly for the emulator's words, closely for a real tokenizer."""

from __future__ import annotations

import random
from array import array
from pathlib import Path

import pytest

from swarm.errors import InputError
from swarm.workload.agent_profile import AgentProfile, SystemPromptSpec
from swarm.workload.catalog import Catalog
from swarm.workload.textsynth import WORDS, synth_text, tool_catalogue
from swarm.workload.tokenizer import HFTokenizer, WordTokenizer
from swarm.workload.workload import MixEntry, Workload, WorkloadSpec


@pytest.mark.parametrize("n", [1, 2, 7, 100, 1234])
def test_word_budgets_are_exact(n: int) -> None:
    rng = random.Random(n)
    assert len(str(synth_text(rng, n, lead="[x.1]")).split()) == n
    assert len(tool_catalogue(rng, max(n, 30), 5).split()) == max(n, 30)


def test_long_texts_are_cut_from_the_corpus_seeded_and_apart() -> None:
    """A text past ``CORPUS_FROM_WORDS`` is a run of the seeded corpus: the same seed gives the
    same text, another seed another; one longer than the corpus is exact too; siblings' texts
    of one length start at different words."""
    from swarm.workload.textsynth import CORPUS_FROM_WORDS, CORPUS_WORDS

    n = CORPUS_FROM_WORDS * 4
    assert synth_text(random.Random(3), n) == synth_text(random.Random(3), n)
    assert synth_text(random.Random(3), n) != synth_text(random.Random(4), n)
    assert len(str(synth_text(random.Random(5), CORPUS_WORDS + 17, lead="[x]")).split()) == CORPUS_WORDS + 17
    rng = random.Random(6)
    firsts = [str(synth_text(rng, n)).split()[:8] for _ in range(50)]
    assert len({tuple(f) for f in firsts}) == 50
    assert set(str(synth_text(rng, n)).split()) <= set(WORDS)


@pytest.mark.parametrize(
    "text", ["", "a", "a b c", " a", "a ", "a  b", "a\nb", "a\tb", "a\x1cb", "a\xa0b", "a\u3000b", "a\u2028 b", "é b"]
)
def test_the_word_count_is_the_words_split(text: str) -> None:
    assert WordTokenizer().count(text) == len(text.split()) == len(WordTokenizer().encode(text))


def test_lead_starts_the_text() -> None:
    assert str(synth_text(random.Random(0), 10, lead="[n7] go")).startswith("[n7] go ")


@pytest.fixture(scope="module")
def bpe_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"])
    rng = random.Random(1)
    corpus = [" ".join(rng.choices(WORDS, k=50)) for _ in range(200)]
    tok.train_from_iterator(corpus, trainer)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path


@pytest.mark.parametrize("n", [20, 300, 2000])
def test_real_tokenizer_budgets_are_close(bpe_file: Path, n: int) -> None:
    tok = HFTokenizer(bpe_file)
    text = synth_text(random.Random(n), n, tok)
    count = len(tok.encode(text))
    longest_word = max(len(tok.encode(w)) for w in WORDS)
    assert n <= count < n + longest_word
    cat = tool_catalogue(random.Random(n), n + 40, 4, tok)
    assert n + 40 <= len(tok.encode(cat)) < n + 40 + longest_word


def test_workload_counts_with_the_given_tokenizer(bpe_file: Path, tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text("name: p\nsystem_prompt: {tokens: 500}\n")
    spec = WorkloadSpec(agents=2, mix=[MixEntry(profile="p", topology="chain")], tokenizer=str(bpe_file))
    wl = Workload(spec, Catalog(agent_dirs=[tmp_path]))
    assert wl.tokenizer.name == "hf:tokenizer.json"
    sys_tokens = len(wl.tokenizer.encode(wl.agent(0).system_prompt))
    assert 500 <= sys_tokens < 520


def test_missing_tokenizer_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="tokenizer file not found"):
        HFTokenizer(tmp_path / "nope.json")


def test_system_prompt_from_a_file_stays_inside_the_profile_folder(tmp_path: Path) -> None:
    (tmp_path / "prompt.txt").write_text("you are a careful agent")
    (tmp_path / "f.yaml").write_text("name: f\nsystem_prompt: {file: prompt.txt}\n")
    wl = Workload(
        WorkloadSpec(agents=1, mix=[MixEntry(profile="f", topology="chain")]), Catalog(agent_dirs=[tmp_path])
    )
    assert wl.agent(0).system_prompt.endswith("you are a careful agent")
    escaping = AgentProfile(
        name="e", system_prompt=SystemPromptSpec(file="../../etc/passwd"), base_dir=str(tmp_path)
    )
    with pytest.raises(InputError, match="leaves the spec's folder"):
        escaping.system_prompt_file()
    assert isinstance(Workload(WorkloadSpec(agents=1)).tokenizer, WordTokenizer)


def test_encoding_in_steps_gives_the_ids_of_encoding_whole() -> None:
    """A long history part is tokenized a slice at a time, cut at spaces: the same token ids,
    which are the words' ids."""
    import random as _random

    from swarm.workload.tokenizer import WordTokenizer as _Words
    from swarm.workload.tokenizer import word_ids

    tok, rng = _Words(), _random.Random(7)
    for _ in range(200):
        text = "".join(rng.choice(["ab", "c", " ", "  ", "\n", "\t", "x y", "é"]) for _ in range(rng.randrange(400)))
        for chars in (1, 3, 7, 50, 1000):
            pieces = list(tok.ids_in_steps(text, chars))
            assert [w for piece in pieces for w in piece] == list(tok.ids(text))
            assert list(tok.ids(text)) == list(word_ids(tok.encode(text)))
    long_text = " ".join(["word"] * 40_000)
    assert len(list(tok.ids_in_steps(long_text, 65_536))) >= 3  # several steps, not one


def test_a_words_id_is_its_hash_in_every_process_and_words_differ() -> None:
    """Ids are the same in a fresh process (a cluster's workers hash blocks alike), unequal for
    unequal words, and an array the collector need not walk."""
    import gc
    import subprocess
    import sys

    from swarm.workload.tokenizer import word_ids

    words = ["alpha", "beta", "é", "", "alpha", "x\udcff"]
    here = list(word_ids(words))
    code = f"from swarm.workload.tokenizer import word_ids; print(list(word_ids({words!r})))"
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert here == eval(there)
    assert here[0] == here[4] and len(set(here)) == 5
    assert all(0 <= i < 1 << 63 for i in here)
    big = word_ids(["w"] * 100_000)
    assert all(isinstance(r, type) for r in gc.get_referents(big))  # no element is walked


@pytest.mark.parametrize("n_tokens", [3, 200, 258, 259, 4_099, (1 << 18) + 5_000])
def test_a_synthesised_text_gives_the_ids_and_count_of_its_words(n_tokens: int) -> None:
    """A long synthesised text (``WORD_TEXT_FROM_WORDS`` words from the corpus or more) knows its words' ids
    (slices of the corpus's, the lead's before them): the tokenizer's ids, pieces and count are those of its words, whole or in steps, and
    it pickles as a plain string (a worker gets text, not the corpus's ids)."""
    import pickle
    import random as _random

    from swarm.texts import WordText
    from swarm.workload.textsynth import WORD_TEXT_FROM_WORDS, synth_text
    from swarm.workload.tokenizer import word_ids

    assert WORD_TEXT_FROM_WORDS == 256  # the cases below sit either side of it
    tok = WordTokenizer()
    text = synth_text(_random.Random(n_tokens), n_tokens, tok, lead="[n3] lead :")
    assert isinstance(text, WordText) == (n_tokens >= 259)  # 3 lead words, then 256 or more from the corpus
    expected = word_ids(str(text).split())
    assert tok.ids(text) == expected and tok.count(text) == len(expected) == n_tokens
    assert b"".join(piece.tobytes() for piece in tok.ids_in_steps(text)) == expected.tobytes()
    if isinstance(text, WordText):  # its ids appended onto a prompt's, as a prompt is composed
        onto = word_ids(["before"])
        text.extend_ids(onto)
        assert onto == word_ids(["before", *str(text).split()])
    back = pickle.loads(pickle.dumps(text))
    assert type(back) is str and back == str(text)


@pytest.mark.parametrize("lead", ["", "[n3] lead :"])
def test_a_word_text_is_the_text_of_its_words_without_holding_their_characters(lead: str) -> None:
    """A long synthesised text (``WordText``) is, made into characters, the words its runs of
    the corpus name, after its lead; its length, word count and ids are those of that text
    without making it; its words from any cut (an output less its reasoning) are those of the
    text's; it equals a text of the same words and nothing else; its object holds no copy of
    the characters (a plain string of 5,000 words is tens of kilobytes)."""
    import gc
    import pickle

    from swarm.texts import WordText, as_str
    from swarm.workload.prompts import visible_part
    from swarm.workload.textsynth import CORPUS_WORDS, corpus_words
    from swarm.workload.tokenizer import word_ids

    for n in (300, 5_000, CORPUS_WORDS + 300):  # the last in two runs of the corpus
        head_words = len(lead.split())
        text = synth_text(random.Random(n), n, lead=lead)
        assert isinstance(text, WordText)
        assert repr(text).startswith(f"WordText({n} words")  # shown without making them
        held = [r for r in gc.get_referents(text) if isinstance(r, str)]
        assert held and max(map(len, held)) <= len(lead)  # its head, not its characters
        joined, _ = corpus_words(random.Random(n), n - head_words)  # the same draws, as characters
        plain = f"{lead} {joined}" if lead else joined
        assert as_str(text) == str(text) == plain and f"{text}" == plain
        assert str(text) is str(text)  # made once, then kept (a body over HTTP needs them again)
        assert len(text) == len(plain) and text.words == len(plain.split(" ")) == n
        assert text.token_ids() == word_ids(plain.split())
        for share in (0.0, 0.001, 0.25, 0.5, 0.9999, 1.0):
            assert as_str(visible_part(text, share)) == visible_part(plain, share)
        with pytest.raises(ValueError):
            text.words_from(-1)
        for cut in (1, head_words, head_words + 1, n - 1, n):
            rest = text.words_from(cut)
            assert as_str(rest) == " ".join(plain.split(" ")[cut:])
            if isinstance(rest, WordText):
                assert rest.token_ids() == word_ids(plain.split(" ")[cut:])
        assert text == synth_text(random.Random(n), n, lead=lead) and hash(text) == hash(synth_text(random.Random(n), n, lead=lead))
        assert text != synth_text(random.Random(n + 1), n, lead=lead) and text != plain
        assert {text: 1}.get(synth_text(random.Random(n), n, lead=lead)) == 1
        assert pickle.loads(pickle.dumps(text)) == plain


def test_a_one_run_word_text_is_one_int_and_equals_the_same_run_however_given() -> None:
    """A text of one run of the corpus (nearly every synthesised text) holds it as one int,
    not a tuple of two (a simulated swarm holds a million texts), and is equal, with an equal
    hash, to the same run given as a tuple, a list or an iterator; two runs stay two."""
    import sys

    from swarm.texts import WordText
    from swarm.workload.textsynth import word_corpus

    corpus = word_corpus()
    made = [WordText("", array("q"), runs, corpus) for runs in (((5, 700),), [(5, 700)], iter([(5, 700)]))]
    assert made[0] == made[1] == made[2] and len({hash(t) for t in made}) == 1
    assert all(type(t._runs) is int for t in made)
    assert sys.getsizeof(made[0]._runs) < sys.getsizeof((5, 700))
    assert str(made[0]) == str(WordText("", array("q"), ((5, 300), (305, 400)), corpus))
    assert made[0] != WordText("", array("q"), ((5, 300), (305, 400)), corpus)  # not the same runs
    assert made[0].words == 700 and len(made[0]) == len(str(made[0]))


def test_a_simulated_workload_holds_the_same_texts_by_their_place_in_the_corpus() -> None:
    """On a virtual clock (``SIMULATED_WORD_TEXT_FROM_WORDS``) a text cut from the corpus is a
    ``WordText`` from 64 words, not from 256: the same characters and ids as over HTTP, the
    same draws after it, so a simulated agent sends what a real-time one sends; a shorter text
    is the same plain string either way."""
    from swarm.texts import WordText
    from swarm.workload.textsynth import SIMULATED_WORD_TEXT_FROM_WORDS, WORD_TEXT_FROM_WORDS

    assert SIMULATED_WORD_TEXT_FROM_WORDS == 64 < WORD_TEXT_FROM_WORDS
    for n in (63, 64, 100, 255, 256, 900):
        for lead in ("", "[n1] lead :"):
            real_rng, sim_rng = random.Random(n), random.Random(n)
            real = synth_text(real_rng, n, lead=lead)
            sim = synth_text(sim_rng, n, lead=lead, word_text_from=SIMULATED_WORD_TEXT_FROM_WORDS)
            assert str(sim) == str(real)
            assert isinstance(sim, WordText) == (n - len(lead.split()) >= 64)
            assert isinstance(real, WordText) == (n - len(lead.split()) >= 256)
            assert WordTokenizer().ids(sim) == WordTokenizer().ids(real)
            assert real_rng.random() == sim_rng.random()
    spec = WorkloadSpec(agents=6, mix=[MixEntry(profile="tree_of_thought"), MixEntry(profile="claude_code")])
    real_w = Workload(spec)
    sim_w = Workload(spec, word_text_from=SIMULATED_WORD_TEXT_FROM_WORDS)
    kinds = set()
    for i in range(6):
        real_a, sim_a = real_w.agent(i), sim_w.agent(i)
        assert (str(sim_a.task), str(sim_a.system_prompt)) == (str(real_a.task), str(real_a.system_prompt))
        for node in real_a.topology.order[:12]:
            r, s = real_a.node(node), sim_a.node(node)
            pairs = ((r.instruction, s.instruction), (r.standin, s.standin), (r.tool_result, s.tool_result))
            for a, b in pairs:
                assert str(a) == str(b)
                kinds.add((type(a).__name__, type(b).__name__))
    assert ("str", "WordText") in kinds  # some text of 64-255 words, held apart on the virtual clock
    import pickle

    from swarm.runtime.agent_source import AgentSource

    back = pickle.loads(pickle.dumps(AgentSource(sim_w)))  # as a worker would get it
    assert back.workload.word_text_from == SIMULATED_WORD_TEXT_FROM_WORDS
