"""Every index x buffer combination gives the reference's answers on the same workloads, so
that the benchmarks compare engines that compute the same thing (issue 5)."""

import pytest

from skype import Engine, ReferenceEngine
from skype.engine import BUFFERS, INDEXES


@pytest.fixture(scope="module", params=["tweets", "geonames"])
def workload_and_answers(request, tweets_small, geonames_small):
    w = tweets_small if request.param == "tweets" else geonames_small
    ref = ReferenceEngine(window=400, vocabulary=w.vocabulary)
    ref.subscribe_batch(w.subscriptions)
    ref.publish_batch(w.messages)
    return w, {sid: [(m.id, m.score) for m in ms] for sid, ms in ref.results()}


@pytest.mark.parametrize("buffer", BUFFERS)
@pytest.mark.parametrize("index", INDEXES)
def test_every_combination_gives_the_reference_answers(workload_and_answers, index, buffer):
    w, want = workload_and_answers
    eng = Engine(window=400, vocabulary=w.vocabulary, index=index, buffer=buffer, leaf_capacity=30)
    eng.subscribe_batch(w.subscriptions)
    eng.publish_batch(w.messages)
    got = {sid: [(m.id, m.score) for m in ms] for sid, ms in eng.results()}
    assert got == want
