#!/usr/bin/env python3
"""numpy f64 reference for SmolLM2-135M-Instruct (the files scripts/fetch-models.sh writes).

A plain Llama forward pass: embedding; per block RMSNorm -> q,k,v -> RoPE (HF rotate_half)
-> grouped-query causal attention -> o_proj -> residual; RMSNorm -> SiLU(gate) * up -> down
-> residual; final RMSNorm; LM head = embedding^T (tied). Greedy generation with a KV cache.

It prints and saves (results/data/smollm2-activation-stats.json):
  a) the greedy 32-token answer to "What is the capital of France?" through the chat template;
  b) activation statistics over a few ~32-token prompts, and weight magnitudes;
  c) a rough fixed-point simulation (everything rounded to multiples of 2^-f after every matmul
     and nonlinearity, weights rounded to 2^-f) for f in 10, 12, 14: teacher-forced argmax
     agreement with f64 over 32 decode steps.

Usage: python3 scripts/smollm2_reference.py [MODEL_DIR] [--out JSON]
MODEL_DIR defaults to $FUSEFSS_MODELS/smollm2, else models/smollm2 at the repository root.
Needs numpy and tokenizers (jinja2 optional: it cross-checks the hand-rendered chat prompt).
"""

import json
import os
import struct
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    dtypes = {"F32": "<f4", "F16": "<f2", "BF16": None, "F64": "<f8"}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        dt = dtypes[info["dtype"]]
        if dt is None:
            raise ValueError(f"{name}: dtype {info['dtype']} not handled")
        out[name] = np.frombuffer(data[a:b], dtype=dt).reshape(info["shape"])
    return out


class Model:
    def __init__(self, model_dir, frac_bits=None, weights=None):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.cfg = cfg = json.load(f)
        self.d = cfg["hidden_size"]
        self.n_layer = cfg["num_hidden_layers"]
        self.n_head = cfg["num_attention_heads"]
        self.n_kv = cfg["num_key_value_heads"]
        self.hd = cfg.get("head_dim", self.d // self.n_head)
        self.eps = cfg["rms_norm_eps"]
        self.theta = cfg["rope_theta"]
        self.f = frac_bits
        raw = weights if weights is not None else load_safetensors(os.path.join(model_dir, "model.safetensors"))
        self.w = {k: self.q(np.asarray(v, dtype=np.float64)) for k, v in raw.items()}
        self.lm_head = self.w.get("lm_head.weight", self.w["model.embed_tokens.weight"])
        self.inv_freq = 1.0 / (self.theta ** (np.arange(0, self.hd, 2, dtype=np.float64) / self.hd))

    def q(self, x):
        """Round to a multiple of 2^-f (identity in f64 mode)."""
        if self.f is None:
            return x
        s = float(2**self.f)
        return np.round(x * s) / s

    def rmsnorm(self, x, w, rec, kind, point):
        ms = np.mean(x * x, axis=-1, keepdims=True)
        if rec is not None:
            rec.add_residual(point, x)
            rec.add_minmax("rms_mean_square", ms)
        y = self.q(x / np.sqrt(ms + self.eps) * w)
        if rec is not None:
            rec.add(kind, y)
        return y

    def rope(self, x, pos):
        # x: [heads, T, hd]; HF rotate_half layout
        freqs = np.outer(pos, self.inv_freq)  # [T, hd/2]
        emb = np.concatenate([freqs, freqs], axis=-1)
        cos, sin = np.cos(emb), np.sin(emb)
        h = self.hd // 2
        rot = np.concatenate([-x[..., h:], x[..., :h]], axis=-1)
        return self.q(x * cos + rot * sin)

    def forward(self, ids, cache=None, rec=None):
        """ids: new tokens; cache: list of (k, v) per layer or None. Returns logits [T, vocab], cache."""
        ids = np.asarray(ids)
        T = len(ids)
        past = 0 if cache is None or cache[0] is None else cache[0][0].shape[1]
        if cache is None:
            cache = [None] * self.n_layer
        pos = np.arange(past, past + T, dtype=np.float64)
        x = self.w["model.embed_tokens.weight"][ids]
        group = self.n_head // self.n_kv
        for l in range(self.n_layer):
            p = f"model.layers.{l}."
            W = lambda n: self.w[p + n]  # noqa: E731
            h = self.rmsnorm(x, W("input_layernorm.weight"), rec, "rms_output", 2 * l)
            qh = self.q(h @ W("self_attn.q_proj.weight").T).reshape(T, self.n_head, self.hd).transpose(1, 0, 2)
            kh = self.q(h @ W("self_attn.k_proj.weight").T).reshape(T, self.n_kv, self.hd).transpose(1, 0, 2)
            vh = self.q(h @ W("self_attn.v_proj.weight").T).reshape(T, self.n_kv, self.hd).transpose(1, 0, 2)
            qh, kh = self.rope(qh, pos), self.rope(kh, pos)
            if cache[l] is not None:
                kh = np.concatenate([cache[l][0], kh], axis=1)
                vh = np.concatenate([cache[l][1], vh], axis=1)
            cache[l] = (kh, vh)
            S = kh.shape[1]
            kk = np.repeat(kh, group, axis=0)  # [n_head, S, hd]
            vv = np.repeat(vh, group, axis=0)
            scores = self.q(qh @ kk.transpose(0, 2, 1) / np.sqrt(self.hd))  # [n_head, T, S]
            mask = np.arange(S)[None, :] <= (past + np.arange(T))[:, None]  # [T, S]
            shifted = np.where(mask, scores, -np.inf)
            shifted = shifted - shifted.max(axis=-1, keepdims=True)
            e = np.exp(shifted)
            probs = self.q(e / e.sum(axis=-1, keepdims=True))
            attn = self.q(probs @ vv)  # [n_head, T, hd]
            attn = attn.transpose(1, 0, 2).reshape(T, self.n_head * self.hd)
            o = self.q(attn @ W("self_attn.o_proj.weight").T)
            if rec is not None:
                rec.add("q_rope", qh)
                rec.add("k_rope", kh[:, past:])
                rec.add("v", vh[:, past:])
                m = np.broadcast_to(mask, scores.shape)
                rec.add("attn_scores", scores[m], signed=True)
                rec.add_minmax("softmax_shifted", shifted[m])
                rec.add("attn_output", attn)
                rec.add("o_proj", o)
            x = x + o
            h = self.rmsnorm(x, W("post_attention_layernorm.weight"), rec, "rms_output", 2 * l + 1)
            g = self.q(h @ W("mlp.gate_proj.weight").T)
            u = self.q(h @ W("mlp.up_proj.weight").T)
            a = self.q(self.q(g / (1.0 + np.exp(-g))) * u)
            dn = self.q(a @ W("mlp.down_proj.weight").T)
            if rec is not None:
                rec.add("gate", g, signed=True)
                rec.add("up", u)
                rec.add("silu_gate_x_up", a)
                rec.add("down_proj", dn)
            x = x + dn
        h = self.rmsnorm(x, self.w["model.norm.weight"], rec, "final_norm", 2 * self.n_layer)
        logits = self.q(h @ self.lm_head.T)
        if rec is not None:
            rec.add("logits", logits, signed=True)
            top2 = np.sort(logits, axis=-1)[:, -2:]
            rec.add_minmax("logit_top1_minus_top2", top2[:, 1] - top2[:, 0])
        return logits, cache

    def generate(self, ids, n):
        logits, cache = self.forward(ids)
        out = []
        nxt = int(np.argmax(logits[-1]))
        for i in range(n):
            out.append(nxt)
            if i + 1 == n:
                break
            logits, cache = self.forward([nxt], cache)
            nxt = int(np.argmax(logits[-1]))
        return out


class Recorder:
    """Collects |values| per kind (for max and 99.9th percentile), signed min/max where asked."""

    def __init__(self):
        self.abs = {}
        self.signed = {}
        self.minmax = {}
        self.resid_chan_max = None  # [d] max |x| per channel over layers and positions
        self.resid_layer_chan = []  # (layer, channel-max vector)
        self.prefill_start = True  # forward() is called on whole prompts: row 0 is position 0

    def add(self, kind, x, signed=False):
        x = np.asarray(x, dtype=np.float64).ravel()
        self.abs.setdefault(kind, []).append(np.abs(x))
        if signed:
            lo, hi = self.signed.get(kind, (np.inf, -np.inf))
            self.signed[kind] = (min(lo, float(x.min())), max(hi, float(x.max())))

    def add_minmax(self, kind, x):
        x = np.asarray(x, dtype=np.float64)
        lo, hi = self.minmax.get(kind, (np.inf, -np.inf))
        self.minmax[kind] = (min(lo, float(x.min())), max(hi, float(x.max())))

    def add_residual(self, layer, x):
        # the residual stream where it enters an RMSNorm: point 2l (block l's input_layernorm),
        # 2l+1 (its post_attention_layernorm), 60 (the final norm)
        self.add("residual", x)
        self.add("residual_after_pos0", x[1:] if self.prefill_start else x)
        cm = np.abs(x).max(axis=0)
        self.resid_layer_chan.append((layer, cm))
        self.resid_chan_max = cm if self.resid_chan_max is None else np.maximum(self.resid_chan_max, cm)

    def summary(self):
        out = {}
        for kind, parts in self.abs.items():
            a = np.concatenate(parts)
            e = {"max_abs": float(a.max()), "p99_9_abs": float(np.percentile(a, 99.9)),
                 "p99_abs": float(np.percentile(a, 99)), "count": int(a.size)}
            if kind in self.signed:
                e["min"], e["max"] = self.signed[kind]
            out[kind] = e
        for kind, (lo, hi) in self.minmax.items():
            out[kind] = {"min": lo, "max": hi}
        massive = {}
        for thr in (100, 1000):
            chans = np.nonzero(self.resid_chan_max > thr)[0]
            not_final = set()
            for l, cm in self.resid_layer_chan:
                if l < max(p for p, _ in self.resid_layer_chan):
                    not_final.update(int(c) for c in np.nonzero(cm > thr)[0])
            layers = {}
            for l, cm in self.resid_layer_chan:
                for c in np.nonzero(cm > thr)[0]:
                    layers.setdefault(int(c), set()).add(l)
            massive[str(thr)] = {
                "count": int(len(chans)),
                "count_before_final_norm": len(not_final),
                "channels": {int(c): {"max_abs": float(self.resid_chan_max[c]),
                                      "stream_points": f"{min(layers[int(c)])}-{max(layers[int(c)])} ({len(layers[int(c)])} of {len(set(l for l, _ in self.resid_layer_chan))})"}
                             for c in chans},
            }
        out["residual_massive_channels"] = massive
        return out


def weight_stats(w):
    kinds = {}
    for name, a in w.items():
        kind = name.split(".")[-2] if name.startswith("model.layers.") else name
        if name.endswith("layernorm.weight"):
            kind = name.split(".")[-2]
        kinds.setdefault(kind, []).append(np.abs(np.asarray(a, dtype=np.float64)).ravel())
    out = {}
    for kind, parts in sorted(kinds.items()):
        a = np.concatenate(parts)
        nz = a[a > 0]
        share0 = lambda f: float(np.mean(nz < 2.0 ** -(f + 1)))  # noqa: E731  nonzero weights rounding to 0
        out[kind] = {"max_abs": float(a.max()), "min_nonzero_abs": float(nz.min()),
                     "p50_abs": float(np.median(a)), "zeros": int(a.size - nz.size),
                     "zero_at_f10": share0(10), "zero_at_f12": share0(12), "zero_at_f14": share0(14), "count": int(a.size)}
    return out


def chat_prompt(model_dir, messages):
    """The chat template rendered by hand (checked against jinja2 when available)."""
    s = ""
    if messages[0]["role"] != "system":
        s += "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    for m in messages:
        s += "<|im_start|>" + m["role"] + "\n" + m["content"] + "<|im_end|>\n"
    s += "<|im_start|>assistant\n"
    try:
        import jinja2
    except ImportError:
        return s
    with open(os.path.join(model_dir, "chat_template.jinja")) as f:
        r = jinja2.Template(f.read()).render(messages=messages, add_generation_prompt=True)
    assert r == s, (r, s)
    return s


PLAIN_PROMPTS = [
    "The history of the Roman Empire spans more than a thousand years, from the founding of the city "
    "to the fall of Constantinople in 1453. During this time,",
    "Photosynthesis is the process by which green plants and some other organisms use sunlight to "
    "synthesize foods from carbon dioxide and water. It generally involves",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\n"
    "print(fibonacci(10))",
]


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    out_json = os.path.join(ROOT, "results", "data", "smollm2-activation-stats.json")
    if "--out" in argv:
        out_json = argv[argv.index("--out") + 1]
        args = [a for a in args if a != out_json]
    model_dir = args[0] if args else os.path.join(os.environ.get("FUSEFSS_MODELS", os.path.join(ROOT, "models")), "smollm2")
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    t0 = time.time()
    raw = load_safetensors(os.path.join(model_dir, "model.safetensors"))
    model = Model(model_dir, weights=raw)
    result = {"model_dir": os.path.relpath(model_dir, ROOT), "config": model.cfg}
    print(f"loaded {len(raw)} tensors in {time.time() - t0:.1f} s")

    # a) greedy answer
    chat = chat_prompt(model_dir, [{"role": "user", "content": "What is the capital of France?"}])
    chat_ids = tok.encode(chat).ids
    t0 = time.time()
    gen = model.generate(chat_ids, 32)
    dt = time.time() - t0
    answer = tok.decode(gen, skip_special_tokens=False)
    eos = model.cfg["eos_token_id"]
    until_eos = gen[: gen.index(eos)] if eos in gen else gen
    print(f"\n(a) chat prompt {chat!r}\n    {len(chat_ids)} ids: {chat_ids}")
    print(f"    greedy 32 tokens ({dt:.1f} s): {gen}\n    decoded: {answer!r}")
    print(f"    answer up to eos ({eos}): {tok.decode(until_eos)!r}")
    result["greedy"] = {"prompt": chat, "prompt_ids": chat_ids, "generated_ids": gen, "decoded": answer,
                        "answer_until_eos": tok.decode(until_eos),
                        "seconds": dt}

    # b) activation statistics
    rec = Recorder()
    prompts = []
    for p in PLAIN_PROMPTS:
        ids = tok.encode(p).ids[:32]
        prompts.append({"text": tok.decode(ids), "ids": ids})
    stats_chat = chat_prompt(model_dir, [{"role": "user", "content": "Give me three tips for staying healthy."}])
    prompts.append({"text": stats_chat, "ids": tok.encode(stats_chat).ids})
    for p in prompts:
        model.forward(p["ids"], rec=rec)
    act = rec.summary()
    wst = weight_stats(raw)
    result["stats_prompts"] = prompts
    result["activations"] = act
    result["weights"] = wst
    print(f"\n(b) activation statistics over {len(prompts)} prompts ({sum(len(p['ids']) for p in prompts)} positions)")
    print(f"    {'kind':24} {'max|x|':>12} {'p99.9|x|':>12} {'p99|x|':>10}  signed min / max")
    for kind, e in act.items():
        if "max_abs" in e:
            sm = f"  {e['min']:.4g} / {e['max']:.4g}" if "min" in e else ""
            print(f"    {kind:24} {e['max_abs']:12.5g} {e['p99_9_abs']:12.5g} {e['p99_abs']:10.4g}{sm}")
    for kind, e in act.items():
        if "max_abs" not in e and "min" in e:
            print(f"    {kind:24} min {e['min']:.6g}  max {e['max']:.6g}")
    for thr, m in act["residual_massive_channels"].items():
        top = sorted(m["channels"].items(), key=lambda kv: -kv[1]["max_abs"])[:8]
        print(f"    residual channels with |x| > {thr}: {m['count']} (before the final norm: "
              f"{m['count_before_final_norm']}); largest:")
        for c, e in top:
            print(f"      channel {c:3}: max |x| {e['max_abs']:9.1f}, stream points {e['stream_points']}")
    print(f"\n    {'weight kind':26} {'max|w|':>10} {'min nonzero|w|':>15} {'median|w|':>10} {'0@f10':>7} {'0@f12':>7} {'0@f14':>7}  (share of nonzero |w| rounded to 0)")
    for kind, e in wst.items():
        print(f"    {kind:26} {e['max_abs']:10.5g} {e['min_nonzero_abs']:15.4g} {e['p50_abs']:10.4g} "
              f"{e['zero_at_f10']:7.2%} {e['zero_at_f12']:7.2%} {e['zero_at_f14']:7.2%}")

    # c) fixed-point simulation, teacher-forced over 32 decode steps
    plain_ids = prompts[0]["ids"]
    plain_gen = model.generate(plain_ids, 32)
    result["plain_greedy"] = {"prompt_ids": plain_ids, "generated_ids": plain_gen,
                              "decoded": tok.decode(plain_gen)}
    print(f"\n(c) plain prompt greedy: {tok.decode(plain_ids)!r} -> {tok.decode(plain_gen)!r}")
    seqs = {"chat": (chat_ids, gen), "plain": (plain_ids, plain_gen)}
    ref_logits = {}
    for name, (p, g) in seqs.items():
        full = list(p) + list(g[:-1])
        lg, _ = model.forward(full)
        ref_logits[name] = lg[len(p) - 1 :]
        assert list(np.argmax(ref_logits[name], axis=-1)) == list(g), "teacher-forced f64 != greedy"
        top2 = np.sort(ref_logits[name], axis=-1)[:, -2:]
        gap = top2[:, 1] - top2[:, 0]
        result.setdefault("decode_top1_minus_top2", {})[name] = {"min": float(gap.min()), "median": float(np.median(gap))}
        print(f"    {name}: top-1 minus top-2 logit over the 32 decode steps: min {gap.min():.4g}, median {np.median(gap):.4g}")
    del model
    fixed = {}
    for f in (10, 12, 14):
        qm = Model(model_dir, frac_bits=f, weights=raw)
        fixed[f] = {}
        for name, (p, g) in seqs.items():
            full = list(p) + list(g[:-1])
            lg, _ = qm.forward(full)
            lg = lg[len(p) - 1 :]
            agree = int(np.sum(np.argmax(lg, axis=-1) == np.array(g)))
            ref = ref_logits[name]
            fixed[f][name] = {"agree": agree, "of": len(g),
                              "max_abs_logit_err": float(np.max(np.abs(lg - ref))),
                              "mean_abs_logit_err": float(np.mean(np.abs(lg - ref)))}
            print(f"    f={f:2}  {name:5}: argmax agreement {agree}/{len(g)}, logit error max "
                  f"{fixed[f][name]['max_abs_logit_err']:.4g} mean {fixed[f][name]['mean_abs_logit_err']:.4g}")
        del qm
    result["fixed_point"] = fixed
    with open(out_json, "w") as fjs:
        json.dump(result, fjs, indent=1)
    print(f"\nwrote {out_json}")


if __name__ == "__main__":
    main(sys.argv[1:])
