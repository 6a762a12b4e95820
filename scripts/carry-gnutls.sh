#!/usr/bin/env bash
# GnuTLS's headers and libraries for a machine that lacks libgnutls28-dev (the GPU machine of
# scripts/device-check.sh, which reaches no package archive): downloads Debian's packages here, unpacks them
# into .gnutls/ (ignored by git; name it in the device call's carry) and writes .gnutls/use.sh, which
# device-check.sh sources before it configures: CMake's FindGnuTLS then finds them, and programs use the
# machine's own libgnutls.so.30 at run time where it has one (the calls cumux makes exist since GnuTLS 3.4).
#   scripts/carry-gnutls.sh
set -eu
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
grep -qx '/.gnutls/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo /.gnutls/ >>.git/info/exclude; }
dl=$(mktemp -d)
trap 'rm -rf "$dl"' EXIT
(cd "$dl" && apt-get download libgnutls28-dev libgnutls30 libnettle8 libhogweed6 libgmp10 libp11-kit0 \
    libidn2-0 libunistring2 libtasn1-6 libffi8 >/dev/null 2>&1)
rm -rf .gnutls && mkdir -p .gnutls/root
for f in "$dl"/*.deb; do dpkg -x "$f" .gnutls/root; done
lib=.gnutls/root/usr/lib/x86_64-linux-gnu
rm -rf "$lib"/*.a "$lib"/libgnutls-dane* "$lib"/libgnutls-openssl* "$lib"/libgnutlsxx* .gnutls/root/usr/share
cat >.gnutls/use.sh <<'EOF'
# Sourced (from the repository's root) by scripts/device-check.sh; written by scripts/carry-gnutls.sh.
r=$PWD/.gnutls/root/usr
export CMAKE_INCLUDE_PATH=$r/include CMAKE_LIBRARY_PATH=$r/lib/x86_64-linux-gnu
# The linker resolves the carried library's own dependencies (nettle, gmp...) among the carried ones: the
# machine's may be older. At run time the machine's libgnutls.so.30 and its own dependencies are used.
export LDFLAGS="${LDFLAGS:+$LDFLAGS }-Wl,-rpath-link,$r/lib/x86_64-linux-gnu"
sed -i "s|^prefix=.*|prefix=$r|; /^Requires.private/d; /^Libs.private/d" $r/lib/x86_64-linux-gnu/pkgconfig/gnutls.pc
export PKG_CONFIG_PATH=$r/lib/x86_64-linux-gnu/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
ldconfig -p | grep -q 'libgnutls.so.30 ' || export LD_LIBRARY_PATH=$r/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
echo "carried GnuTLS: machine's libgnutls.so.30: $(ldconfig -p | grep -c 'libgnutls.so.30 '), header: $(ls /usr/include/gnutls/gnutls.h 2>/dev/null || echo none); $(. /etc/os-release; echo "$PRETTY_NAME"); $(ldd --version | head -1)"
EOF
echo "scripts/carry-gnutls.sh: .gnutls/ ($(du -sh .gnutls | cut -f1)); carry [\".gnutls\"] in the device call"
