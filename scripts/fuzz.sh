#!/usr/bin/env bash
# Long fuzzing, apart from the test command (which runs the same properties with 300 examples):
#  1. hypothesis's "fuzz" profile over every verb (tests/unit/test_bad_input.py) and the config
#     loader (tests/unit/test_config_fuzz.py), LOADEXT_FUZZ_EXAMPLES examples per property;
#  2. atheris (libFuzzer, coverage-guided) over the protocol decoders and verbs, ATHERIS_RUNS
#     inputs seeded from the wire fixtures, if atheris installs on this Python.
# Prints hypothesis's per-property statistics and libFuzzer's final line (inputs run).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh dev
export PATH="$PWD/.venv/bin:$PATH"
export HYPOTHESIS_PROFILE=fuzz LOADEXT_FUZZ_EXAMPLES="${LOADEXT_FUZZ_EXAMPLES:-20000}"
python -m pytest -q -p no:cacheprovider --hypothesis-show-statistics \
  tests/unit/test_bad_input.py::test_random_bodies_never_get_a_5xx tests/unit/test_config_fuzz.py
if python -m pip install -q --disable-pip-version-check atheris; then
  corpus=$(mktemp -d)
  i=0
  for fixture in tests/fixtures/*.json; do  # first byte: the verb (see the harness)
    case "$fixture" in *preempt*) verb='\x03' ;; *bind*) verb='\x04' ;; *prioritize*) verb='\x01' ;; *) verb='\x00' ;; esac
    i=$((i + 1)); { printf "$verb"; cat "$fixture"; } > "$corpus/seed-$i"
  done
  python tests/fuzz/atheris_protocol.py -runs="${ATHERIS_RUNS:-1000000}" -max_len=16384 -timeout=5 \
    -print_final_stats=1 "$corpus"
else
  echo "atheris does not install on this machine: skipped (hypothesis ran above)" >&2
fi
