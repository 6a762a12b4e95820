#!/usr/bin/env bash
# The Debian package (issue 41, item 1): scripts/make-deb.sh builds it from this build tree; dpkg installs it
# into a fresh root of its own (its own package database: nothing of this machine's is touched), the
# installed cumux starts the installed server on the fake driver and a GPU test program computes right
# through it; dpkg removes it and nothing of it is left. Needs dpkg and dpkg-deb (Debian's own), and root
# or fakeroot for dpkg --root.
# usage: test_deb.sh BUILD_DIR DRIVER_DIR GPU_TEST_DIR
set -u
build=$1 drv=$2 gdir=$3
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cli=/nonexistent
. "$repo/tests/server_procs.sh"
own_server_test
command -v dpkg-deb >/dev/null && command -v dpkg >/dev/null || { echo "SKIP deb: no dpkg here"; exit 0; }
as_root=()
[ "$(id -u)" -eq 0 ] || { command -v fakeroot >/dev/null && as_root=(fakeroot) || { echo "SKIP deb: neither root nor fakeroot"; exit 0; }; }
deb=$("$repo/scripts/make-deb.sh" "$build" "$tmp/out" 2>"$tmp/make.err" | tail -1)
[ -f "$deb" ] || { fail_show="$tmp/make.err"; fail "scripts/make-deb.sh made no package"; }
info=$(dpkg-deb --field "$deb" Package Version Architecture)
echo "$info" | grep -q '^Package: cumux$' || fail "the package's fields: $info"
root="$tmp/root"
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" && touch "$root/var/lib/dpkg/status" || fail "mkdir $root"
# libc6 is this machine's, not in the fresh root's database: its dependency is forced.
"${as_root[@]}" dpkg --root="$root" --log=/dev/null --force-depends -i "$deb" >"$tmp/dpkg.out" 2>&1 ||
    { fail_show="$tmp/dpkg.out"; fail "dpkg -i"; }
"${as_root[@]}" dpkg --root="$root" -s cumux 2>/dev/null | grep -q '^Status: install ok installed$' || fail "cumux not installed in $root"
for f in etc/cumux/cumuxd.conf usr/lib/systemd/system/cumuxd.service; do
    [ -f "$root/$f" ] || fail "the package has no /$f"
done
dpkg-deb --info "$deb" conffiles | grep -qx /etc/cumux/cumuxd.conf || fail "/etc/cumux/cumuxd.conf is not a conffile"
if command -v systemd-analyze >/dev/null 2>&1; then
    # Its syntax and directives, as systemd reads them (the commands it names need not be here).
    systemd-analyze verify --man=no "$root/usr/lib/systemd/system/cumuxd.service" >"$tmp/verify.out" 2>&1
    grep -v -e "not executable" -e "Command .* is not" -e "ignoring" -e "^$" "$tmp/verify.out" |
        grep -qi "unknown\|invalid\|error" && { fail_show="$tmp/verify.out"; fail "systemd-analyze verify cumuxd.service"; }
fi
cli="$root/usr/bin/cumux"
LD_LIBRARY_PATH="$drv" "$cli" start >"$tmp/start.out" 2>&1 || { fail_show="$tmp/start.out"; fail "the package's cumux start"; }
pid=$(pids_of_ours | head -1)
[ "$(readlink "/proc/$pid/exe")" = "$root/usr/sbin/cumuxd" ] || fail "the server running is not the package's"
"$cli" run -- "$gdir/gpu_vecadd" >"$tmp/vecadd.out" 2>&1 && grep -q '^PASS' "$tmp/vecadd.out" ||
    { fail_show="$tmp/vecadd.out"; fail "gpu_vecadd under the package's cumux"; }
"$cli" stop >/dev/null || fail "the package's cumux stop"
"${as_root[@]}" dpkg --root="$root" --log=/dev/null -r cumux >"$tmp/dpkg.out" 2>&1 || { fail_show="$tmp/dpkg.out"; fail "dpkg -r"; }
# What dpkg -r leaves is the conffile (dpkg --purge removes it), nothing else.
left=$(cd "$root" && find . -path ./var -prune -o -path ./etc/cumux/cumuxd.conf -prune -o -path ./etc/cumux -prune -o -path ./etc -prune -o -print | grep -v '^\.$' | head)
[ -z "$left" ] || fail "left after dpkg -r: $left"
"${as_root[@]}" dpkg --root="$root" --log=/dev/null --purge cumux >"$tmp/dpkg.out" 2>&1 || { fail_show="$tmp/dpkg.out"; fail "dpkg --purge"; }
[ -e "$root/etc/cumux/cumuxd.conf" ] && fail "/etc/cumux/cumuxd.conf left after dpkg --purge"
echo "PASS deb: $(basename "$deb") installed into a fresh root, a program ran through it, removed and purged cleanly"
