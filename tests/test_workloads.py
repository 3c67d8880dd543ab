import numpy as np
import pytest

from skype import InputError
from skype.data import make_workload
from skype.data.geonames import load_places
from skype.validate import check_message_batch, check_subscription_batch


def test_geonames_cities500_is_the_real_gazetteer():
    places = load_places()
    assert len(places) == 234_908
    i = int(np.argmax(places.population))
    assert places.population[i] > 10_000_000 and len(places.names(i)) > 1


@pytest.mark.parametrize("dataset", ["geonames", "tweets"])
def test_workloads_are_deterministic_and_valid(dataset):
    a = make_workload(dataset, num_subs=200, num_messages=800, seed=11)
    b = make_workload(dataset, num_subs=200, num_messages=800, seed=11)
    c = make_workload(dataset, num_subs=200, num_messages=800, seed=12)
    for x, y in [(a.messages.terms.ids, b.messages.terms.ids), (a.messages.x, b.messages.x),
                 (a.subscriptions.alpha, b.subscriptions.alpha), (a.subscriptions.terms.ids, b.subscriptions.terms.ids)]:
        assert np.array_equal(x, y)
    assert not np.array_equal(a.messages.x, c.messages.x)
    check_message_batch(a.messages, a.bounds, -np.inf)
    check_subscription_batch(a.subscriptions, a.bounds)


def test_more_subscriptions_do_not_change_the_messages():
    a = make_workload("tweets", num_subs=10, num_messages=500, seed=2)
    b = make_workload("tweets", num_subs=90, num_messages=500, seed=2)
    assert np.array_equal(a.messages.terms.weights, b.messages.terms.weights)


def test_tweets_have_about_nine_terms_and_a_rare_first_vocabulary():
    w = make_workload("tweets", num_subs=100, num_messages=5000, seed=0)
    lens = w.messages.terms.lengths()
    assert 7.5 < lens.mean() < 9.5  # 1 + Poisson(8) draws, a few repeat
    df = w.vocabulary.document_frequency(np.arange(len(w.vocabulary)))
    assert np.all(np.diff(df) >= 0)  # ids are the df-ascending global order


@pytest.mark.parametrize("terms", [(1, 3), (1, 5), (2, 2)])
def test_subscriptions_take_terms_of_a_message(terms):
    w = make_workload("tweets", num_subs=300, num_messages=1000, seed=4, sub_terms=terms)
    lens = w.subscriptions.terms.lengths()
    assert lens.min() >= 1 and lens.max() <= terms[1]
    msg_terms = [set(w.messages.terms.row(j)[0].tolist()) for j in range(len(w.messages))]
    locs = {(x, y): j for j, (x, y) in enumerate(zip(w.messages.x, w.messages.y))}
    for i in range(50):
        j = locs[(w.subscriptions.x[i], w.subscriptions.y[i])]  # location = the sampled message's
        assert set(w.subscriptions.terms.row(i)[0].tolist()) <= msg_terms[j]
    assert np.all((w.subscriptions.alpha > 0) & (w.subscriptions.alpha < 1)) and np.all(w.subscriptions.k == 20)


def test_zipf_subscription_keywords():
    w = make_workload("tweets", num_subs=200, num_messages=1000, seed=4, sub_keywords="zipf")
    assert w.subscriptions.terms.lengths().min() >= 1


def test_unknown_dataset():
    with pytest.raises(InputError) as err:
        make_workload("yelp")
    assert err.value.code == "E022"


@pytest.mark.parametrize("chunk", [1, 7, 333])
def test_tweets_generated_in_chunks_equal_one_pass(chunk):
    """The chunked generation draws the same numbers in the same order and does the same
    operations per message: every array equals the one-pass result bit for bit."""
    from skype.data.workloads import _streams, tweets_messages

    n = 1000
    one = tweets_messages(n, _streams(5)[0], chunk=n)
    parts = tweets_messages(n, _streams(5)[0], chunk=chunk)
    for a, b in [(one[0], parts[0]), (one[1], parts[1]), (one[3].indptr, parts[3].indptr),
                 (one[3].ids, parts[3].ids), (one[3].weights, parts[3].weights)]:
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert one[2].to_dict() == parts[2].to_dict()


def test_english_words_cache_returns_wordfreqs_words(tmp_path, monkeypatch):
    """The on-disk cache of the vocabulary gives back exactly what wordfreq gives, and a corrupt
    cache file is rebuilt, not trusted."""
    from skype.data import workloads

    monkeypatch.setenv("SKYPE_CACHE_DIR", str(tmp_path))
    workloads.english_words.cache_clear()
    fresh_words, fresh_freq = workloads.english_words(2_000)  # from wordfreq, then written
    (cached,) = tmp_path.glob("english-words-2000-*.npz")
    workloads.english_words.cache_clear()
    words, freq = workloads.english_words(2_000)              # from the file
    assert words == fresh_words and isinstance(words[0], str)
    assert np.array_equal(freq, fresh_freq) and freq.sum() == pytest.approx(1.0)
    cached.write_bytes(b"not an npz file")
    workloads.english_words.cache_clear()
    assert workloads.english_words(2_000)[0] == fresh_words
    workloads.english_words.cache_clear()
