"""MiniLM (real weights, `scripts/fetch-models.sh`): skipped when it is not fetched."""

from __future__ import annotations

import numpy as np
import pytest

import fusefss


@pytest.fixture(scope="module")
def minilm() -> fusefss.Model:
    try:
        return fusefss.Model("minilm")
    except fusefss.FusefssError as e:
        assert "fetch-models.sh" in str(e)
        pytest.skip("MiniLM is not fetched (scripts/fetch-models.sh)")


def test_minilm_embeddings_are_exact_and_close_to_f64(minilm: fusefss.Model) -> None:
    r = minilm.embed(["a sentence to embed privately"], reference=True, progress=False)
    assert r.matches_plaintext is True and r.embeddings.shape == (1, 384)
    assert r.reference is not None
    cos = float(np.dot(r.embeddings[0], r.reference[0]) / np.linalg.norm(r.embeddings[0]) / np.linalg.norm(r.reference[0]))
    assert cos > 0.99
