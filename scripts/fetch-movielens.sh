#!/usr/bin/env bash
# The real MovieLens-100K (GroupLens) as RecBole atomic files, from the PyPI wheel recbole==1.2.1
# (docs/own-data.md; the dataset rules are in docs/data.md's spec, section 4.4):
#
#   scripts/fetch-movielens.sh OUTDIR   -> OUTDIR/ml-100k.inter (100,000 ratings, TSV with a typed
#                                          header) and OUTDIR/ml-100k.item (1,682 movies)
#
# The wheel is fetched with `pip download --no-deps` into OUTDIR (once: a wheel already there is
# reused), checked against its sha256, and read as a zip; nothing is installed. Both files are
# checked (header, field count of every line, row count) before they replace what OUTDIR held.
# The GroupLens licence forbids redistributing the data: OUTDIR belongs under out/ (ignored by
# git), never in a commit.
#
# Exit 0: both files written. 2: usage. 3: the wheel could not be fetched (no pip, no network, no
# such version): one line on stderr, "cannot fetch recbole==1.2.1 from PyPI: ...", so a test can
# skip. 1: anything else (a wheel that is not the expected one, a write error).
# PYTHON (default python3) is the interpreter whose pip fetches and which reads the wheel.
set -euo pipefail

readonly SPEC="recbole==1.2.1"
readonly WHEEL="recbole-1.2.1-py3-none-any.whl"
readonly WHEEL_SHA256="9c9948202011f37eb0a7c6768129313f00d6403ad221ec940d5e2d5d5f33a407"
PYTHON="${PYTHON:-python3}"

if [ $# -ne 1 ] || [ -z "$1" ] || [ "$1" = -h ] || [ "$1" = --help ]; then
  echo "usage: $0 OUTDIR   (writes OUTDIR/ml-100k.inter and OUTDIR/ml-100k.item)" >&2
  exit 2
fi
out="$1"

cannot_fetch() {
  echo "cannot fetch $SPEC from PyPI: $*" >&2
  exit 3
}

command -v "$PYTHON" >/dev/null 2>&1 || cannot_fetch "$PYTHON not found"
mkdir -p "$out"

if [ ! -s "$out/$WHEEL" ]; then
  "$PYTHON" -m pip --version >/dev/null 2>&1 ||
    cannot_fetch "'$PYTHON -m pip' is not available (Debian: apt-get install python3-pip)"
  err="$(mktemp)"
  trap 'rm -f "$err"' EXIT
  # `pip download` installs nothing, so Debian's externally-managed marker does not apply. One
  # retry and a 30 s socket timeout: without a network this fails in about a minute, not five.
  if ! "$PYTHON" -m pip download --no-deps --only-binary=:all: --quiet --no-input \
      --disable-pip-version-check --retries 1 --timeout 30 -d "$out" "$SPEC" 2>"$err"; then
    # pip's last line says "No matching distribution found" whatever the cause; a network error
    # (refused, no DNS, TLS, proxy) is in its retry warnings: name that first.
    net="$(grep -oE "\[Errno [^]]*\][^'\")]*|(SSLError|ProxyError|ReadTimeoutError)[^'\")]*" "$err" |
      tail -n 1 || true)"
    reason="$(grep -v '^[[:space:]]*$' "$err" | tail -n 1 | sed 's/^ERROR: //' || true)"
    [ -z "$net" ] || reason="$net${reason:+ ($reason)}"
    rm -f "$out/$WHEEL"
    cannot_fetch "${reason:-pip download failed}"
  fi
  [ -s "$out/$WHEEL" ] || cannot_fetch "pip download wrote no $WHEEL into $out"
fi

"$PYTHON" - "$out" "$WHEEL" "$WHEEL_SHA256" <<'EOF'
import hashlib
import os
import sys
import zipfile

out, wheel, want_sha = sys.argv[1], sys.argv[2], sys.argv[3]
path = os.path.join(out, wheel)
with open(path, "rb") as f:
    sha = hashlib.sha256(f.read()).hexdigest()
if sha != want_sha:
    os.remove(path)  # a partial or foreign wheel: the next run fetches it again
    sys.exit(f"fetch-movielens: {path}: sha256 {sha}, not recbole 1.2.1's {want_sha} "
             "(deleted; run again)")

# name in the wheel -> (header line, data rows)
FILES = {
    "ml-100k.inter": ("user_id:token\titem_id:token\trating:float\ttimestamp:float", 100000),
    "ml-100k.item": ("item_id:token\tmovie_title:token_seq\trelease_year:token\tclass:token_seq",
                     1682),
}
with zipfile.ZipFile(path) as z:
    for name, (header, rows) in FILES.items():
        member = f"recbole/dataset_example/ml-100k/{name}"
        try:
            data = z.read(member)
        except KeyError:
            sys.exit(f"fetch-movielens: {path}: no {member} in the wheel")
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        problem = None
        if not lines or lines[0].decode("utf-8", "replace") != header:
            problem = f"header {lines[0][:120]!r}, expected {header!r}" if lines else "empty"
        elif len(lines) - 1 != rows:
            problem = f"{len(lines) - 1} data rows, expected {rows}"
        else:
            fields = header.count("\t") + 1
            counts = [line.count(b"\t") + 1 for line in lines]
            bad = next((n for n, c in enumerate(counts, 1) if c != fields), None)
            if bad is not None:
                problem = f"line {bad} has {counts[bad - 1]} fields, not {fields}"
        if problem:
            sys.exit(f"fetch-movielens: {path}: {member}: {problem}")
        dest = os.path.join(out, name)
        tmp = dest + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, dest)
        print(f"wrote {dest} ({rows} rows)")
EOF
