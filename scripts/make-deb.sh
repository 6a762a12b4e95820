#!/usr/bin/env bash
# Builds the Debian package of cumux from a build tree: `cmake --install` into a staged root under /usr, a
# control file, and dpkg-deb (Debian's own tool). Needs dpkg-deb.
#   scripts/make-deb.sh BUILD_DIR OUT_DIR      -> OUT_DIR/cumux_VERSION_ARCH.deb (its path printed last)
set -eu
build=$(cd "$1" && pwd) out=$2
mkdir -p "$out"
out=$(cd "$out" && pwd)
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
[ -n "$version" ] || { echo "make-deb: no project version in $build/CMakeCache.txt" >&2; exit 2; }
arch=$(dpkg --print-architecture)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root="$stage/root"
DESTDIR="$root" cmake --install "$build" --prefix /usr >/dev/null
mkdir -p "$root/DEBIAN" "$root/usr/share/doc/cumux"
# Settings go in /etc, kept across upgrades as the administrator changed them (a conffile).
if [ -d "$root/usr/etc" ]; then
    mv "$root/usr/etc" "$root/etc"
    (cd "$root" && find etc -type f | sed 's|^|/|') >"$root/DEBIAN/conffiles"
fi
cp "$(dirname "$0")/../LICENSE" "$root/usr/share/doc/cumux/copyright"
gzip -9n "$root"/usr/share/man/man*/*.[0-9]
# What it needs at run time: libc; cumuxd also NVIDIA's driver (libcuda.so.1), which Debian packages as
# libcuda1 (non-free) and NVIDIA's repositories otherwise: recommended, not required, so that cumux
# installs where the driver came from NVIDIA's installer.
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<CONTROL
Package: cumux
Version: $version
Architecture: $arch
Maintainer: cumux developers <cumux@localhost>
Installed-Size: $size
Depends: libc6 (>= 2.34)
Recommends: libcuda1 | nvidia-driver
Section: utils
Priority: optional
Description: open multi-process service for NVIDIA GPUs
 cumux lets several CUDA processes share one GPU with their kernels running
 at the same time, as NVIDIA MPS does, with each program's faults contained,
 per-program limits and metrics. It installs cumux (the CLI), cumuxd (the
 server) and a libcuda.so.1 of its own in /usr/lib/cumux, which only
 programs started with "cumux run" load.
CONTROL
deb="$out/cumux_${version}_${arch}.deb"
dpkg-deb --root-owner-group --build "$root" "$deb" >/dev/null
echo "$deb"
