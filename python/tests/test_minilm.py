"""MiniLM (real weights, `scripts/fetch-models.sh`): skipped when it is not fetched."""

from __future__ import annotations

import os
from pathlib import Path

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


def test_minilm_from_its_folder_equals_the_built_in(minilm: fusefss.Model) -> None:
    root = os.environ.get("FUSEFSS_MODELS") or str(Path(__file__).resolve().parents[2] / "models")
    folder = Path(root) / "minilm"
    if not (folder / "config.json").is_file():
        pytest.skip("no config.json in the MiniLM folder")
    m = fusefss.Model(folder)
    assert m.name == "minilm"
    text = ["the same weights from a folder"]
    assert np.array_equal(m.embed(text, secure=False, progress=False).ring, minilm.embed(text, secure=False, progress=False).ring)
