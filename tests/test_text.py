import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from skype.errors import InputError
from skype.text import STOPWORDS, Vocabulary, normalize, normalize_rows, tokenize


def test_tokenize_lowercases_splits_unicode_and_drops_stopwords():
    assert tokenize("The CAFÉ at Zürich's Bahnhof-Straße") == ["café", "zürich", "bahnhof", "strasse"]  # casefolded: ß is ss
    assert tokenize("東京 Tokyo") == ["東京", "tokyo"]
    assert tokenize("snake_case and 42") == ["snake", "case", "42"]
    assert tokenize("the and of") == []
    assert "the" in STOPWORDS and "coffee" not in STOPWORDS


def test_vocabulary_orders_by_document_frequency_rarest_first():
    docs = [["b", "a"], ["a", "c"], ["a", "b"], ["d"]]
    vocab = Vocabulary.build(docs)
    # df: a=3, b=2, c=1, d=1 -> c, d (tie broken by string), b, a
    assert [vocab.term(i) for i in range(len(vocab))] == ["c", "d", "b", "a"]
    assert vocab.num_known == 4 and vocab.num_docs == 4


def test_unseen_terms_go_after_known_terms_in_order_of_first_appearance():
    vocab = Vocabulary.build([["a"], ["a", "b"]])
    assert vocab.id("zzz") == 2 and vocab.id("aaa") == 3 and vocab.id("zzz") == 2
    idf = vocab.idf(np.array([0, 1, 2]))
    assert idf[2] == idf.max()  # unseen: df = 0, the largest idf


def test_tfidf_weights_are_unit_length_and_sorted_by_id():
    vocab = Vocabulary.build([["x", "y"], ["y"], ["y", "z"]])
    ids, w = vocab.vectorize_tokens(["y", "x", "x"])
    assert list(ids) == sorted(ids)
    assert abs(float(w @ w) - 1.0) < 1e-12
    # x appears twice and is rarer: it must outweigh y
    assert w[list(ids).index(vocab.get("x"))] > w[list(ids).index(vocab.get("y"))]


def test_explicit_terms_bypass_tfidf_and_are_normalised():
    vocab = Vocabulary.build([["a"], ["b"], ["a"]])
    ids, w = vocab.vectorize_terms({"a": 3.0, "b": 4.0})
    assert dict(zip((vocab.term(i) for i in ids), w)) == pytest.approx({"a": 0.6, "b": 0.8})


@pytest.mark.parametrize("terms, code", [
    ({"a": 0.0}, "E006"), ({"a": -1.0}, "E006"), ({"a": float("nan")}, "E006"), ({"a": float("inf")}, "E006"),
    ({"a": True}, "E006"), ({"a": "1"}, "E006"), ({}, "E027"), ({"": 1.0}, "E027"), ({3: 1.0}, "E027"),
    ([("a", 1.0)], "E027"),
])
def test_explicit_terms_reject_bad_weights(terms, code):
    with pytest.raises(InputError) as err:
        Vocabulary().vectorize_terms(terms)
    assert err.value.code == code


def test_text_and_terms_are_nfc_normalised_and_casefolded():
    nfd, nfc = "cafe\u0301", "caf\u00e9"
    assert tokenize(f"{nfd} Stra\u00dfe") == tokenize(f"{nfc.upper()} STRASSE") == [nfc, "strasse"]
    vocab = Vocabulary()
    ids, _ = vocab.vectorize_text(f"{nfd} bar")
    ids2, _ = vocab.vectorize_terms({nfc.upper(): 1.0, "Bar": 2.0})
    assert sorted(ids.tolist()) == sorted(ids2.tolist()) and len(vocab) == 2


def test_explicit_terms_that_normalise_alike_are_merged():
    vocab = Vocabulary()
    ids, w = vocab.vectorize_terms({"Caf\u00e9": 2.0, "cafe\u0301": 1.0, "tea": 3.0})
    assert len(ids) == 2 and np.allclose(sorted(w), [np.sqrt(0.5)] * 2)


def test_too_many_terms_in_a_record_are_rejected():
    from skype.text import MAX_TERMS

    with pytest.raises(InputError) as err:
        Vocabulary().vectorize_terms({f"t{i}": 1.0 for i in range(MAX_TERMS + 1)})
    assert err.value.code == "E030"
    with pytest.raises(InputError) as err:
        Vocabulary().vectorize_text(" ".join(f"w{i}" for i in range(MAX_TERMS + 1)))
    assert err.value.code == "E030"
    ids, _ = Vocabulary().vectorize_terms({f"t{i}": 1.0 for i in range(MAX_TERMS)})
    assert len(ids) == MAX_TERMS


def test_empty_or_stopword_text_is_rejected():
    with pytest.raises(InputError) as err:
        Vocabulary().vectorize_text("the of and")
    assert err.value.code == "E005"


def test_batch_vectorization_matches_single():
    vocab = Vocabulary.build([["a", "b"], ["b", "c"], ["c"]])
    docs = [["a", "c", "c"], ["b"], []]
    tm = vocab.vectorize_token_lists(docs)
    for i, doc in enumerate(docs):
        ids, w = tm.row(i)
        ids1, w1 = vocab.vectorize_tokens(doc)
        assert list(ids) == list(ids1) and np.allclose(w, w1, atol=0, rtol=1e-15)


def test_vocabulary_round_trips(tmp_path):
    vocab = Vocabulary.build([["a", "b"], ["b"]])
    vocab.id("new")
    vocab.save(tmp_path / "v.json")
    again = Vocabulary.load(tmp_path / "v.json")
    assert again.to_dict() == vocab.to_dict()


def test_normalize():
    assert np.allclose(normalize(np.array([3.0, 4.0])), [0.6, 0.8])


def _sequential_unit(weights: list[float]) -> list[float]:
    """The oracle: squares summed left to right in Python floats (IEEE doubles, no BLAS)."""
    sq = 0.0
    for w in weights:
        sq += w * w
    norm = math.sqrt(sq)
    return [w / norm for w in weights]


@settings(max_examples=200)
@given(st.lists(st.lists(st.floats(1e-3, 1e3), min_size=1, max_size=64), min_size=1, max_size=8))
def test_weights_are_the_same_bits_on_every_path_and_cpu(rows):
    """One normalisation, one summation order: a record alone and the same record in a columnar
    batch get bit-identical weights, equal to a sequential sum (a BLAS dot's order depends on the
    kernel the CPU picks; on AVX-512 it differed from the sequential sum in the last bit)."""
    flat = np.array([w for row in rows for w in row], dtype=np.float64)
    row_of = np.repeat(np.arange(len(rows)), [len(row) for row in rows])
    batch = normalize_rows(row_of, flat, len(rows))
    start = 0
    for row in rows:
        alone = normalize(np.array(row))
        expected = _sequential_unit(row)
        assert alone.tolist() == expected
        assert batch[start:start + len(row)].tolist() == expected
        start += len(row)


def test_tokenized_weights_equal_the_sequential_oracle():
    """tf-idf weights of one text, and of the same texts weighed as a batch, are the oracle's bits."""
    vocab = Vocabulary.build([["coffee", "tea"], ["coffee"], ["bagel", "tea", "jam"]])
    rng = np.random.default_rng(3)
    words = ["coffee", "tea", "bagel", "jam", "croissant", "butter", "milk", "sugar"]
    docs = [rng.choice(words, size=int(rng.integers(1, 30))).tolist() for _ in range(200)]
    batch = vocab.vectorize_token_lists(docs)
    for row, doc in enumerate(docs):
        ids, weights = vocab.vectorize_text(" ".join(doc))
        tf = [float(doc.count(w)) for w in sorted(set(doc), key=vocab.id)]
        expected = _sequential_unit([t * float(i) for t, i in zip(tf, vocab.idf(ids))])
        assert weights.tolist() == expected
        assert batch.weights[batch.indptr[row]:batch.indptr[row + 1]].tolist() == expected
