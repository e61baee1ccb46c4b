"""Private semantic search with MiniLM: neither server sees the documents or the query.

Each sentence and the query are embedded by a secure run (the dealer and both servers in
this process, as `fusefss demo` runs them); the client ranks the sentences by cosine
similarity to the query. The same ranking from the f64 model (plaintext, no privacy) is
printed next to it.

    scripts/fetch-models.sh                  # MiniLM, once (~90 MB of it)
    python python/examples/private_search.py ["your query"] [--model bert-tiny]

`--model bert-tiny` runs without the download (random weights: the ranking means nothing,
but the secure and plaintext rankings still agree).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import fusefss

SENTENCES = [
    "The cat sat on the warm windowsill all afternoon.",
    "Interest rates rose again, and mortgages got more expensive.",
    "A kitten curled up in a sunny spot by the window.",
    "The central bank kept its policy rate unchanged this quarter.",
    "Our hiking trip ended at a lake high in the mountains.",
    "Two servers compute on secret shares without learning the input.",
]


def unit(rows: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length."""
    out: np.ndarray = rows / np.linalg.norm(rows, axis=-1, keepdims=True)
    return out


def ranking(docs: np.ndarray, query: np.ndarray) -> list[tuple[int, float]]:
    """Sentence indices by cosine similarity to the query, best first."""
    scores = unit(docs) @ unit(query[None, :])[0]
    order = np.argsort(-scores, kind="stable")
    return [(int(i), float(scores[i])) for i in order]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("query", nargs="?", default="where is the cat sleeping?")
    p.add_argument("--model", default="minilm", help="minilm (default) or bert-tiny")
    p.add_argument("--impl", default="fusefss", choices=["fusefss", "sigma"])
    a = p.parse_args()
    try:
        model = fusefss.Model(a.model, impl=a.impl)
    except fusefss.FusefssError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1

    # One secure run per text; with reference=True also the f64 model's embeddings.
    docs = model.embed(SENTENCES, reference=True)
    query = model.embed([a.query], reference=True)
    assert docs.reference is not None and query.reference is not None

    private = ranking(docs.embeddings, query.embeddings[0])
    plain = ranking(docs.reference, query.reference[0])

    print(f"query: {a.query!r}  ({model.name}, {model.impl})\n")
    print(f"{'rank':<5} {'private (secure run)':<52} {'cos':>6}   {'plaintext (f64 model)':<52} {'cos':>6}")
    for k, ((i, s), (j, t)) in enumerate(zip(private, plain), 1):
        print(f"{k:<5} {SENTENCES[i][:50]:<52} {s:6.3f}   {SENTENCES[j][:50]:<52} {t:6.3f}")

    same = [i for i, _ in private] == [j for j, _ in plain]
    exact = docs.matches_plaintext and query.matches_plaintext
    c = docs.costs
    print(
        f"\nsame ranking: {'yes' if same else 'NO'}; every secure run equals the plaintext "
        f"fixed-point model bit for bit: {'yes' if exact else 'NO'}"
    )
    print(
        f"{len(SENTENCES) + 1} secure runs: online {c['online_ms'] + query.costs['online_ms']:.0f} ms, "
        f"key generation {c['keygen_ms'] + query.costs['keygen_ms']:.0f} ms, "
        f"{(c['key_bytes'] + query.costs['key_bytes']) / 1e6:.1f} MB of keys and "
        f"{(c['comm_bytes'] + query.costs['comm_bytes']) / 1e6:.1f} MB sent per server"
    )
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
