#!/usr/bin/env bash
# Carries a built tree's GPU check to a GPU machine that cannot build flowc
# (no MLIR, gRPC, spdlog, ...; docs/cuda.md, Checks). Packs the binaries
# scripts/gpu-check.sh runs (flowc, flowcd, flowc-worker, runtime_gpu_test,
# and the modules in build/lib), stripped, and every shared library they
# load but the C and C++ runtimes and the NVIDIA driver, into parts of at
# most --part-mib MiB (default 48: with the source tree, under a 64 MiB
# copy). Each part is a tar of xz-compressed files that
# unpacks on its own, so a copy limited in size can take one part at a
# time and unpack it straight away.
#   bash scripts/gpu-bundle.sh [--out DIR] [--part-mib N] [--level 0-9]  # here
#   bash scripts/gpu-bundle.sh --unpack [--out DIR]           # there
# Unpacking, in the source tree, puts the binaries in build/bin and
# build/lib and the libraries in build/gpu-libs, and prints the
# environment gpu-check.sh then needs:
#   LD_LIBRARY_PATH=build/gpu-libs LIBRARY_PATH=build/gpu-libs \
#     GPU_CHECK_PREBUILT=1 PYTHON=python3 bash scripts/gpu-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."

out=.gpu-bundle
part_mib=48
level=6
unpack=0
while (($#)); do
  case $1 in
  --out) out=$2; shift 2 ;;
  --part-mib) part_mib=$2; shift 2 ;;
  --level) level=$2; shift 2 ;;
  --unpack) unpack=1; shift ;;
  *) echo "gpu-bundle: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

[[ $part_mib =~ ^[1-9][0-9]*$ ]] || {
  echo "gpu-bundle: --part-mib takes a whole number of MiB above 0, not '$part_mib'" >&2
  exit 2
}
[[ $level =~ ^[0-9]$ ]] || {
  echo "gpu-bundle: --level takes an xz preset 0 to 9, not '$level'" >&2
  exit 2
}

if ((unpack)); then
  shopt -s nullglob
  parts=("$out"/part-*.tar)
  if ((${#parts[@]} == 0)); then
    echo "gpu-bundle: no $out/part-*.tar to unpack" >&2
    exit 2
  fi
  for part in "${parts[@]}"; do
    tar -xf "$part" -C .
    rm -f "$part"
  done
  # Each file was compressed alone: unpack those this copy brought.
  find build/bin build/lib build/gpu-libs -name '*.xz' -print0 2>/dev/null |
    xargs -0 -r xz -d -f
  chmod +x build/bin/* 2>/dev/null || true
  echo "gpu-bundle: unpacked ${#parts[@]} part(s); run:"
  echo "  LD_LIBRARY_PATH=$PWD/build/gpu-libs LIBRARY_PATH=$PWD/build/gpu-libs" \
    "GPU_CHECK_PREBUILT=1 PYTHON=python3 bash scripts/gpu-check.sh"
  exit 0
fi

binaries=(build/bin/flowc build/bin/flowcd build/bin/flowc-worker build/bin/runtime_gpu_test)
for binary in "${binaries[@]}"; do
  [[ -x $binary ]] || {
    echo "gpu-bundle: $binary is missing: build first (bash scripts/build.sh)" >&2
    exit 1
  }
done
shopt -s nullglob
modules=(build/lib/*.so)

# What every Linux machine with the driver has, or must not get from here:
# glibc, the C++ runtime (a newer one runs older code), the driver.
system='^(ld-linux[-a-z0-9_]*|libc|libm|libdl|librt|libpthread|libresolv|libutil|libstdc\+\+|libgcc_s|libcuda|libnvidia-[-a-z0-9_]*)\.so'
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/build/bin" "$stage/build/lib" "$stage/build/gpu-libs"
for file in "${binaries[@]}" "${modules[@]}"; do
  strip -o "$stage/$file" "$file"
done
# Every library any of them loads, by the path this machine resolves it to.
ldd "${binaries[@]}" "${modules[@]}" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
  sort -u | while read -r name path; do
  [[ $name =~ $system ]] && continue
  [[ -e $stage/build/gpu-libs/$name ]] || cp -L "$path" "$stage/build/gpu-libs/$name"
done
find "$stage" -type f -print0 | xargs -0 -P "$(nproc)" -n 1 xz -T1 "-$level"
# Only a directory this script made (or an empty one) is replaced.
if [[ -d $out && -n $(ls -A "$out") && ! -e $out/.gpu-bundle ]]; then
  echo "gpu-bundle: '$out' is not empty and not a bundle this script made; not replacing it" >&2
  exit 2
fi
rm -rf "$out"
mkdir -p "$out"
touch "$out/.gpu-bundle"

# First fit, largest files first; a file larger than a part gets one of
# its own.
# A file costs its size plus tar's header and padding (1 KiB at most);
# 20 KiB stay for the archive's end blocks and its record padding.
limit=$(((part_mib << 20) - 20480))
sizes=()
(cd "$stage" && find . -type f -name '*.xz' -printf '%s %P\n' | sort -rn) >"$stage.list"
while read -r bytes file; do
  bytes=$((bytes + 1024))
  chosen=${#sizes[@]}
  for i in "${!sizes[@]}"; do
    if ((sizes[i] + bytes <= limit)); then
      chosen=$i
      break
    fi
  done
  sizes[chosen]=$((${sizes[chosen]:-0} + bytes))
  tar -rf "$out/part-$((chosen + 1)).tar" -C "$stage" "$file"
done <"$stage.list"
rm -f "$stage.list"
ls -l "$out"/part-*.tar | awk '{printf "gpu-bundle: %s %.1f MiB\n", $9, $5 / 1048576}'
echo "gpu-bundle: ${#sizes[@]} part(s) of at most $part_mib MiB (one larger file gets its own)" \
  "in $out; carry each, then: bash scripts/gpu-bundle.sh --unpack"
