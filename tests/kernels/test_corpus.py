import torch
import yaml
from transformers import PreTrainedTokenizerFast

from kernels.checkpoint import load_tokenizer
from kernels.config import LoopConfig
from kernels.offline import corpus
from kernels.offline.bpe import EOS, train_bpe

TEXTS = [
    'def add(a, b):\n    """Return a + b."""\n    return a + b\n',
    "class Stack:\n    def push(self, item):\n        self.items.append(item)\n",
    "The looped transformer applies the same layers again and again.\n",
] * 20


def fake_stdlib(root):
    (root / "pkg" / "tests").mkdir(parents=True)
    (root / "encodings").mkdir()
    (root / "pydoc_data").mkdir()
    (root / "zeta.py").write_text("Z = 1\n")
    (root / "alpha.py").write_text("A = 1\n")
    (root / "pkg" / "mod.py").write_text("M = 1\n")
    (root / "pkg" / "tests" / "test_mod.py").write_text("T = 1\n")
    (root / "encodings" / "cp1252.py").write_text("table = ()\n")
    (root / "pydoc_data" / "topics.py").write_text("topics = {'b': 'B topic', 'a': 'A topic'}\n")
    return root


def test_documents_are_sorted_and_skip_tests_and_codec_tables(tmp_path):
    # when
    docs = corpus.documents(fake_stdlib(tmp_path), works=None)

    # then
    assert [d.name for d in docs] == [
        "pydoc/a",
        "pydoc/b",
        "stdlib/alpha.py",
        "stdlib/pkg/mod.py",
        "stdlib/zeta.py",
    ]
    assert docs[0].text == "A topic"


def test_atlas_summaries_are_documents():
    docs = corpus.documents(corpus.stdlib_dir())
    atlas = [d for d in docs if d.name.startswith("atlas/")]

    works = yaml.safe_load(corpus.ATLAS_WORKS.read_text(encoding="utf-8"))["works"]
    assert len(atlas) == len(works) > 0
    assert all(d.text.count("\n\n") >= 1 for d in atlas)


def test_heldout_split_is_by_document_seeded_and_stable():
    docs = [corpus.Document(f"stdlib/m{i}.py", f"x = {i}\n") for i in range(400)]

    train, heldout = corpus.split(docs, seed=0, heldout_fraction=0.1)
    again = corpus.split(list(reversed(docs)), seed=0, heldout_fraction=0.1)[1]
    other_seed = corpus.split(docs, seed=1, heldout_fraction=0.1)[1]

    assert {d.name for d in train}.isdisjoint(d.name for d in heldout)
    assert len(train) + len(heldout) == 400 and 20 < len(heldout) < 60
    assert {d.name for d in again} == {d.name for d in heldout}  # order does not matter
    assert {d.name for d in other_seed} != {d.name for d in heldout}


def test_atlas_text_is_never_held_out():
    # the atlas is edited as it is corrected; held-out text must stay fixed
    docs = [corpus.Document(f"atlas/w{i}", "A work.\n") for i in range(200)]

    train, heldout = corpus.split(docs, seed=0, heldout_fraction=0.5)

    assert heldout == [] and len(train) == 200


def test_digest_changes_with_any_text():
    docs = [corpus.Document("a", "x"), corpus.Document("b", "y")]

    assert corpus.digest(docs) == corpus.digest(list(docs))
    assert corpus.digest(docs) != corpus.digest([docs[0], corpus.Document("b", "z")])


def test_windows_spread_evenly_and_do_not_overlap():
    ids = torch.arange(100)

    w = corpus.windows(ids, 10, 4)

    assert w.shape == (4, 10)
    assert w[:, 0].tolist() == [0, 30, 60, 90]


def test_bpe_round_trips_and_loads_through_transformers(tmp_path):
    # given
    tokenizer = train_bpe(TEXTS, vocab_size=300)
    tokenizer.save_pretrained(str(tmp_path))

    # when
    loaded = load_tokenizer(tmp_path, LoopConfig(vocab_size=len(tokenizer)))

    # then
    text = "def push(self, item):\n    return a + b  # ünïcode\n"
    assert loaded.decode(loaded.encode(text)) == text
    assert isinstance(loaded, PreTrainedTokenizerFast)
    assert loaded.eos_token_id == 0 and loaded.convert_ids_to_tokens(0) == EOS
    assert len(loaded.encode("    def add(a, b):")) < len("    def add(a, b):")  # merges learnt


def test_encode_ends_every_document_with_eos():
    tokenizer = train_bpe(TEXTS, vocab_size=300)
    docs = [corpus.Document("a", "x = 1\n"), corpus.Document("b", "y = 2\n")]

    ids = corpus.encode(tokenizer, docs, tokenizer.eos_token_id).tolist()

    assert ids.count(0) == 2 and ids[-1] == 0
    assert tokenizer.decode(ids, skip_special_tokens=True) == "x = 1\ny = 2\n"
