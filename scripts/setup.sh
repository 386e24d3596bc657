#!/usr/bin/env bash
# Installs what flowc needs, pinned, idempotently:
#   setup.sh demo   build flowc (Debian packages: MLIR/LLVM 22, gRPC, protobuf,
#                   SQLite, spdlog, GoogleTest, OpenSSL, libcurl, CLI11,
#                   oneDNN, ...)
#                   and .venv (onnx, numpy, onnxruntime, pytest; grpcio,
#                   tqdm, ipython and the Python client, python/) for the
#                   example generator: what README command (1) needs;
#   setup.sh test   (the default) also Debian's torch and torchvision and
#                   .venv-export (transformers) for exporting the real models
#                   of the e2e tests, .venv-torch (the Python client next to
#                   Debian's torch, for tests/python): README command (2);
#                   and PostgreSQL 15
#                   and .venv-reapi (BuildGrid, Python >= 3.13) for the
#                   REAPI engine of the integration tests (tests/reapi/),
#                   and nginx for the HTTP remote cache (tests/remotecache/).
# Installs run without recommended packages, so everything the build needs
# is named here; scripts/check-fresh-machine.sh proves it on a bare root.
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILE=${1:-test}
case "$PROFILE" in
demo | test) ;;
*)
  echo "usage: setup.sh [demo|test]" >&2
  exit 2
  ;;
esac

# Exact versions this tree was built and tested with.
DEBIAN_PACKAGES=(
  libmlir-22-dev=1:22.1.8-1~deb12u1
  mlir-22-tools=1:22.1.8-1~deb12u1
  llvm-22-dev=1:22.1.8-1~deb12u1
  libgrpc++-dev=1.51.1-3+b1
  protobuf-compiler-grpc=1.51.1-3+b1
  libprotobuf-dev=3.21.12-3+deb12u1
  protobuf-compiler=3.21.12-3+deb12u1
  libspdlog-dev=1:1.10.0+ds-0.4
  libcli11-dev=2.1.2+ds-1
  nlohmann-json3-dev=3.11.2-2
  libsqlite3-dev=3.40.1-2+deb12u2
  sqlite3=3.40.1-2+deb12u2
  libssl-dev=3.0.22-1~deb12u2
  # The remote cache's HTTP protocol (remote/lib/HttpRemoteCache.cpp).
  libcurl4-openssl-dev=7.88.1-10+deb12u15
  libcurl4=7.88.1-10+deb12u15
  libgtest-dev=1.12.1-0.2
  libgmock-dev=1.12.1-0.2
  libdnnl-dev=2.6.3-1
  # flowcd's web UI and /metrics (daemon/lib/WebFront.cpp).
  libcpp-httplib-dev=0.11.4+ds-1+deb12u1
  # The model page's drawing: flowcd runs Graphviz's dot (daemon/lib/GraphView.cpp).
  graphviz=2.42.2-7+deb12u1
  # dnnl-config.cmake calls find_package(OpenCL); Debian's libdnnl-dev only
  # recommends these, and we install without recommends.
  ocl-icd-opencl-dev=2.3.1-1
  opencl-c-headers=3.0~2023.02.06-1
  libomp5-14=1:14.0.6-12
  cmake=3.25.1-1
  ninja-build=1.11.1-2~deb12u1
  ccache=4.8+really4.7.5-1
  # The fresh-machine check (scripts/check-fresh-machine.sh).
  debootstrap=1.0.128+nmu2+deb12u2
  pkg-config=1.8.1-1
  g++
  git
  ca-certificates
  python3-venv
)
# Exporting real models for the e2e tests (Debian's CPU-only torch, for
# /usr/bin/python3; see examples/export_torchvision.py).
TEST_PACKAGES=(
  python3-torch=1.13.1+dfsg-4
  python3-torchvision=0.14.1-2
  python3-onnx=1.12.0-2+b4
  # The libFuzzer targets (scripts/fuzz.sh, docs/fuzzing.md): clang with
  # its sanitizer and libFuzzer runtimes.
  clang=1:14.0-55.7~deb12u1
  clang-14=1:14.0.6-12
  libclang-rt-14-dev=1:14.0.6-12
  # BuildGrid's scheduler database (tests/reapi/cluster.py runs its own
  # server on a temp dir; no system service is used).
  postgresql-15=15.18-0+deb12u1
  # The HTTP remote cache of the integration tests (tests/remotecache/
  # servers.py runs its own nginx on a temp dir; no system service is used).
  nginx=1.22.1-9+deb12u12
  # The web UI's browser tests (tests/web/): headless Chromium driven by
  # Selenium through Debian's driver.
  chromium=156.0.8078.129-1~deb12u1
  chromium-driver=156.0.8078.129-1~deb12u1
)
[[ "$PROFILE" == test ]] && DEBIAN_PACKAGES+=("${TEST_PACKAGES[@]}")

missing=()
for spec in "${DEBIAN_PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}|${Version}' "${spec%%=*}" 2>/dev/null || true)
  if [[ "$status" == "install ok installed|"* ]]; then
    [[ "$spec" != *=* || "${status#*|}" == "${spec#*=}" ]] && continue
  fi
  missing+=("$spec")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO=sudo
  $SUDO apt-get update -qq
  if ! $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/tmp/flowc-apt.log 2>&1; then
    # A security update can retire a pinned version; take the archive's
    # current one rather than failing, and say so.
    echo "setup: warning: pinned versions unavailable, installing current ones (see /tmp/flowc-apt.log)" >&2
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]%%=*}"
  fi
fi

if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
fi
if ! cmp -s scripts/requirements.txt .venv/.requirements.installed; then
  echo "setup: installing Python packages into .venv"
  .venv/bin/pip install -q --disable-pip-version-check -r scripts/requirements.txt
  cp scripts/requirements.txt .venv/.requirements.installed
fi
# The Python client (python/, docs/python.md): a pure-Python wheel built
# once with .venv's pinned grpcio-tools and setuptools (the protocol's
# modules generated from proto/), installed into each venv that uses it;
# rebuilt when python/ or proto/ changes.
client_stamp=$(find python proto -type f -not -path 'python/build/*' -not -path '*.egg-info/*' \
  -not -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
client_wheel_dir=$(mktemp -d)
trap 'rm -rf "$client_wheel_dir"' EXIT
install_client() {
  local venv=$1
  [[ "$(cat "$venv/.flowc-client.installed" 2>/dev/null)" == "$client_stamp" ]] && return 0
  if ! compgen -G "$client_wheel_dir/flowc-*.whl" >/dev/null; then
    .venv/bin/pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation \
      -w "$client_wheel_dir" ./python
    rm -rf python/build python/flowc.egg-info
  fi
  echo "setup: installing the Python client into $venv"
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps --force-reinstall \
    "$client_wheel_dir"/flowc-*.whl
  echo "$client_stamp" >"$venv/.flowc-client.installed"
}
install_client .venv
if [[ "$PROFILE" == demo ]]; then
  echo "setup: dependencies ready (demo)"
  exit 0
fi
# The web UI's tests: Selenium, prometheus_client, jsonschema (into .venv).
if ! cmp -s scripts/requirements-web.txt .venv/.requirements-web.installed; then
  echo "setup: installing the web UI's test packages into .venv"
  .venv/bin/pip install -q --disable-pip-version-check -r scripts/requirements-web.txt
  cp scripts/requirements-web.txt .venv/.requirements-web.installed
fi
# Exporting the transformer models needs Hugging Face transformers next to
# Debian's torch: a venv over the system Python that sees its packages.
if [[ ! -x .venv-export/bin/python ]]; then
  /usr/bin/python3 -m venv --system-site-packages .venv-export
fi
if ! cmp -s scripts/requirements-export.txt .venv-export/.requirements.installed; then
  echo "setup: installing model-export packages into .venv-export"
  .venv-export/bin/pip install -q --disable-pip-version-check -r scripts/requirements-export.txt
  cp scripts/requirements-export.txt .venv-export/.requirements.installed
fi
# The Python client next to Debian's torch (tests/python compiles a
# torch.nn.Module there): a venv over the system Python, like .venv-export,
# with the client's own dependencies.
if [[ ! -x .venv-torch/bin/python ]]; then
  /usr/bin/python3 -m venv --system-site-packages .venv-torch
fi
if ! cmp -s scripts/requirements-torch.txt .venv-torch/.requirements.installed; then
  echo "setup: installing the Python client's packages into .venv-torch"
  .venv-torch/bin/pip install -q --disable-pip-version-check -r scripts/requirements-torch.txt
  cp scripts/requirements-torch.txt .venv-torch/.requirements.installed
fi
install_client .venv-torch
# BuildGrid, the REAPI engine of the integration tests, needs Python >= 3.13:
# pyenv's on these machines, else a python3.13 on PATH.
reapi_python=""
for candidate in /root/.pyenv/versions/3.13.*/bin/python "$(command -v python3.13 || true)"; do
  if [[ -x "$candidate" ]] && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 13))'; then
    reapi_python=$candidate
    break
  fi
done
if [[ ! -x .venv-reapi/bin/python ]]; then
  if [[ -z "$reapi_python" ]]; then
    echo "setup: error: BuildGrid needs Python >= 3.13; none found (pyenv install 3.13, or put python3.13 on PATH)" >&2
    exit 1
  fi
  "$reapi_python" -m venv .venv-reapi
fi
if ! cmp -s scripts/requirements-reapi.txt .venv-reapi/.requirements.installed; then
  echo "setup: installing BuildGrid into .venv-reapi"
  .venv-reapi/bin/pip install -q --disable-pip-version-check -r scripts/requirements-reapi.txt
  cp scripts/requirements-reapi.txt .venv-reapi/.requirements.installed
fi
echo "setup: dependencies ready"
