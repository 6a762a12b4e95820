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
# Headers from here. The library: the machine's own libgnutls.so.30 where it has one (named to CMake, so
# that its own dependencies go with it at run time); else the carried one, with those of its dependencies
# the machine lacks put on the library path (none that the machine has is replaced, for any program).
r=$PWD/.gnutls/root/usr
lib=$r/lib/x86_64-linux-gnu
export CMAKE_INCLUDE_PATH=$r/include CMAKE_LIBRARY_PATH=$lib
sys=$(ldconfig -p | awk '$1 == "libgnutls.so.30" && /x86-64/ { print $NF; exit }')
if [ -n "$sys" ]; then
    export CUMUX_CMAKE_ARGS="${CUMUX_CMAKE_ARGS:+$CUMUX_CMAKE_ARGS }-DGNUTLS_LIBRARY=$sys"
else
    mkdir -p "$PWD/.gnutls/missing"
    for f in "$lib"/lib*.so.[0-9]*; do
        so=$(basename "$f")
        case "$so" in *.so.*.*) continue ;; esac # the soname's link, not the versioned file
        ldconfig -p | awk -v s="$so" '$1 == s { found = 1 } END { exit !found }' || ln -sf "$f" "$PWD/.gnutls/missing/$so"
    done
    export LD_LIBRARY_PATH=$PWD/.gnutls/missing${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
echo "carried GnuTLS: the machine's libgnutls.so.30: ${sys:-none}; header: $(ls /usr/include/gnutls/gnutls.h 2>/dev/null || echo none); $(. /etc/os-release; echo "$PRETTY_NAME"); $(ldd --version | head -1)"
EOF
echo "scripts/carry-gnutls.sh: .gnutls/ ($(du -sh .gnutls | cut -f1)); carry [\".gnutls\"] in the device call"
