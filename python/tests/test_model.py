"""`fusefss.Model`: private embeddings and forward passes in this process."""

from __future__ import annotations

import numpy as np
import pytest

import fusefss


@pytest.fixture(scope="module")
def bert() -> fusefss.Model:
    return fusefss.Model("bert-tiny")


def test_the_issue_acceptance_embedding(bert: fusefss.Model) -> None:
    r = bert.embed(["hello world", "a second private sentence"])
    assert r.matches_plaintext is True
    assert r.embeddings.shape == (2, 128)
    assert r.embeddings.dtype == np.float64
    assert np.isfinite(r.embeddings).all()
    assert set(r.costs) == {"online_ms", "keygen_ms", "key_bytes", "comm_bytes", "rounds"}
    assert r.costs["key_bytes"] > 0 and r.costs["comm_bytes"] > 0 and r.costs["rounds"] > 0
    # Each text ran at its own token count; the costs are the runs' sums.
    assert [run["seq"] for run in r.runs] == [len(bert.tokenize(t)) for t in ["hello world", "a second private sentence"]]
    assert r.costs["rounds"] == sum(run["costs"]["rounds"] for run in r.runs)
    # The reals are the ring words at scale 2^-f.
    f, n = bert.info["f"], bert.info["n"]
    signed = np.where(r.ring >= 2 ** (n - 1), r.ring.astype(np.float64) - 2.0**n, r.ring.astype(np.float64))
    assert np.array_equal(signed / 2.0**f, r.embeddings)


def test_secure_equals_the_plaintext_program_bit_for_bit(bert: fusefss.Model) -> None:
    texts = ["the servers never see this", "nor this one"]
    secure = bert.embed(texts, progress=False)
    clear = bert.embed(texts, secure=False, reference=True, progress=False)
    assert np.array_equal(secure.ring, clear.ring)
    assert clear.costs["key_bytes"] == 0 and clear.matches_plaintext is True
    assert clear.reference is not None and clear.reference.shape == (2, 128)
    for a, b in zip(clear.embeddings, clear.reference):
        assert float(np.dot(a, b) / np.linalg.norm(a) / np.linalg.norm(b)) > 0.99


def test_a_single_text_sigma_and_keys_in_memory(bert: fusefss.Model) -> None:
    r = fusefss.Model("bert-tiny", impl="sigma", layers=1).embed("just one", progress=False)
    assert r.embeddings.shape == (1, 128) and r.matches_plaintext is True
    mem = fusefss.Model("bert-tiny", layers=1, keys_in_memory=True).embed("just one", progress=False)
    disk = fusefss.Model("bert-tiny", layers=1).embed("just one", progress=False)
    assert mem.matches_plaintext and np.array_equal(mem.ring, disk.ring)
    # The spent correction words kept for later keys are wiped on request (and at exit), and
    # keys dealt afterwards are as exact.
    fusefss._native.wipe_kept()
    again = fusefss.Model("bert-tiny", layers=1, keys_in_memory=True).embed("just one", progress=False)
    assert again.matches_plaintext and np.array_equal(again.ring, disk.ring)


def test_forward_on_tokens_ring_words_and_reals_agree(bert: fusefss.Model) -> None:
    ids = bert.tokenize("forward on every kind of input", seq=9)
    assert len(ids) == 9
    by_ids = bert.forward(token_ids=ids, reference=True, progress=False)
    x = bert.input(ids)
    assert x.shape == (9, 128) and x.dtype == np.uint64
    by_ring = bert.forward(inputs=x, progress=False)
    f, n = bert.info["f"], bert.info["n"]
    reals = np.where(x >= 2 ** (n - 1), x.astype(np.float64) - 2.0**n, x.astype(np.float64)) / 2.0**f
    by_real = bert.forward(inputs=reals, progress=False)
    by_int64 = bert.forward(inputs=x.astype(np.int64), secure=False, progress=False)
    for r in (by_ids, by_ring, by_real, by_int64):
        assert r.matches_plaintext is True and r.seq == 9 and r.impl == "fusefss"
    assert np.array_equal(by_ids.ring, by_ring.ring)
    assert np.array_equal(by_ids.ring, by_real.ring)
    assert np.array_equal(by_ids.ring, by_int64.ring)
    assert by_ids.reference is not None and by_ids.reference.shape == by_ids.output.shape


def test_llama_forward_gives_logits() -> None:
    m = fusefss.Model("llama-tiny")
    assert m.info["generates"] and m.info["output_scale"] == 2 * m.info["f"]
    r = m.forward(token_ids=m.tokenize("three private words"), progress=False)
    assert r.matches_plaintext is True and r.output.shape == (m.info["vocab"],)


def test_errors_are_fusefss_errors_with_the_rust_message(bert: fusefss.Model) -> None:
    with pytest.raises(fusefss.FusefssError, match="unknown model"):
        fusefss.Model("bert-huge")
    with pytest.raises(fusefss.FusefssError, match="config.json"):
        fusefss.Model("./no-such-folder/my-model")
    with pytest.raises(fusefss.FusefssError, match="unknown implementation"):
        fusefss.Model("bert-tiny", impl="magic")
    with pytest.raises(fusefss.FusefssError, match="outside the vocabulary"):
        bert.forward(token_ids=[1, 2, 10**6])
    with pytest.raises(fusefss.FusefssError, match="at most 512"):
        bert.forward(token_ids=[5] * 513)
    with pytest.raises(fusefss.FusefssError, match="text 1"):
        bert.embed(["fine", "   "])
    with pytest.raises(fusefss.FusefssError, match="does not fit the ring"):
        bert.forward(inputs=np.full((2, 128), 1e30))
    with pytest.raises(fusefss.FusefssError, match="generates text"):
        fusefss.Model("llama-tiny").embed(["no embeddings from logits"])
    with pytest.raises(fusefss.FusefssError, match="does not generate"):
        bert.generate("hello")
    with pytest.raises(ValueError, match="exactly one"):
        bert.forward()
    with pytest.raises(ValueError):
        bert.forward(inputs=np.zeros((2, 7)))
    assert issubclass(fusefss.FusefssError, Exception)
