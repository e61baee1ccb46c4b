"""fusefss: two-server private transformer inference with function secret sharing.

A client secret-shares its input between two non-colluding servers; the servers run the
model on shares with keys a dealer prepared, and the client reconstructs the exact
fixed-point result while neither server learns the input. Nonlinear layers run either as
FuseFSS-compiled operators (``impl="fusefss"``, the default) or as SIGMA's protocols
(``impl="sigma"``).

- :class:`Model` runs a model in this process: the dealer and both servers, as
  ``fusefss demo`` and ``fusefss generate`` do (:meth:`Model.embed`,
  :meth:`Model.forward`, :meth:`Model.generate`);
- :class:`Client` runs the same calls against two deployed servers (``fusefss serve``);
- :func:`compile_spec`, :func:`bench_ops` and :func:`bench_model` return a spec's compiled
  costs and the rows ``fusefss bench ops --json`` / ``bench model --json`` print.

Every error is a :class:`FusefssError` carrying the Rust error's message. Long calls
release the GIL and show a progress bar when ``tqdm`` is installed.

>>> import fusefss
>>> r = fusefss.Model("bert-tiny").embed(["hello world", "a second private sentence"])
>>> r.embeddings.shape, r.matches_plaintext
((2, 128), True)
"""

from __future__ import annotations

import atexit
import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from . import _native
from ._native import FusefssError

# Spent key words kept for later keys to overwrite are wiped when the interpreter exits.
atexit.register(_native.wipe_kept)

__all__ = [
    "Client",
    "EmbedResult",
    "ForwardResult",
    "FusefssError",
    "Generation",
    "Model",
    "Token",
    "bench_model",
    "bench_ops",
    "compile_spec",
]

__version__ = "0.1.0"

#: The built-in models: ``bert-tiny``, ``bert-base``, ``bert-large``, ``gpt2`` and
#: ``llama-tiny`` have seeded random weights (no download); ``minilm`` and ``smollm2`` are
#: real models that ``scripts/fetch-models.sh`` fetches (``$FUSEFSS_MODELS`` or ``./models``).
MODELS = ("bert-tiny", "bert-base", "bert-large", "minilm", "gpt2", "llama-tiny", "smollm2")

Costs = Dict[str, Any]
"""A run's costs: ``online_ms``, ``keygen_ms``, ``key_bytes`` (one server's), ``comm_bytes``
(one server sent), ``rounds``. Against deployed servers ``keygen_ms`` and ``key_bytes`` are
``None`` (the dealer ran elsewhere)."""


def _bar(enabled: bool, total: Optional[float], desc: str, unit: str, fractional: bool = False) -> Any:
    """A tqdm progress bar, or None when disabled or tqdm is not installed; a fractional
    one (advanced by the dealer's progress within a run) shows a percentage."""
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        return None
    fmt = "{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}]" if fractional else None
    return tqdm(total=total, desc=desc, unit=unit, leave=False, dynamic_ncols=True, bar_format=fmt)


def _u64(b: bytes) -> np.ndarray:
    return np.frombuffer(b, dtype="<u8").astype(np.uint64)


def _f64(b: bytes) -> np.ndarray:
    return np.frombuffer(b, dtype="<f8").astype(np.float64)


def _sum_costs(costs: Sequence[Costs]) -> Costs:
    total: Costs = {"online_ms": 0.0, "keygen_ms": 0.0, "key_bytes": 0, "comm_bytes": 0, "rounds": 0}
    for c in costs:
        for k in total:
            if total[k] is None or c.get(k) is None:
                total[k] = None
            else:
                total[k] += c[k]
    return total


@dataclass(frozen=True)
class EmbedResult:
    """Embeddings of several texts, one secure run per text.

    Attributes:
        embeddings: ``(len(texts), hidden)`` float64 array, one row per text (BERT and
            MiniLM: the mean-pooled embedding; GPT-2: the last token's hidden state).
        matches_plaintext: every text's secure output equals the plaintext fixed-point
            model's bit for bit (``None`` against deployed servers with ``check=False``).
        costs: the runs' costs summed (see :data:`Costs`).
        ring: the same outputs as ring words of ``Z_2^n`` at scale ``2^-f`` (uint64).
        reference: the f64 model's embeddings, with ``reference=True``.
        runs: each text's ``seq`` (tokens), ``costs`` and ``matches_plaintext``.
    """

    embeddings: np.ndarray
    matches_plaintext: Optional[bool]
    costs: Costs
    ring: np.ndarray
    reference: Optional[np.ndarray] = None
    runs: List[Dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class ForwardResult:
    """One run of a model over one sequence.

    Attributes:
        output: the reconstructed output in real units, float64 (BERT: the mean-pooled
            embedding; GPT-2: the last hidden state; Llama: the last token's logits).
        ring: the same as ring words (uint64; Llama's logits at scale ``2^-2f``).
        matches_plaintext: the secure output equals the plaintext fixed-point model's bit
            for bit (``None`` against deployed servers with ``check=False``).
        costs: see :data:`Costs`.
        seq: tokens in the input.
        impl: the implementation that ran, ``"fusefss"`` or ``"sigma"``.
        bundle: against deployed servers, the key bundle they spent.
        reference: the f64 model's output, with ``reference=True`` (token ids only).
    """

    output: np.ndarray
    ring: np.ndarray
    matches_plaintext: Optional[bool]
    costs: Costs
    seq: int
    impl: str
    bundle: Optional[str] = None
    reference: Optional[np.ndarray] = None


def _forward_result(out: Any) -> ForwardResult:
    meta, ring, values, ref = out
    m = json.loads(meta)
    return ForwardResult(
        output=_f64(values),
        ring=_u64(ring),
        matches_plaintext=m["matches_plaintext"],
        costs=m["costs"],
        seq=m["seq"],
        impl=m["impl"],
        bundle=m["bundle"],
        reference=None if ref is None else _f64(ref),
    )


def _embed_result(runs: Sequence[ForwardResult]) -> EmbedResult:
    matches: Optional[bool] = True
    for r in runs:
        if r.matches_plaintext is None:
            matches = None
            break
        matches = matches and r.matches_plaintext
    refs = [r.reference for r in runs]
    width = runs[0].output.shape[0] if runs else 0
    return EmbedResult(
        embeddings=np.stack([r.output for r in runs]) if runs else np.zeros((0, width)),
        matches_plaintext=matches,
        costs=_sum_costs([r.costs for r in runs]),
        ring=np.stack([r.ring for r in runs]) if runs else np.zeros((0, width), dtype=np.uint64),
        reference=None if any(x is None for x in refs) or not runs else np.stack(refs),  # type: ignore[arg-type]
        runs=[{"seq": r.seq, "costs": r.costs, "matches_plaintext": r.matches_plaintext} for r in runs],
    )


def _texts(texts: Union[str, Sequence[str]]) -> List[str]:
    if isinstance(texts, str):
        return [texts]
    out = list(texts)
    for t in out:
        if not isinstance(t, str):
            raise TypeError(f"texts must be strings, not {type(t).__name__}")
    return out


def _inputs(model: "Model", token_ids: Any, inputs: Any) -> Dict[str, Any]:
    """The native call's input arguments: token ids, ring words or reals."""
    if (token_ids is None) == (inputs is None):
        raise ValueError("give exactly one of token_ids and inputs")
    if token_ids is not None:
        ids = np.asarray(token_ids)
        if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
            raise ValueError("token_ids must be a flat sequence of integers")
        if ids.size and (ids.min() < 0 or ids.max() >= 2**32):
            raise ValueError("token ids must be in [0, 2^32)")
        return {"tokens": [int(t) for t in ids]}
    x = np.asarray(inputs)
    hidden = model.info["hidden"]
    if x.ndim == 1:
        x = x.reshape(1, -1)
    if x.ndim != 2 or x.shape[1] != hidden:
        raise ValueError(f"inputs must be (seq, {hidden}) for {model.name}, not {np.shape(inputs)}")
    if np.issubdtype(x.dtype, np.integer):
        # Ring words; negative int64 values are their two's complement, reduced mod 2^n.
        return {"ring": np.ascontiguousarray(x.astype(np.uint64, copy=False), dtype="<u8").tobytes()}
    if np.issubdtype(x.dtype, np.floating):
        return {"real": np.ascontiguousarray(x, dtype="<f8").tobytes()}
    raise ValueError(f"inputs must be integers (ring words) or floats (reals), not {x.dtype}")


@dataclass(frozen=True)
class Token:
    """One generated token.

    Attributes:
        id: the token id.
        text: its text piece (empty for ``llama-tiny``'s word-hash tokenizer, which has no
            text); :attr:`Generation.text` decodes the whole answer at once.
        step: 0 for the prefill's token, then one per decode step.
        end_of_turn: the model's end of turn (generation stops after it).
        matches_plaintext: the secure step equals the plaintext fixed-point model's bit for
            bit (``None`` against deployed servers with ``check=False``).
        costs: that step's costs (see :data:`Costs`).
    """

    id: int
    text: str
    step: int
    end_of_turn: bool
    matches_plaintext: Optional[bool]
    costs: Costs


class Generation:
    """A private generation, an iterator of :class:`Token` as each step ends.

    The session runs on a thread of its own while you read. Breaking out of the loop (or
    :meth:`close`, or leaving a ``with`` block) ends it after its current step; its unused
    keys are deleted.
    """

    def __init__(self, native: Any, model: "Model", progress: bool, total: int) -> None:
        self._native = native
        self._model = model
        self.tokens: List[Token] = []
        """The tokens read so far."""
        self.prompt_tokens: Optional[List[int]] = None
        """The prompt's token ids, known once the generation has ended."""
        self._done = False
        self._bar = _bar(progress, total, f"{model.name} generating", "token")

    def __iter__(self) -> "Generation":
        return self

    def __next__(self) -> Token:
        if self._done:
            raise StopIteration
        try:
            ev = self._native.next_event()
        except BaseException:
            self._finish()
            raise
        if ev is not None and ev[0] == "token":
            t = json.loads(ev[1])
            tok = Token(
                id=t["id"],
                text=t["text"],
                step=t["step"],
                end_of_turn=t["end_of_turn"],
                matches_plaintext=t["matches_plaintext"],
                costs=t["costs"],
            )
            self.tokens.append(tok)
            if self._bar is not None:
                self._bar.update(1)
            return tok
        if ev is not None and ev[0] == "prompt":
            self.prompt_tokens = json.loads(ev[1])
        self._finish()
        raise StopIteration

    def _finish(self) -> None:
        self._done = True
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    @property
    def text(self) -> str:
        """The text of the tokens read so far, decoded at once."""
        return self._model.decode([t.id for t in self.tokens])

    @property
    def matches_plaintext(self) -> Optional[bool]:
        """Every step read so far equals the plaintext fixed-point model's (``None`` if
        unchecked)."""
        if any(t.matches_plaintext is None for t in self.tokens):
            return None
        return all(t.matches_plaintext for t in self.tokens)

    def close(self) -> None:
        """End the session after its current step and wait for it."""
        self._native.close()
        self._finish()

    def __enter__(self) -> "Generation":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        bar = getattr(self, "_bar", None)
        if bar is not None:
            bar.close()


class Model:
    """A model known by name, run privately in this process.

    Args:
        name_or_dir: a built-in model (:data:`MODELS`; ``minilm`` and ``smollm2`` need
            ``scripts/fetch-models.sh`` first, the error says so), or a Hugging Face folder
            (``config.json``, ``model.safetensors``, ``tokenizer.json``: BERT, GPT-2 or
            Llama), run in this process (deployed servers serve built-in models only).
        impl: ``"fusefss"`` (compiled operators, the default) or ``"sigma"``.
        layers: use only the first ``layers`` layers.
        keys_in_memory: keep each secure run's keys in memory instead of bundles on disk
            read back as the servers run (``fusefss demo --keys-in-memory``).

    Raises:
        FusefssError: for an unknown model or implementation, a folder that does not hold
            a model fusefss runs (the message names what is missing), or a fetched model
            that is missing.
    """

    def __init__(
        self,
        name_or_dir: Union[str, "os.PathLike[str]"],
        impl: str = "fusefss",
        *,
        layers: Optional[int] = None,
        keys_in_memory: bool = False,
    ) -> None:
        self._native = _native.NativeModel(os.fspath(name_or_dir), impl, layers, keys_in_memory)
        self.info: Dict[str, Any] = json.loads(self._native.info())
        """The model's ``name``, ``impl``, ring width ``n`` and scale ``f``, ``layers``,
        ``hidden``, ``vocab``, ``max_seq``, ``output`` (what it is), ``output_scale`` and
        ``generates``."""

    @property
    def name(self) -> str:
        """The model's name."""
        return str(self.info["name"])

    @property
    def impl(self) -> str:
        """The implementation of its nonlinear layers."""
        return str(self.info["impl"])

    def __repr__(self) -> str:
        return f"Model({self.name!r}, impl={self.impl!r}, layers={self.info['layers']})"

    def tokenize(self, text: str, seq: Optional[int] = None) -> List[int]:
        """The token ids of ``text`` (with the tokenizer's special tokens), cut or repeated to
        ``seq`` tokens if given."""
        return list(self._native.tokenize(text, seq))

    def decode(self, ids: Sequence[int]) -> str:
        """The text of token ids (empty for the built-in word-hash tokenizer)."""
        return str(self._native.decode([int(i) for i in ids]))

    def input(self, token_ids: Sequence[int]) -> np.ndarray:
        """The client's embedded input for ``token_ids``: ``(seq, hidden)`` ring words
        (uint64, at scale ``2^-f``), as :meth:`forward` takes it."""
        x = _u64(self._native.input([int(t) for t in token_ids]))
        return x.reshape(-1, self.info["hidden"])

    def embed(
        self,
        texts: Union[str, Sequence[str]],
        secure: bool = True,
        *,
        reference: bool = False,
        progress: bool = True,
    ) -> EmbedResult:
        """Embed texts privately: one secure run per text, at the text's own token count.

        For each text the dealer deals fresh keys (into bundles on disk, read back as the
        servers run, unless the model keeps keys in memory), the client embeds and
        secret-shares the text, both servers run the model on two threads, and the client
        reconstructs the output (as ``fusefss demo``). The GIL is released while it runs.

        Args:
            texts: a text or a sequence of texts.
            secure: False runs the same fixed-point program in the clear instead (no keys,
                no shares; costs are zero): the numbers the secure run reproduces.
            reference: also compute the f64 model's embeddings (``EmbedResult.reference``).
            progress: show a progress bar (when tqdm is installed).

        Raises:
            FusefssError: for a text with no tokens, one longer than the model takes, or a
                model that generates text (its output is logits: use :meth:`forward`).
        """
        items = _texts(texts)
        bar = _bar(progress and bool(items), len(items), f"{self.name} {'private' if secure else 'plaintext'} embedding", "text", True)

        def step(i: int, done: int, total: int) -> None:
            if bar is not None and total:
                bar.update(i + done / total - bar.n)

        try:
            outs = self._native.embed(items, secure, reference, step if bar is not None else None)
        finally:
            if bar is not None:
                bar.close()
        return _embed_result([_forward_result(o) for o in outs])

    def forward(
        self,
        token_ids: Optional[Sequence[int]] = None,
        inputs: Optional[np.ndarray] = None,
        *,
        secure: bool = True,
        reference: bool = False,
        progress: bool = True,
    ) -> ForwardResult:
        """Run the model privately on one sequence.

        Args:
            token_ids: the tokens (the client embeds them from the public table).
            inputs: or the embedded sequence itself, ``(seq, hidden)``: a float array holds
                real values, which the client rounds to the model's fixed point (scale
                ``2^-f``, ``f = info["f"]``); an integer array holds ring words of
                ``Z_2^n`` already at that scale (as :meth:`input` returns; int64 values
                are taken as their two's complement).
            secure: False runs the fixed-point program in the clear (no keys).
            reference: also compute the f64 model's output (token ids only).
            progress: show the dealer's progress (when tqdm is installed).

        Raises:
            FusefssError: for token ids outside the vocabulary, a sequence longer than the
                model takes, or values that do not fit the ring.
        """
        args = _inputs(self, token_ids, inputs)
        bar = _bar(progress, 1.0, f"{self.name} {'private' if secure else 'plaintext'} forward", "run", True)

        def step(done: int, total: int) -> None:
            if bar is not None and total:
                bar.update(done / total - bar.n)

        try:
            out = self._native.run(secure=secure, reference=reference, progress=step if bar is not None else None, **args)
        finally:
            if bar is not None:
                bar.close()
        return _forward_result(out)

    def generate(
        self,
        prompt: str,
        max_new_tokens: int = 8,
        temperature: float = 0.0,
        top_p: float = 1.0,
        chat: bool = False,
        *,
        keys_in_memory: bool = False,
        keys_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
        keys_streamed: bool = False,
        keys_on_disk: bool = False,
        progress: bool = False,
    ) -> Generation:
        """Generate text privately, token by token (``llama-tiny``, ``smollm2``).

        The prefill runs over the prompt, then one decode step per new token over the KV
        cache, which the servers keep as masked values; the client picks each token in the
        clear (greedy when ``temperature`` is 0, else with ``temperature`` and ``top_p``)
        and shares it for the next step, as ``fusefss generate`` does. By default the
        dealer deals each step beside the servers and hands its keys over gate by gate
        (``keys_streamed``: no step's keys all in memory, and the fastest start);
        ``keys_in_memory=True`` deals each step just before it runs; ``keys_on_disk=True``
        deals the whole session ahead into bundles in a temporary folder (``keys_dir`` to
        choose it), so that each step's online time has the machine to itself.

        Returns:
            a :class:`Generation`: iterate it for :class:`Token` objects as they come.

        Raises:
            FusefssError: (when iterating) for a model that does not generate, a prompt
                with no tokens, or bad sampling parameters.
        """
        if not self.info["generates"]:
            raise FusefssError(f"{self.name} does not generate text: use llama-tiny or smollm2")
        native = self._native.generate(
            prompt,
            int(max_new_tokens),
            float(temperature),
            float(top_p),
            bool(chat),
            bool(keys_in_memory),
            None if keys_dir is None else os.fspath(keys_dir),
            bool(keys_streamed),
            bool(keys_on_disk),
        )
        return Generation(native, self, progress, int(max_new_tokens))


class Client:
    """A client of two deployed servers (``fusefss serve``), over TLS.

    The servers must hold key bundles (``fusefss dealer``) for the model and the
    sequence length of each call: for :meth:`embed`, each text's token count (or ``seq``);
    for :meth:`generate`, sessions for the prompt's token count. Each call spends one
    bundle per text or session.

    Args:
        servers: party 0's and party 1's addresses, ``["host:port", "host:port"]``.
        tls_dir: the dealer's certificate folder (``OUT/tls``): the client's key and the
            servers' pinned certificates.
        timeout: seconds to wait for the servers' answers.
    """

    def __init__(self, servers: Sequence[str], tls_dir: Union[str, "os.PathLike[str]"], *, timeout: float = 600.0) -> None:
        self._native = _native.NativeClient(list(servers), os.fspath(tls_dir), float(timeout))
        self._models: Dict[Any, Model] = {}

    def _model(self, model: Union[str, Model], layers: Optional[int]) -> Model:
        if isinstance(model, Model):
            return model
        key = (model, layers)
        if key not in self._models:
            self._models[key] = Model(model, layers=layers)
        return self._models[key]

    def embed(
        self,
        texts: Union[str, Sequence[str]],
        model: Union[str, Model] = "bert-tiny",
        *,
        seq: Optional[int] = None,
        layers: Optional[int] = None,
        check: bool = True,
        progress: bool = True,
    ) -> EmbedResult:
        """Embed texts with the servers, one query per text (as ``fusefss query``).

        Args:
            texts: a text or a sequence of texts.
            model: the model (the servers' bundles must be for it), by name or a
                :class:`Model`.
            seq: cut or repeat each text's tokens to this many (the bundles' length).
            layers: the layers the dealer used (``--layers``).
            check: recompute the plaintext fixed-point output and report
                ``matches_plaintext``.
        """
        m = self._model(model, layers)
        items = _texts(texts)
        bar = _bar(progress and len(items) > 1, len(items), f"{m.name} queries", "text")
        runs = []
        try:
            for t in items:
                ids = m.tokenize(t, seq)
                runs.append(_forward_result(self._native.run(m._native, tokens=ids, check=check)))
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()
        return _embed_result(runs)

    def forward(
        self,
        token_ids: Optional[Sequence[int]] = None,
        inputs: Optional[np.ndarray] = None,
        model: Union[str, Model] = "bert-tiny",
        *,
        layers: Optional[int] = None,
        check: bool = True,
    ) -> ForwardResult:
        """One query on token ids or an embedded input (see :meth:`Model.forward`)."""
        m = self._model(model, layers)
        return _forward_result(self._native.run(m._native, check=check, **_inputs(m, token_ids, inputs)))

    def generate(
        self,
        prompt: str,
        model: Union[str, Model] = "smollm2",
        max_new_tokens: int = 8,
        temperature: float = 0.0,
        top_p: float = 1.0,
        chat: bool = False,
        *,
        layers: Optional[int] = None,
        check: bool = True,
        hide_length: bool = False,
        progress: bool = False,
    ) -> Generation:
        """A generation session with the servers (as ``fusefss query --generate``).

        The prompt (chat template included) must have the token count the dealer's
        sessions were dealt for, and ``max_new_tokens`` at most their new tokens.
        ``hide_length`` keeps stepping on dummy tokens after the end of turn, so that the
        servers do not learn the answer's length.
        """
        m = self._model(model, layers)
        if not m.info["generates"]:
            raise FusefssError(f"{m.name} does not generate text: use llama-tiny or smollm2")
        native = self._native.generate(
            m._native,
            prompt,
            int(max_new_tokens),
            float(temperature),
            float(top_p),
            bool(chat),
            bool(check),
            bool(hide_length),
        )
        return Generation(native, m, progress, int(max_new_tokens))


def _argv(options: Mapping[str, Any], flags: Sequence[str]) -> List[str]:
    """Command-line arguments from keyword arguments: ``elements=4096`` is
    ``--elements 4096``, a list is comma-separated, ``True`` for a flag is the flag, and
    ``None`` leaves the command's default."""
    argv: List[str] = []
    for key, value in options.items():
        if value is None:
            continue
        name = "--" + key.replace("_", "-")
        if key in flags:
            if value:
                argv.append(name)
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        argv += [name, str(value)]
    return argv


def _spec_json(spec: Union[Mapping[str, Any], str, "os.PathLike[str]"]) -> str:
    if isinstance(spec, Mapping):
        return json.dumps(spec)
    if isinstance(spec, str) and spec.lstrip().startswith("{"):
        return spec
    with open(spec, encoding="utf-8") as f:
        return f.read()


def compile_spec(
    spec: Union[Mapping[str, Any], str, "os.PathLike[str]"],
    *,
    cmp: Optional[str] = None,
    lookup: Optional[str] = None,
    split: Optional[bool] = None,
    grouped: Optional[int] = None,
) -> Dict[str, Any]:
    """Compile an operator spec (``docs/compiler.md``'s format, as ``fusefss fit`` writes
    it) and return its costs per element.

    Args:
        spec: the spec as a dict, JSON text, or a path to a JSON file.
        cmp: comparison keying, ``"one-key"`` (default) or ``"per-threshold"``.
        lookup: ``"auto"`` (default: the smallest key), ``"step-bits"``, ``"index-lut"``,
            ``"reduced-view"`` or ``"dcf"``.
        split: split full-width comparisons (``None``: the compiler's choice).
        grouped: with a split, runs of at most ``2^grouped`` high positions.

    Returns:
        ``name``, ``in_bits``, ``out_bits``, ``intervals``, ``key_bytes_per_elem`` (one
        party's), ``comm_bytes_per_elem`` (sent and received by one party), ``rounds``,
        ``queries`` (comparison points) and ``backend``.
    """
    argv = _argv({"cmp": cmp, "lookup": lookup, "split": split, "grouped": grouped}, ())
    return dict(json.loads(_native.compile_spec(_spec_json(spec), argv)))


def bench_ops(
    *,
    impl: Optional[str] = None,
    ops: Optional[Sequence[str]] = None,
    n: Optional[int] = None,
    f: Optional[int] = None,
    elements: Optional[int] = None,
    reps: Optional[int] = None,
    threads: Optional[int] = None,
    cmp: Optional[str] = None,
    lookup: Optional[str] = None,
    spec: Optional[Union[Mapping[str, Any], str, "os.PathLike[str]"]] = None,
    quantum: Optional[int] = None,
    rows: Optional[int] = None,
    slack: bool = False,
    split: Optional[bool] = None,
    grouped: Optional[int] = None,
    key_budget: Optional[int] = None,
    progress: bool = True,
) -> List[Dict[str, Any]]:
    """Measure operators: the rows ``fusefss bench ops ... --json`` prints, as dicts.

    Each argument is the command's option of the same name (``None``: its default, e.g.
    ``impl="sigma"``, 65,536 elements, 3 reps); ``spec`` adds a row for that spec (a dict,
    JSON text or a file). Each row has ``op``, ``impl``, ``n``, ``f``, ``elements``,
    ``shape``, ``key_bytes_per_elem``, ``comm_bytes_per_elem``, ``rounds``,
    ``keygen_ns_per_elem``, ``eval_ns_per_elem``, ``exact``, ``max_abs_err``, ``threads``
    and, for compiled rows, ``backend``.
    """
    argv = _argv(
        {
            "impl": impl,
            "ops": ops,
            "n": n,
            "f": f,
            "elements": elements,
            "reps": reps,
            "threads": threads,
            "cmp": cmp,
            "lookup": lookup,
            "quantum": quantum,
            "rows": rows,
            "slack": slack,
            "split": split,
            "grouped": grouped,
            "key_budget": key_budget,
        },
        ("slack",),
    )
    bar = _bar(progress, None, "bench ops", "row")

    def on_row(row: str) -> None:
        if bar is not None:
            bar.update(1)

    try:
        out = _native.bench_ops(argv, None if spec is None else _spec_json(spec), on_row if bar is not None else None)
    finally:
        if bar is not None:
            bar.close()
    return [json.loads(r) for r in out]


def bench_model(
    *,
    model: Optional[str] = None,
    seq: Optional[int] = None,
    layers: Optional[int] = None,
    impl: Optional[str] = None,
    transport: Optional[str] = None,
    net: Optional[str] = None,
    reps: Optional[int] = None,
    warmup: Optional[int] = None,
    progress: bool = True,
) -> List[Dict[str, Any]]:
    """Run a whole model securely: the rows ``fusefss bench model ... --json`` prints.

    Each argument is the command's option of the same name (``None``: its default:
    ``bert-tiny``, ``seq`` 128, ``impl="fusefss"`` (or ``"sigma"``, ``"both"``),
    ``transport="mem"`` (``"tcp"``, ``"tls"``), ``net="none"`` (``"lan"``, ``"wan"``), 3
    reps after 1 warm-up). One row per implementation with ``online_ms`` (the median),
    ``online_ms_runs``, ``keygen_ms`` (the median), ``keygen_ms_runs``, ``key_bytes``,
    ``comm_bytes``, ``rounds``, ``exact``, ``max_abs_err_vs_float``, ``cosine_vs_float`` and
    the costs by layer type.
    """
    argv = _argv(
        {
            "model": model,
            "seq": seq,
            "layers": layers,
            "impl": impl,
            "transport": transport,
            "net": net,
            "reps": reps,
            "warmup": warmup,
        },
        (),
    )
    bar = _bar(progress, None, "bench model", "run")

    def step(done: int, total: int) -> None:
        if bar is not None:
            bar.total = total
            bar.update(done - bar.n)

    try:
        out = _native.bench_model(argv, step if bar is not None else None)
    finally:
        if bar is not None:
            bar.close()
    return [json.loads(r) for r in out]

