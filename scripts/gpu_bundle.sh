#!/usr/bin/env bash
# Downloads, here (Debian 12 with its mirror), the Debian packages tidal's build needs that the GPU
# machine lacks, into .gpu/debs/ (ignored by git): the device machine reaches no package registry, so
# they travel with the device call (`carry: [".gpu"]`) and scripts/gpu_check.sh unpacks them with
# `dpkg -x` into a prefix there. That machine is an Ubuntu 24.04 CUDA image (glibc 2.39, g++, CMake,
# ninja, nvcc, cuDNN and NCCL from the toolkit or PyTorch's wheels): Debian 12's libraries (glibc
# 2.36) run there. Not downloaded, because that image has them (and a second copy of libstdc++ or libc
# on the library path would break its own programs): libc6, libstdc++6, libgcc-s1, libgomp1.
#
# The list: scripts/setup.sh's build libraries (dev packages), their shared libraries, and the
# libraries those load (the closure of DT_NEEDED, checked below with readelf on this machine's copies).
# Prints the total size; the device call carries at most 64 MiB, so this stays under ~50 MiB.
# docs/cuda.md says how the proof runs.
#
# `scripts/gpu_bundle.sh BUILD_DIR` also puts BUILD_DIR's tidal and tidal_cuda_tests, stripped and
# xz-compressed, in .gpu/prebuilt/: gpu_check.sh uses them when they load there and skips its build.
# Build them for any x86-64 (no -march=native): cmake -S . -B DIR -G Ninja -DCMAKE_BUILD_TYPE=Release
# -DTIDAL_CUDA=ON -DTIDAL_NATIVE=OFF -DTIDAL_BUILD_BENCH=OFF && cmake --build DIR --target tidal tidal_cuda_tests
set -euo pipefail
cd "$(dirname "$0")/.."
prebuilt_from=${1:-}

packages=(
  # headers, CMake/pkg-config files and the unversioned .so links
  libdnnl-dev nlohmann-json3-dev libpcre2-dev zlib1g-dev libopenmpi-dev libgtest-dev libgmock-dev libbenchmark-dev
  # their shared libraries
  libdnnl2 ocl-icd-libopencl1                                   # oneDNN (links libOpenCL)
  libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3       # what libpcre2-dev's links point to
  zlib1g
  libopenmpi3 libhwloc15 libudev1 libevent-core-2.1-7 libevent-pthreads-2.1-7  # libmpi.so.40 and its NEEDED
  libbenchmark1debian
  # pkg-config (CMake's pkg_check_modules for PCRE2), in case the image has none
  pkgconf pkgconf-bin libpkgconf3
)
# Shared libraries the image is trusted to have (never bundled).
base_libs='^(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libgomp|ld-linux-x86-64)\.so'

dest=.gpu/debs
rm -rf "$dest"
mkdir -p "$dest"
(cd "$dest" && apt-get download "${packages[@]}")

# Check the closure: every library a bundled library or program needs is bundled or a base library.
check=$(mktemp -d)
trap 'rm -rf "$check"' EXIT
for deb in "$dest"/*.deb; do dpkg -x "$deb" "$check"; done
have=$(find "$check" \( -name '*.so*' -o -type f -path '*/bin/*' \) -printf '%f\n' | sort -u)
missing=""
while read -r f; do
  for n in $(readelf -d "$f" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    grep -qxF "$n" <<<"$have" || grep -qE "$base_libs" <<<"$n" || missing="$missing $n(${f#"$check"})"
  done
done < <(find "$check" -type f \( -name '*.so*' -o -path '*/bin/*' \) \
           \( -path '*/x86_64-linux-gnu/lib*' -o -path '*/bin/*' \) ! -path '*/openmpi/lib/openmpi3/*' \
           ! -path '*/fortran/*' ! -name '*mpi_java*' ! -name '*mpifh*' ! -name '*usempi*' ! -name 'libmca_common*' \
           ! -name 'liboshmem*')
if [ -n "$missing" ]; then
  echo "gpu_bundle: libraries needed but neither bundled nor in the base image:$missing" >&2
  exit 1
fi

rm -rf .gpu/prebuilt
if [ -n "$prebuilt_from" ]; then
  mkdir -p .gpu/prebuilt
  for b in tidal tidal_cuda_tests; do
    strip -o ".gpu/prebuilt/$b" "$prebuilt_from/$b"
    xz -T0 -6 ".gpu/prebuilt/$b"
  done
  if grep -q 'TIDAL_NATIVE:BOOL=ON' "$prebuilt_from/CMakeCache.txt"; then
    echo "gpu_bundle: $prebuilt_from was built with -march=native: build it with -DTIDAL_NATIVE=OFF" >&2
    exit 1
  fi
  echo "built from $(git rev-parse --short HEAD)$(git diff --quiet || echo ' + uncommitted changes') on $(date -u +%FT%TZ)" \
    >.gpu/prebuilt/BUILT
fi

bytes=$(du -cb "$dest"/*.deb .gpu/prebuilt 2>/dev/null | tail -1 | cut -f1)
echo "gpu_bundle: $(ls "$dest"/*.deb | wc -l) packages$([ -n "$prebuilt_from" ] && echo " and 2 binaries"), $((bytes / 1024 / 1024)) MiB ($bytes bytes) in .gpu"
if [ "$bytes" -gt $((50 * 1024 * 1024)) ]; then
  echo "gpu_bundle: over 50 MiB: the device call carries at most 64 MiB with the working tree" >&2
  exit 1
fi
