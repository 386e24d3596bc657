#!/usr/bin/env bash
# Proves that the README's first command, `bash scripts/demo.sh`, works on a
# Debian 12 machine nobody has touched: a minimal (debootstrap minbase)
# bookworm root gets a clean clone of this checkout's HEAD and runs the demo
# there as root. A package that scripts/setup.sh forgets but the build needs
# (a release once failed on fresh machines because oneDNN's CMake config wants
# OpenCL headers that Debian only recommends) fails the check with a line
# naming the Debian package.
#
#   check-fresh-machine.sh [--repo DIR] [--keep] [--verbose] [--refresh-base]
#                          [--work-dir DIR] [--cache-dir DIR] [--nice N]
#
#   --repo DIR       the checkout to test (default: the one this script is in);
#                    its HEAD is cloned, uncommitted changes are not tested
#   --keep           keep the root afterwards (WORK_DIR/run.*/root)
#   --verbose        stream the demo's output (it always goes to a log)
#   --refresh-base   debootstrap the base again even if the cached one is fresh
#   --work-dir DIR   where roots are made ($FLOWC_FRESH_WORK_DIR,
#                    default /var/tmp/flowc-fresh-machine); the last run's log
#                    is WORK_DIR/last-run.log (diagnosis: last-run-*.log)
#   --cache-dir DIR  kept between runs ($FLOWC_FRESH_CACHE_DIR, default
#                    /var/cache/flowc-fresh-machine): the pristine base root
#                    (a tarball, rebuilt after $FLOWC_FRESH_BASE_MAX_AGE_DAYS,
#                    default 14), the downloaded .debs and pip's downloads.
#                    Only downloads are cached, never an installed state.
#   --nice N         niceness of the demo in the root (default 10)
#
# Needs root (debootstrap, mount, chroot), debootstrap and unshare. Each run
# unpacks a pristine root, points its apt at the Debian archives this
# machine's apt uses, copies in this machine's network settings (resolv.conf,
# hosts, local CA certificates, pip.conf, proxy variables), shares the host's
# ccache directory (same path, and the clone sits at the checkout's own path,
# so compile commands are identical and CI's own build makes it hit), and
# runs `bash scripts/demo.sh` from the clone. Mounts are made inside private
# mount and PID namespaces that end with each command, so nothing stays
# mounted on the host (and the daemon the demo starts dies with the root);
# the root is removed with --one-file-system after checking findmnt.
# Exit status: 0 pass, 1 the check failed, 2 usage or environment.
set -euo pipefail

PROG=check-fresh-machine
SUITE=bookworm
VARIANT=minbase
NICE=10
KEEP=0
VERBOSE=0
REFRESH_BASE=0
REPO=""
WORK_DIR=${FLOWC_FRESH_WORK_DIR:-/var/tmp/flowc-fresh-machine}
CACHE_DIR=${FLOWC_FRESH_CACHE_DIR:-/var/cache/flowc-fresh-machine}
BASE_MAX_AGE_DAYS=${FLOWC_FRESH_BASE_MAX_AGE_DAYS:-14}
# Host environment the root gets too: the site's network settings and the
# knobs of the build the demo runs.
PASS_ENV=(http_proxy https_proxy ftp_proxy no_proxy all_proxy HTTP_PROXY HTTPS_PROXY
  NO_PROXY ALL_PROXY PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST PIP_CERT
  PIP_DEFAULT_TIMEOUT PIP_RETRIES SSL_CERT_FILE SSL_CERT_DIR REQUESTS_CA_BUNDLE
  CURL_CA_BUNDLE GIT_SSL_CAINFO FLOWC_JOBS)

RUN_DIR="" ROOT="" LOG="" ARCH="" MIRROR="" HOST_CCACHE_DIR="" FLAT=""
BINDS=() CHROOT_ENV=() PHASES=()

say() { printf '%s: %s\n' "$PROG" "$*"; }
fail() { say "FAILED: $*" >&2; }
die() {
  say "error: $*" >&2
  exit 2
}

usage() {
  sed -n '/^#   check-fresh/,/^#   --nice/p' "$0" | sed 's/^# \{0,1\}//'
}

parse_args() {
  while (($#)); do
    case "$1" in
    --repo) REPO=${2:?--repo needs a directory}; shift ;;
    --keep) KEEP=1 ;;
    --verbose) VERBOSE=1 ;;
    --refresh-base) REFRESH_BASE=1 ;;
    --work-dir) WORK_DIR=${2:?--work-dir needs a directory}; shift ;;
    --cache-dir) CACHE_DIR=${2:?--cache-dir needs a directory}; shift ;;
    --nice) NICE=${2:?--nice needs a number}; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
    shift
  done
}

# --- timing --------------------------------------------------------------

now_us() { local t=${EPOCHREALTIME//[.,]/}; echo "$t"; }
fmt_s() { printf '%d.%d s' $(($1 / 1000000)) $(($1 % 1000000 / 100000)); }

# phase NAME FUNCTION [ARGS...]: runs FUNCTION and records how long it took.
phase() {
  local name=$1 start; shift
  start=$(now_us)
  say "[$name] ..."
  "$@"
  local took=$(($(now_us) - start))
  PHASES+=("$name|$took")
  say "[$name] done in $(fmt_s "$took")"
}

print_timings() {
  local entry total=0
  say "timings:"
  for entry in "${PHASES[@]}"; do
    printf '  %-34s %10s\n' "${entry%%|*}" "$(fmt_s "${entry##*|}")"
    [[ "${entry%%|*}" == "  "* ]] || total=$((total + ${entry##*|}))
  done
  printf '  %-34s %10s\n' total "$(fmt_s "$total")"
}

# Prefixes each line with the seconds since it started: "[  12.3] line".
stamp_lines() {
  local start line t
  start=$(now_us)
  while IFS= read -r line || [[ -n "$line" ]]; do
    t=$((($(now_us) - start) / 100000))
    printf '[%5d.%d] %s\n' $((t / 10)) $((t % 10)) "$line"
  done
}

# --- host facts ----------------------------------------------------------

check_host() {
  [[ $(id -u) -eq 0 ]] || die "needs root (debootstrap, mount, chroot)"
  local tool
  for tool in debootstrap unshare chroot findmnt flock git tar dpkg-query apt-get; do
    command -v "$tool" >/dev/null || die "needs $tool (scripts/setup.sh installs debootstrap)"
  done
  [[ "$WORK_DIR$CACHE_DIR" != *[[:space:]]* ]] || die "work and cache dirs must not contain spaces"
  [[ "$WORK_DIR" == /* && "$CACHE_DIR" == /* ]] || die "work and cache dirs must be absolute"
  ARCH=$(dpkg --print-architecture)
}

find_repo() {
  [[ -n "$REPO" ]] || REPO=$(dirname "$(readlink -f "$0")")
  REPO=$(git -C "$REPO" rev-parse --show-toplevel) || die "$REPO is not a git checkout"
  [[ "$REPO" != *[[:space:]]* ]] || die "the checkout's path must not contain spaces"
}

# "URI SUITE COMPONENT" for each Debian archive this machine's apt uses
# (deb822 or one-line sources alike, as apt itself reads them).
debian_sources() {
  # shellcheck disable=SC2016  # apt's $(FIELD) placeholders
  apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT) $(ORIGIN)' \
    'Identifier: Packages' 'Target-Of: deb' 2>/dev/null | sort -u |
    awk -v s="$SUITE" '$4 == "Debian" || ($4 == "$(ORIGIN)" &&
      ($2 == s || $2 == s "-updates" || $2 == s "-security")) { print $1, $2, $3 }'
}

find_mirror() {
  MIRROR=$(debian_sources | awk -v s="$SUITE" '$2 == s { print $1; exit }')
  [[ -n "$MIRROR" ]] || die "no Debian '$SUITE' archive in this machine's apt sources (run apt-get update?)"
}

find_host_ccache() {
  if command -v ccache >/dev/null; then
    HOST_CCACHE_DIR=$(ccache -k cache_dir 2>/dev/null || ccache --get-config cache_dir)
    mkdir -p "$HOST_CCACHE_DIR"
    say "sharing ccache $HOST_CCACHE_DIR"
  else
    say "no ccache on this machine: the root compiles everything"
  fi
}

# Whole-run lock: the base tarball and the apt archive cache are shared.
take_lock() {
  mkdir -p "$WORK_DIR" "$CACHE_DIR/apt-archives/partial" "$CACHE_DIR/pip"
  exec {LOCK_FD}>"$CACHE_DIR/lock"
  if ! flock -n "$LOCK_FD"; then
    say "waiting for another $PROG run to finish"
    flock "$LOCK_FD"
  fi
  LOG=$WORK_DIR/last-run.log
  rm -f "$LOG" "$WORK_DIR"/last-run-*.log
}

# --- mounts and removal --------------------------------------------------

# Mount points at or below $1 in this (the host's) mount namespace, deepest
# first. Normally none: every mount is made inside a private namespace.
mounts_under() {
  findmnt -rn -o TARGET | awk -v p="$1/" 'index($0 "/", p) == 1' | sort -r
}

unmount_under() {
  local m try
  for try in 1 2 3; do
    [[ -n "$(mounts_under "$1")" ]] || return 0
    while read -r m; do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done < <(mounts_under "$1")
    sleep "$try"
  done
  [[ -z "$(mounts_under "$1")" ]]
}

# Removes a root once nothing is mounted below it. Files go first, many
# unlinks at a time: one at a time, a root's ~50,000 take minutes where each
# costs a round trip (gVisor's file proxy here).
remove_tree() {
  if ! unmount_under "$1"; then
    say "not removing $1: still mounted there: $(mounts_under "$1" | tr '\n' ' ')" >&2
    return 1
  fi
  [[ -e "$1" ]] || return 0
  find "$1" -xdev ! -type d -print0 | xargs -0 -r -P 16 -n 256 rm -f --
  rm -rf --one-file-system -- "$1"
}

# Roots of runs that were killed (runs hold the lock, so none is live);
# --keep roots stay until removed by hand.
remove_stale_runs() {
  local d
  for d in "$WORK_DIR"/run.* "$WORK_DIR"/base.*; do
    [[ -d "$d" && ! -e "$d/.keep" ]] || continue
    say "removing stale root $d"
    remove_tree "$d" || true
  done
}

cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  if ((rc > 128)); then say "interrupted; the demo's output so far: $LOG" >&2; fi
  if [[ -n "$RUN_DIR" && -d "$RUN_DIR" ]]; then
    if ((KEEP)); then
      touch "$RUN_DIR/.keep"
      say "kept the root $ROOT (remove: rm -rf --one-file-system $RUN_DIR)"
    else
      local start
      start=$(now_us)
      remove_tree "$RUN_DIR" && say "[cleanup] removed the root in $(fmt_s $(($(now_us) - start)))"
    fi
  fi
  exit "$rc"
}

# --- the root ------------------------------------------------------------

# Runs inside the private namespaces made by in_chroot (declare -f'd there).
enter_root() {
  local root=$1 n=$2
  shift 2
  mount -t proc proc "$root/proc"
  mount -t sysfs -o ro sysfs "$root/sys"
  mount --bind /dev "$root/dev"
  if [[ -d /dev/pts ]]; then mount --bind /dev/pts "$root/dev/pts"; fi
  mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$root/dev/shm"
  while ((n-- > 0)); do
    mkdir -p "$root$2"
    mount --bind "$1" "$root$2"
    shift 2
  done
  exec chroot "$root" "$@"
}

# in_chroot DIR CMD...: runs CMD in the root, in DIR, with a clean
# environment, in mount and PID namespaces of its own that end with it
# (IN_CHROOT_TIMEOUT=SECONDS bounds it).
in_chroot() {
  local dir=$1
  shift
  local -a limit=()
  if [[ -n "${IN_CHROOT_TIMEOUT:-}" ]]; then limit=(timeout "$IN_CHROOT_TIMEOUT"); fi
  "${limit[@]}" unshare --mount --propagation private --pid --fork --kill-child -- \
    bash -c "set -euo pipefail; $(declare -f enter_root); enter_root \"\$@\"" enter_root \
    "$ROOT" $((${#BINDS[@]} / 2)) "${BINDS[@]}" \
    /usr/bin/env -i -C "$dir" "${CHROOT_ENV[@]}" "$@"
}

base_tarball() { echo "$CACHE_DIR/$SUITE-$VARIANT-$ARCH.tar.gz"; }

base_is_fresh() {
  local tarball
  tarball=$(base_tarball)
  ((!REFRESH_BASE)) && [[ -f "$tarball" && "$(cat "$tarball.mirror" 2>/dev/null)" == "$MIRROR" ]] &&
    [[ -z "$(find "$tarball" -mtime "+$BASE_MAX_AGE_DAYS")" ]]
}

# The cached base: a debootstrapped root as installed, less its downloads.
ensure_base() {
  if base_is_fresh; then
    say "base: cached $(base_tarball)"
    return
  fi
  local tmp="$WORK_DIR/base.$$" tarball
  tarball=$(base_tarball)
  say "base: debootstrap --variant=$VARIANT $SUITE from $MIRROR"
  remove_tree "$tmp" && mkdir -p "$tmp"
  if ! debootstrap --variant="$VARIANT" --arch="$ARCH" --cache-dir="$CACHE_DIR/apt-archives" \
    "$SUITE" "$tmp/root" "$MIRROR" >"$tmp/debootstrap.log" 2>&1; then
    tail -n 30 "$tmp/debootstrap.log" >&2
    remove_tree "$tmp"
    die "debootstrap failed"
  fi
  find "$tmp/root/var/cache/apt/archives" "$tmp/root/var/lib/apt/lists" -maxdepth 1 -type f \
    ! -name lock -delete
  tar -C "$tmp/root" --numeric-owner --xattrs -czf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
  echo "$MIRROR" >"$tarball.mirror"
  remove_tree "$tmp"
}

# A pristine root, configured as a fresh install on this network would be.
make_root() {
  RUN_DIR=$(mktemp -d "$WORK_DIR/run.XXXXXX")
  ROOT=$RUN_DIR/root
  mkdir "$ROOT"
  tar -C "$ROOT" --numeric-owner --xattrs -xzf "$(base_tarball)"
  # The Debian archives of this machine's apt (main, updates, security).
  debian_sources | awk '{ c[$1 " " $2] = c[$1 " " $2] " " $3 }
    END { for (k in c) print "deb " k c[k] }' | sort >"$ROOT/etc/apt/sources.list"
  # Network: name service, local CA certificates (the ca-certificates package
  # setup.sh installs adds them to the bundle), pip's config, apt's proxy.
  cp /etc/resolv.conf /etc/hosts "$ROOT/etc/"
  if [[ -f /etc/pip.conf ]]; then cp /etc/pip.conf "$ROOT/etc/"; fi
  if [[ -d /usr/local/share/ca-certificates ]]; then
    cp -a /usr/local/share/ca-certificates/. "$ROOT/usr/local/share/ca-certificates/"
  fi
  apt-config dump | grep -i '::proxy' >"$ROOT/etc/apt/apt.conf.d/01proxy" || rm -f "$ROOT/etc/apt/apt.conf.d/01proxy"
  # The root is thrown away: no fsync per unpacked file.
  echo force-unsafe-io >"$ROOT/etc/dpkg/dpkg.cfg.d/01unsafe-io"

  BINDS=("$CACHE_DIR/apt-archives" /var/cache/apt/archives "$CACHE_DIR/pip" /root/.cache/pip)
  CHROOT_ENV=(HOME=/root USER=root LOGNAME=root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
  if [[ -n "$HOST_CCACHE_DIR" ]]; then
    BINDS+=("$HOST_CCACHE_DIR" "$HOST_CCACHE_DIR")
    CHROOT_ENV+=("CCACHE_DIR=$HOST_CCACHE_DIR")
  fi
  local v
  local -a names=("${PASS_ENV[@]}")
  mapfile -t -O "${#names[@]}" names < <(compgen -e | grep '^CCACHE_' | grep -vx CCACHE_DIR)
  for v in "${names[@]}"; do
    if [[ -n "${!v+set}" ]]; then CHROOT_ENV+=("$v=${!v}"); fi
  done
  say "root: $ROOT (apt: $(awk '{ print $2 "," $3 }' "$ROOT/etc/apt/sources.list" | paste -sd' '))"
}

# The checkout's HEAD, cloned to the same absolute path inside the root.
clone_checkout() {
  local sha dest=$ROOT$REPO
  sha=$(git -C "$REPO" rev-parse HEAD)
  if [[ -n "$(git -C "$REPO" status --porcelain --untracked-files=no)" ]]; then
    say "note: $REPO has uncommitted changes; testing its HEAD only"
  fi
  mkdir -p "$(dirname "$dest")"
  git clone -q --no-hardlinks --no-checkout "$REPO" "$dest"
  git -C "$dest" checkout -q --detach "$sha"
  if [[ -f "$dest/.gitmodules" ]]; then git -C "$dest" submodule update -q --init --recursive; fi
  say "clone: $(git -C "$dest" log -1 --format='%h %s' | cut -c1-100) at $REPO"
}

ccache_counters() {
  [[ -n "$HOST_CCACHE_DIR" ]] || return 0
  ccache --print-stats 2>/dev/null | awk '
    $1 ~ /^(direct|preprocessed)_cache_hit$/ { h += $2 } $1 == "cache_miss" { m += $2 }
    END { print h + 0, m + 0 }'
}

# Copies stdin to the file $1, and to stdout with --verbose.
show_if_verbose() {
  if ((VERBOSE)); then tee "$1"; else cat >"$1"; fi
}

# README command (1), exactly, as root in the clone.
DEMO_RC=0
run_demo() {
  local before after bh bm ah am
  before=$(ccache_counters)
  say "demo: bash scripts/demo.sh (log: $LOG)"
  DEMO_RC=0
  in_chroot "$REPO" nice -n "$NICE" bash scripts/demo.sh </dev/null 2>&1 |
    stamp_lines | show_if_verbose "$LOG" || DEMO_RC=$?
  after=$(ccache_counters)
  if [[ -n "$before" && -n "$after" ]]; then
    read -r bh bm <<<"$before"
    read -r ah am <<<"$after"
    say "ccache during the demo: $((ah - bh)) hits, $((am - bm)) misses (all users of the cache)"
  fi
}

# Sub-phases of the demo, from the stamps of the lines that end them
# (LABEL|first or last matching line|ERE).
DEMO_MARKS=(
  "apt-get: Debian packages|first|^setup: installing Python packages"
  "pip: .venv|first|^setup: dependencies ready"
  "cmake configure|first|^-- Build files have been written"
  "ninja flowc flowcd|last|^\[[0-9]+/[0-9]+\] |^ninja: no work to do"
  "example model + daemon demo|last|."
)
demo_timings() {
  local entry label mode re t prev=0
  for entry in "${DEMO_MARKS[@]}"; do
    IFS='|' read -r label mode re <<<"$entry"
    # Tenths of a second since the demo started.
    t=$(RE=$re MODE=$mode awk '
      { line = $0; sub(/^\[ *[0-9]+\.[0-9]\] /, "", line) }
      line ~ ENVIRON["RE"] {
        t = int(substr($0, 2, index($0, "]") - 2) * 10 + 0.5)
        if (ENVIRON["MODE"] == "first") { print t; done = 1; exit }
      }
      END { if (!done && t != "") print t }' "$LOG")
    if [[ -z "$t" ]] || ((t < prev)); then continue; fi
    if [[ "$re" == . ]] && ! demo_passed; then label="then until it failed"; fi
    PHASES+=("  $label|$(((t - prev) * 100000))")
    prev=$t
  done
}

# --- naming what is missing ---------------------------------------------

strip_stamps() { sed -E 's/^\[ *[0-9]+\.[0-9]\] //' "$1"; }

# grab KIND PCRE: "KIND<TAB>MATCH" for each match of PCRE in $FLAT.
grab() {
  grep -oP -- "$2" <<<"$FLAT" | sed "s/^/$1\t/" || true
}

# What the log says is missing, one "KIND<TAB>VALUE" a line.
missing_items() {
  local log=$1 x
  FLAT=$(strip_stamps "$log" | tr -s ' \n\t' ' ')
  {
    grab header 'fatal error: \K[^: ]+(?=: No such file or directory)'
    grab header "fatal error: '\K[^']+(?=' file not found)"
    grab lib 'cannot find -l\K[^ :]+'
    grab path 'cannot find \K/[^ :]+'
    grab so 'error while loading shared libraries: \K[^ :]+'
    grab cmd '[ :]\K[^ :/]+(?=: command not found)'
    grab cmd 'sh: [0-9]+: \K[^ :/]+(?=: not found)'
    grab cmd "env: ['‘]\K[^'’]+(?=['’]: No such file or directory)"
    grab cmd "No such file or directory: '\K[^'/]+(?=')"
    grab path "No such file or directory: '\K/[^']+(?=')"
    grab pymod "No module named '\K[^'.]+"
    grab pc "No package '\K[^']+(?=' found)"
    grab pc 'Package \K[^ ,]+(?= was not found in the pkg-config search path)'
    grab pc "Package '\K[^']+(?=', required by '[^']*', not found)"
    grab aptpkg 'you need to install the \K[^ ]+(?= package)'
    grab path 'references the file "\K/[^"]+(?=" but this file does not exist)'
    grab path 'includes non-existent path "\K/[^"]+'
    grab path "ninja: error: '\K/[^']+(?=', needed by '[^']*', missing and no known rule)"
    grab cmd 'unable to find a build program corresponding to "\K(?i)ninja(?=")' | sed 's/\t.*/\tninja/'
    grab cmd 'No CMAKE_CXX_COMPILER could be found' | sed 's/\t.*/\tc++/'
    grab cmd 'No CMAKE_C_COMPILER could be found' | sed 's/\t.*/\tcc/'
    # find_package(X CONFIG): the file names CMake looked for.
    grab cmakecfg 'package configuration file provided by "[^"]+" with any of the following names: \K[^ ]+\.cmake( [^ ]+\.cmake)*'
    # find_package(X) through a find module: the result variables it
    # missed, for the X that were required (not optional finds).
    for x in $(grab x 'CMake Error at [^ ]+ \(message\): Could NOT find \K[^ ]+' | cut -f2
      grab x 'because dependency \K[^ ]+(?= could not be found)' | cut -f2); do
      grab x "Could NOT find \Q$x\E \(missing: \K[^)]+" | cut -f2 | tr ' ' '\n' | sed '/^$/d; s/^/cmakevar\t/'
    done
    # "The following variables are used in this project, but they are set
    # to NOTFOUND", one a line.
    strip_stamps "$log" | awk '/variables are used in this project, but they are set to NOTFOUND/ { on = 1; next }
      on && /^ *[A-Za-z0-9_]+( \(ADVANCED\))?$/ { print "cmakevar\t" $1; next } on && /^--/ { on = 0 }'
  } | awk '!seen[$0]++'
}

# Host globs/paths where a missing thing would live, most likely first.
candidates() {
  local kind=$1 v=$2
  case "$kind" in
  header) printf '%s\n' "/usr/include/$v" "*/include/$v" "*/$v" ;;
  lib) printf '%s\n' "*/lib$v.so" "*/lib$v.a" ;;
  so) printf '%s\n' "*/$v" ;;
  cmd) printf '%s\n' "/usr/bin/$v" "/bin/$v" "/usr/sbin/$v" "/sbin/$v" "*/bin/$v" ;;
  path | file) printf '%s\n' "$v" ;;
  pc) printf '%s\n' "*/pkgconfig/$v.pc" ;;
  cmakecfg)
    # shellcheck disable=SC2086  # "NAME1 NAME2": the file names CMake tried
    printf '*/%s\n' $v
    ;;
  pymod) printf '%s\n' "*/python3/dist-packages/$v/__init__.py" "*/python3/dist-packages/$v.py" \
    "*/python3.*/$v/__init__.py" "*/python3.*/$v.py" "*/python3*/$v.cpython-*.so" ;;
  esac
}

# Debian package owning a host path or glob: "PACKAGE<TAB>PATH". A path
# no package names is tried again through its directory's real path
# (/lib -> /usr/lib), then as the file a symbolic link (alternatives) ends at.
host_owner() {
  local p hit
  local -a tries=("$1")
  if [[ "$1" != *'*'* && -e "$1" ]]; then
    tries+=("$(readlink -f "$(dirname "$1")")/$(basename "$1")" "$(readlink -f "$1")")
  fi
  for p in "${tries[@]}"; do
    hit=$(dpkg -S -- "$p" 2>/dev/null | grep -v '^diversion ' |
      awk -F': ' '{ split($1, p, ", "); sub(/:.*/, "", p[1]); print length($2) "\t" p[1] "\t" $2 }' |
      sort -n | head -n 1 | cut -f 2,3 || true)
    if [[ -n "$hit" ]]; then
      echo "$hit"
      return
    fi
  done
}

# The same asked of the Debian archive, with apt-file in the (failed) root,
# for what the host does not have either. Installed on first use (this is
# diagnosis: the check has failed already).
archive_owner() {
  local pattern=$1 regex c
  regex=$pattern
  for c in . + '?' '(' ')' '[' ']' '{' '}' '|' '^' '$'; do regex=${regex//"$c"/\\$c}; done
  regex=${regex//\*/.*}
  if [[ ! -e "$RUN_DIR/.apt-file-ready" ]]; then
    say "diagnose: asking the archive with apt-file (a download of its Contents index)"
    IN_CHROOT_TIMEOUT=900 in_chroot / sh -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends \
      apt-file >/dev/null && apt-file update >/dev/null' </dev/null >>"$WORK_DIR/last-run-apt-file.log" 2>&1 ||
      return 1
    touch "$RUN_DIR/.apt-file-ready"
  fi
  IN_CHROOT_TIMEOUT=300 in_chroot / apt-file search -x "^$regex\$" </dev/null 2>>"$WORK_DIR/last-run-apt-file.log" |
    awk -F': ' '{ print length($2) "\t" $1 "\t" $2 }' | sort -n | head -n 1 | cut -f 2,3
}

# For CMake result variables: configure again with --debug-find-var, which
# prints the exact locations each find_* call considered and its NAMES.
# Prints "cmakefile<TAB>PATH" then "KIND<TAB>NAME" records.
cmake_var_candidates() {
  local vars=$1 cache build
  cache=$(find "$ROOT$REPO" -maxdepth 2 -name CMakeCache.txt -printf '%T@ %p\n' 2>/dev/null |
    sort -rn | head -n 1 | cut -d' ' -f2-)
  [[ -n "$cache" && -x "$ROOT/usr/bin/cmake" ]] || return 0
  build=${cache%/CMakeCache.txt}
  build=${build#"$ROOT"}
  in_chroot "$REPO" cmake --debug-find-var="$vars" -S . -B "$build" </dev/null >"$WORK_DIR/last-run-cmake-debug-find.log" 2>&1 || true
  awk '
    /find_(path|file|library|program) called with/ { match($0, /find_[a-z]+/); kind = substr($0, RSTART + 5, RLENGTH - 5); names = 0 }
    /^ *NAMES: / { names = 1; sub(/^ *NAMES: /, "") }
    /^ *Documentation: / { names = 0 }
    names { gsub(/^ *"|" *$/, ""); if ($0 != "") namelist[n++] = kind "\t" $0 }
    /considered the following locations:/ { loc = 1; next }
    /The item was (not )?found/ { loc = 0 }
    loc && /^ *\// { sub(/^ +/, ""); print "cmake" kind "\t" $0 }
    END { for (i = 0; i < n; i++) print namelist[i] }' "$WORK_DIR/last-run-cmake-debug-find.log"
}

# The package behind one missing item: "PACKAGE<TAB>PATH", or nothing.
resolve_item() {
  local kind=$1 value=$2 c hit
  if [[ "$kind" == aptpkg ]]; then
    printf '%s\t%s\n' "$value" "named by the error message"
    return
  fi
  while read -r c; do
    hit=$(host_owner "$c")
    if [[ -n "$hit" ]]; then
      echo "$hit"
      return
    fi
  done < <(candidates "$kind" "$value")
  while read -r c; do
    hit=$(archive_owner "$c" || true)
    if [[ -n "$hit" ]]; then
      echo "$hit"
      return
    fi
  done < <(candidates "$kind" "$value" | head -n 2)
}

# One considered location of CMake's -> the file names it stands for.
expand_location() {
  local loc=$1 pre suf p
  for pre in lib ""; do
    for suf in .so .a; do
      p=${loc//"(lib)"/$pre}
      echo "${p//"(\.so|\.a)"/$suf}"
    done
  done | awk '!seen[$0]++'
}

# Resolves CMake result variables (all in one configure run): first the
# locations CMake considered that exist on this machine, else its NAMES.
resolve_cmake_vars() {
  local kind value loc c hits
  local -a exact=() names=()
  while IFS=$'\t' read -r kind value; do
    if [[ "$kind" == cmake* ]]; then exact+=("$value"); else names+=("$kind"$'\t'"$value"); fi
  done < <(cmake_var_candidates "$1")
  hits=$(for loc in "${exact[@]}"; do
    while read -r c; do
      if [[ -e "$c" ]]; then host_owner "$c"; fi
    done < <(expand_location "$loc")
  done)
  if [[ -z "$hits" ]]; then
    hits=$(for c in "${names[@]}"; do
      IFS=$'\t' read -r kind value <<<"$c"
      case "$kind" in
      library) resolve_item lib "$value" ;;
      program) resolve_item cmd "$value" ;;
      *) resolve_item header "$value" ;;
      esac
    done)
  fi
  if [[ -n "$hits" ]]; then awk -F'\t' '!seen[$1]++' <<<"$hits"; fi
}

report_package() {
  local pkg=$1 path=$2
  if [[ "$path" != /* ]]; then
    fail "the build needs Debian package '$pkg' ($path), which scripts/setup.sh does not install"
  elif dpkg-query --admindir="$ROOT/var/lib/dpkg" -W -f='${Status}' "$pkg" 2>/dev/null |
    grep -q 'ok installed'; then
    fail "the build needs $path from Debian package '$pkg', which is installed in the fresh root"
  else
    fail "the build needs Debian package '$pkg' (provides $path), which scripts/setup.sh does not install"
  fi
}

# On failure: one line per Debian package the build needed and lacked.
# Returns 1 when the log names nothing a package provides.
diagnose() {
  local kind value hit pkg path vars="" line found=0
  local -A reported=()
  local -a unresolved=()
  while IFS=$'\t' read -r kind value; do
    if [[ "$kind" == cmakevar ]]; then
      vars+="${vars:+,}$value"
      continue
    fi
    hit=$(resolve_item "$kind" "$value")
    if [[ -z "$hit" ]]; then
      unresolved+=("$value ($kind)")
      continue
    fi
    IFS=$'\t' read -r pkg path <<<"$hit"
    if [[ -z "${reported[$pkg]:-}" ]]; then
      reported[$pkg]=1
      report_package "$pkg" "$path"
      found=1
    fi
  done < <(missing_items "$LOG")
  if [[ -n "$vars" ]]; then
    while IFS=$'\t' read -r pkg path; do
      [[ -n "$pkg" && -z "${reported[$pkg]:-}" ]] || continue
      reported[$pkg]=1
      report_package "$pkg" "$path"
      found=1
    done < <(resolve_cmake_vars "$vars")
    ((found)) || unresolved+=("CMake variables $vars (see $WORK_DIR/last-run-cmake-debug-find.log)")
  fi
  for line in "${unresolved[@]}"; do
    say "the log says this is missing, and no Debian package provides it here: $line" >&2
  done
  while read -r line; do
    fail "apt-get: $line"
    found=1
  done < <(strip_stamps "$LOG" | grep -oP '^E: \K.*' | awk '!seen[$0]++' | head -n 5)
  ((found))
}

# --- verdict ---------------------------------------------------------------

demo_passed() {
  ((DEMO_RC == 0)) && strip_stamps "$LOG" |
    awk '/^== flowc submit again/ { again = 1 } again && /cache hit/ { hit = 1 } END { exit !hit }'
}

verdict() {
  if demo_passed; then
    say "PASSED: 'bash scripts/demo.sh' works on a fresh Debian $SUITE root (second submit: cache hit)"
    return 0
  fi
  say "last lines of the demo's log ($LOG):" >&2
  tail -n 40 "$LOG" | sed 's/^/  | /' >&2
  if ((DEMO_RC == 0)); then
    fail "'bash scripts/demo.sh' exited 0 but did not print 'cache hit' on the second submit"
  elif ! diagnose; then
    fail "'bash scripts/demo.sh' exited with status $DEMO_RC; nothing missing recognised (log: $LOG)"
  fi
  return 1
}

main() {
  parse_args "$@"
  check_host
  find_repo
  find_mirror
  take_lock
  remove_stale_runs
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  say "testing $REPO (HEAD $(git -C "$REPO" rev-parse --short HEAD)) on a fresh Debian $SUITE root"
  find_host_ccache
  phase "base (debootstrap, cached)" ensure_base
  phase "root (unpack pristine base)" make_root
  phase "clone" clone_checkout
  phase "demo (bash scripts/demo.sh)" run_demo
  demo_timings
  print_timings
  verdict
}

main "$@"
