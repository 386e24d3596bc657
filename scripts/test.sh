#!/usr/bin/env bash
# README command (2): set up, build, and run every test: GoogleTest unit and
# integration suites (ctest), the fuzz targets' short runs and regression
# inputs (fuzz.sh --ci) and the end-to-end pytest suites (the Python client's
# too).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
bash scripts/build.sh
# Tests start their own daemons on temp sockets; make sure a user's
# environment does not point them elsewhere.
unset FLOWC_CACHE_DIR FLOWC_SOCKET
(cd build && ctest --output-on-failure -j 2)
bash scripts/fuzz.sh --ci
# Temp dirs of passed tests go when the run ends (GBs of exported models
# and artifacts); a failed test's stay for a look. tests/reapi starts its
# own REAPI engine (BuildGrid on PostgreSQL, from .venv-reapi) and stops it;
# tests/remotecache its own nginx and BuildGrid caches; tests/python builds
# the Python client from python/ and runs it against its own daemons (the
# torch test in .venv-torch).
.venv/bin/python -m pytest -q --durations=15 -o tmp_path_retention_policy=failed \
  -o tmp_path_retention_count=1 tests/e2e tests/reapi tests/remotecache tests/python
