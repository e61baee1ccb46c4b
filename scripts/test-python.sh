#!/usr/bin/env bash
# The Python package's tests: build the wheel into a fresh virtual environment, install it
# with pytest (both from PyPI; the crates from crates.io), and run python/tests against it and
# the `fusefss` binary (built here if missing: the deployed-server tests start it).
#
# The extension's build compiles the workspace's crates once more (a few minutes; cargo's
# progress is shown, pip's whole log is in $CARGO_TARGET_DIR/python-build.log). It uses the
# workspace's target folder ($CARGO_TARGET_DIR or ./target), so artifacts built alike are
# reused.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
venv="$CARGO_TARGET_DIR/python-test-venv"
log="$CARGO_TARGET_DIR/python-build.log"
rm -rf "$venv"
mkdir -p "$CARGO_TARGET_DIR"
python3 -m venv "$venv"
echo "building and installing the Python package (the Rust extension takes a few minutes)"
set +e
"$venv/bin/pip" install --disable-pip-version-check -v ./python pytest 2>&1 | tee "$log" \
    | grep -E --line-buffered '^ +(Compiling|Finished|Running|Built wheel|📦)|^Successfully|rror'
status=${PIPESTATUS[0]}
set -e
if [ "$status" -ne 0 ]; then
    echo "pip install failed ($status); the end of $log:"
    tail -n 60 "$log"
    exit "$status"
fi
[ -x "$CARGO_TARGET_DIR/release/fusefss" ] || cargo build --release -p fusefss
FUSEFSS_BIN="$CARGO_TARGET_DIR/release/fusefss" "$venv/bin/pytest" -q python/tests
