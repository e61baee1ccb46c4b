"""`Model.generate`: private generation as an iterator of tokens (llama-tiny)."""

from __future__ import annotations

import os

import pytest

import fusefss


@pytest.fixture(scope="module")
def llama() -> fusefss.Model:
    return fusefss.Model("llama-tiny")


@pytest.mark.parametrize("keys", ["disk", "memory", "streamed"])
def test_every_token_is_exact(llama: fusefss.Model, keys: str) -> None:
    gen = llama.generate(
        "the servers never see this prompt",
        max_new_tokens=3,
        keys_in_memory=keys == "memory",
        keys_streamed=keys == "streamed",
        keys_on_disk=keys == "disk",
    )
    tokens = list(gen)
    assert [t.step for t in tokens] == [0, 1, 2]
    for t in tokens:
        assert isinstance(t, fusefss.Token)
        assert 0 <= t.id < llama.info["vocab"]
        assert t.matches_plaintext is True
        assert t.costs["rounds"] > 0 and t.costs["key_bytes"] > 0
    assert gen.matches_plaintext is True
    assert gen.prompt_tokens == llama.tokenize("the servers never see this prompt")
    assert gen.tokens == tokens


def test_sampling_and_sigma() -> None:
    m = fusefss.Model("llama-tiny", impl="sigma")
    tokens = list(m.generate("a sampled answer", max_new_tokens=2, temperature=0.8, top_p=0.9))
    assert len(tokens) == 2 and all(t.matches_plaintext for t in tokens)


def test_breaking_out_ends_the_session(llama: fusefss.Model, tmp_path: os.PathLike) -> None:
    with llama.generate("stop early", max_new_tokens=6, keys_dir=tmp_path) as gen:
        for t in gen:
            break
    assert len(gen.tokens) == 1
    # The session's bundles are gone once it ended.
    left = [p for p in os.scandir(tmp_path) for p in os.scandir(p.path)] if os.path.exists(tmp_path) else []
    assert not [p for p in left if p.name.endswith(".fkb")]


def test_bad_options_raise_when_iterating(llama: fusefss.Model) -> None:
    with pytest.raises(fusefss.FusefssError, match="top_p"):
        list(llama.generate("bad sampling", max_new_tokens=2, top_p=0.0))
    with pytest.raises(fusefss.FusefssError, match="max_new_tokens"):
        list(llama.generate("no tokens", max_new_tokens=0))
    with pytest.raises(fusefss.FusefssError, match="choose one"):
        list(llama.generate("two places", max_new_tokens=1, keys_streamed=True, keys_in_memory=True))
    with pytest.raises(fusefss.FusefssError, match="choose one"):
        list(llama.generate("two places", max_new_tokens=1, keys_on_disk=True, keys_in_memory=True))
