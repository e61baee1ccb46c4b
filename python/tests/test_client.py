"""`fusefss.Client` against two `fusefss serve` processes on loopback, with the dealer's
bundles: the same results as in-process runs and as the CLI's `query`."""

from __future__ import annotations

import numpy as np
import pytest

import fusefss

from conftest import Deployment, run_cli


def test_embed_against_deployed_servers(deployment: Deployment) -> None:
    client = fusefss.Client(deployment.servers, deployment.tls)
    model = fusefss.Model("bert-tiny", layers=1)
    texts = ["a private sentence", "another"]
    r = client.embed(texts, model, seq=4, progress=False)
    assert r.matches_plaintext is True and r.embeddings.shape == (2, 128)
    assert r.costs["keygen_ms"] is None and r.costs["key_bytes"] is None and r.costs["rounds"] > 0
    # Bit for bit what the model computes in this process (same program, same input).
    local = model.embed([" ".join([t] * 4) for t in texts], secure=False, progress=False)
    ids = [model.tokenize(t, seq=4) for t in texts]
    for row, i in zip(r.ring, ids):
        assert np.array_equal(row, model.forward(token_ids=i, secure=False, progress=False).ring)
    assert local.embeddings.shape == r.embeddings.shape


def test_a_query_equals_the_cli_query(deployment: Deployment, fusefss_bin: str) -> None:
    text = "the same text twice"
    cli = run_cli(
        fusefss_bin, "query", "--servers", ",".join(deployment.servers), "--tls", str(deployment.tls),
        "--layers", "1", "--seq", "6", "--text", text, "--check", "--json",
    )[0]
    client = fusefss.Client(deployment.servers, deployment.tls)
    ours = client.embed(text, "bert-tiny", seq=6, layers=1, progress=False)
    assert cli["matches_plaintext"] is True and ours.matches_plaintext is True
    assert ours.embeddings[0].tolist() == cli["output"]
    assert ours.runs[0]["costs"]["rounds"] == cli["rounds"]


def test_forward_on_an_embedded_input(deployment: Deployment) -> None:
    client = fusefss.Client(deployment.servers, deployment.tls)
    model = fusefss.Model("bert-tiny", layers=1)
    x = model.input(model.tokenize("ring words in", seq=4))
    r = client.forward(inputs=x, model=model)
    assert r.matches_plaintext is True and r.bundle
    assert np.array_equal(r.ring, model.forward(inputs=x, secure=False, progress=False).ring)


def test_generate_against_deployed_servers(deployment: Deployment) -> None:
    client = fusefss.Client(deployment.servers, deployment.tls)
    model = fusefss.Model("llama-tiny")
    prompt = "three private words"
    assert len(model.tokenize(prompt)) == 5
    gen = client.generate(prompt, model, max_new_tokens=3)
    tokens = list(gen)
    assert len(tokens) == 3 and all(t.matches_plaintext for t in tokens)
    # Greedy: the same tokens as in this process.
    local = [t.id for t in model.generate(prompt, max_new_tokens=3, keys_in_memory=True)]
    assert [t.id for t in tokens] == local


def test_server_errors_reach_python(deployment: Deployment) -> None:
    client = fusefss.Client(deployment.servers, deployment.tls, timeout=30)
    with pytest.raises(fusefss.FusefssError, match="no key bundle"):
        client.embed("no bundles at this length", "bert-tiny", seq=11, layers=1, progress=False)
    with pytest.raises(fusefss.FusefssError, match="two addresses"):
        fusefss.Client(deployment.servers[:1], deployment.tls)
    with pytest.raises(fusefss.FusefssError):
        fusefss.Client(deployment.servers, deployment.tls / "missing")
