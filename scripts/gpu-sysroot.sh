#!/usr/bin/env bash
# scripts/gpu-sysroot.sh: the Debian 12 packages a SIFT_MINIMAL build needs (absl, yaml-cpp, CLI11,
# nlohmann-json, zlib, oneDNN with its OpenMP and OpenCL loader libraries, GTest/GMock), unpacked into one folder
# that can travel to a machine without them (the GPU machine of issue 6: CMake, ninja, a compiler
# and CUDA, no Debian -dev packages, nothing installable). See scripts/README.md for its use.
#
#   scripts/gpu-sysroot.sh [OUT_DIR]       (default: .gpu-sysroot in the repository root)
#
# Writes OUT_DIR/root/ (the unpacked packages: root/usr/{include,lib,share}) and
# OUT_DIR/sysroot.tar.gz (root/ packed, what a device call carries: the unpacked tree is over the
# limit because of oneDNN's 40 MB library). Fails if the archive is over 40 MiB.
# Needs apt-get (with this machine's Debian 12 package lists) and dpkg-deb; no root.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$repo/.gpu-sysroot}
limit_mib=40

# Runtime libraries and their -dev packages. oneDNN (kernels/CMakeLists.txt finds it by path) links
# libgomp (OpenMP, also linked by sift itself) and the OpenCL ICD loader (its unused GPU runtime).
packages=(
  libabsl20220623 libabsl-dev
  libyaml-cpp0.7 libyaml-cpp-dev
  libcli11-dev
  nlohmann-json3-dev
  zlib1g zlib1g-dev
  libdnnl2 libdnnl-dev libgomp1 ocl-icd-libopencl1
  libgtest-dev libgmock-dev
)

debs=$(mktemp -d)
trap 'rm -rf "$debs"' EXIT
echo "gpu-sysroot: downloading ${#packages[@]} packages"
(cd "$debs" && apt-get download -q "${packages[@]}" 2>&1 | grep -v '^Get:' || true)
n=$(ls "$debs"/*.deb 2>/dev/null | wc -l)
if [ "$n" -ne "${#packages[@]}" ]; then
  echo "gpu-sysroot: expected ${#packages[@]} .deb files, got $n (apt-get update?)" >&2
  exit 1
fi

rm -rf "$out/root" "$out/sysroot.tar.gz"
mkdir -p "$out/root"
root=$out/root
for d in "$debs"/*.deb; do dpkg-deb -x "$d" "$root"; done

# Debian 12 puts some libraries in /lib (zlib): merge into /usr/lib as usrmerge does.
if [ -d "$root/lib" ]; then
  cp -a "$root/lib/." "$root/usr/lib/"
  rm -rf "$root/lib"
fi
# Absolute symbolic links (libz.so -> /lib/...) would point out of the tree: make them relative.
while IFS= read -r link; do
  target=$(readlink "$link")
  case "$target" in
    /*)
      target=${target#/lib/}
      target=${target#/usr/lib/}
      [ "$target" = "$(readlink "$link")" ] && { echo "gpu-sysroot: unexpected link $link -> $target" >&2; exit 1; }
      rel=$(realpath --relative-to="$(dirname "$link")" -m "$root/usr/lib/$target")
      ln -sfn "$rel" "$link"
      ;;
  esac
done < <(find "$root" -type l)

# What the build does not use: documentation, static libraries that have a shared twin (absl,
# zlib; GTest/GMock are static only and stay).
rm -rf "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/lintian" "$root/usr/share/bug"
find "$root" -name 'libabsl_*.a' -delete
rm -f "$root"/usr/lib/x86_64-linux-gnu/libz.a
# Dangling links left by the removals above.
find "$root" -xtype l -delete

# Every library the minimal build links must be there.
for f in usr/lib/x86_64-linux-gnu/libdnnl.so usr/include/oneapi/dnnl/dnnl.h \
         usr/lib/x86_64-linux-gnu/libgomp.so.1 usr/lib/x86_64-linux-gnu/libOpenCL.so.1 \
         usr/lib/x86_64-linux-gnu/libz.so usr/include/zlib.h \
         usr/lib/x86_64-linux-gnu/cmake/absl/abslConfig.cmake \
         usr/lib/x86_64-linux-gnu/cmake/yaml-cpp/yaml-cpp-config.cmake \
         usr/share/cmake/CLI11/CLI11Config.cmake usr/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake \
         usr/lib/x86_64-linux-gnu/cmake/GTest/GTestConfig.cmake \
         usr/lib/x86_64-linux-gnu/libgtest.a usr/lib/x86_64-linux-gnu/libgmock.a; do
  if [ ! -e "$root/$f" ]; then
    echo "gpu-sysroot: $f is missing from the unpacked packages" >&2
    exit 1
  fi
done

tar -C "$out" -czf "$out/sysroot.tar.gz" root
unpacked=$(du -sb "$root" | cut -f1)
packed=$(stat -c %s "$out/sysroot.tar.gz")
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
echo "gpu-sysroot: $root: $(mib "$unpacked") unpacked"
echo "gpu-sysroot: $out/sysroot.tar.gz: $(mib "$packed") (the part that travels; limit $limit_mib MiB)"
if [ "$packed" -gt $((limit_mib * 1048576)) ]; then
  echo "gpu-sysroot: $out/sysroot.tar.gz is over $limit_mib MiB" >&2
  exit 1
fi
