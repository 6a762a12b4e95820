#!/usr/bin/env bash
# The package as a system service in a fresh, booted Debian 12 (issue 41's acceptance): a minimal Debian
# root made by debootstrap (cached as a tarball; a fresh copy each run), the package installed there by its
# own dpkg, the root booted with systemd (systemd-nspawn --boot); then `systemctl enable --now cumuxd` on the
# fake driver (a drop-in gives the service its library path), a GPU test program through it, the settings
# file changed and `systemctl reload cumuxd` while a program computes (it keeps running, on the same
# worker, and finishes right; programs after it get the new default), `systemctl stop`, `dpkg --purge`: no
# file of the package left, and no /run/cumux. Needs root, debootstrap, systemd-nspawn and a Debian
# mirror (CUMUX_DEBIAN_MIRROR, default http://deb.debian.org/debian) the first time; otherwise it says SKIP,
# unless CUMUX_REQUIRE_SERVICE_TEST=1 (CI), when that is a failure.
# usage: test_service.sh BUILD_DIR DRIVER_DIR GPU_TEST_DIR
set -u
build=$(cd "$1" && pwd) drv=$(cd "$2" && pwd) gdir=$(cd "$3" && pwd)
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
skip() {
    if [ "${CUMUX_REQUIRE_SERVICE_TEST:-0}" = 1 ]; then echo "FAIL: $* (CUMUX_REQUIRE_SERVICE_TEST=1)"; exit 1; fi
    echo "SKIP service: $*"
    exit 0
}
[ "$(id -u)" = 0 ] || skip "needs root"
# A sanitizer build's binaries need its runtime (libasan), which a fresh Debian root has not: the plain
# build's package is the one tested.
readelf -d "$build/server/cumuxd" 2>/dev/null | grep -q 'libasan\|libubsan' && { echo "SKIP service: a sanitizer build (its package would need libasan in the fresh root)"; exit 0; }
for c in debootstrap systemd-nspawn nsenter dpkg-deb; do command -v "$c" >/dev/null || skip "no $c here"; done
tmp=$(mktemp -d) || exit 2
root=$tmp/root nspawn=""
fail() {
    echo "FAIL service: $*"
    for f in ${fail_show:-}; do [ -f "$f" ] && { echo "---- $f ----"; tail -50 "$f"; }; done
    [ -n "${leader:-}" ] && { echo "---- journal of cumuxd ----"; nsenter -t "$leader" -a journalctl -u cumuxd --no-pager 2>&1 | tail -40; }
    exit 1
}
cleanup() {
    if [ -n "$nspawn" ] && kill -0 "$nspawn" 2>/dev/null; then
        kill -TERM "$nspawn" 2>/dev/null
        for ((i = 0; i < 100; i++)); do kill -0 "$nspawn" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$nspawn" 2>/dev/null
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

# A fresh Debian 12 root: from the cache, else debootstrap (a minute or two) into it.
cache=${CUMUX_TEST_ROOTFS:-/var/tmp/cumux-test-bookworm.tar}
if [ ! -s "$cache" ]; then
    mkdir -p "$tmp/boot-root"
    debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus bookworm "$tmp/boot-root" \
        "${CUMUX_DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$tmp/debootstrap.log" 2>&1 ||
        { tail -5 "$tmp/debootstrap.log"; skip "debootstrap could not make a Debian 12 root"; }
    tar -C "$tmp/boot-root" -cf "$cache.part" . && mv "$cache.part" "$cache" || fail "cannot cache the root in $cache"
    rm -rf "$tmp/boot-root"
fi
mkdir "$root" && tar -C "$root" -xf "$cache" || fail "cannot unpack $cache"

# The package, the fake driver for the service, installed by the root's own dpkg.
deb=$("$repo/scripts/make-deb.sh" "$build" "$tmp/out" 2>"$tmp/make.err" | tail -1)
[ -f "$deb" ] || { fail_show="$tmp/make.err"; fail "scripts/make-deb.sh made no package"; }
mkdir -p "$root/opt/cumux-test" && cp "$deb" "$root/opt/cumux-test/cumux.deb" && cp "$drv/libcuda.so.1" "$root/opt/cumux-test/" ||
    fail "cannot copy into the root"
systemd-nspawn -q -D "$root" --register=no --keep-unit --pipe dpkg -i /opt/cumux-test/cumux.deb >"$tmp/dpkg.out" 2>&1 ||
    { fail_show="$tmp/dpkg.out"; fail "dpkg -i in the fresh root"; }
mkdir -p "$root/etc/systemd/system/cumuxd.service.d"
printf '[Service]\nEnvironment=LD_LIBRARY_PATH=/opt/cumux-test CUMUX_STANDBY=0\n' >"$root/etc/systemd/system/cumuxd.service.d/fake-driver.conf"

# Boot it; the build tree is there at the same path (its test programs name their kernels' file by it).
binds=(--bind-ro="$build")
[ "${gdir#"$build"/}" != "$gdir" ] || binds+=(--bind-ro="$gdir")
systemd-nspawn -q -D "$root" --boot --register=no --keep-unit --console=pipe "${binds[@]}" >"$tmp/boot.out" 2>&1 </dev/null &
nspawn=$!
leader=""
for ((i = 0; i < 300; i++)); do
    [ -z "$leader" ] || break
    leader=$(pgrep -P "$nspawn" -x systemd | head -1)
    [ -n "$leader" ] || sleep 0.1
done
[ -n "$leader" ] || { fail_show="$tmp/boot.out" fail "the root did not boot (no systemd under systemd-nspawn)"; }
inside() { nsenter -t "$leader" -a env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin CUMUX_PIPE_DIRECTORY=/run/cumux "$@"; }
for ((i = 0; i < 300; i++)); do
    st=$(inside systemctl is-system-running 2>/dev/null)
    [ "$st" = running ] || [ "$st" = degraded ] && break
    sleep 0.1
done
[ "$st" = running ] || [ "$st" = degraded ] || fail "the booted root is $st, not running"

inside systemctl enable --now cumuxd >"$tmp/enable.out" 2>&1 || { fail_show="$tmp/enable.out"; fail "systemctl enable --now cumuxd"; }
for ((i = 0; i < 100; i++)); do inside cumux status >/dev/null 2>&1 && break; sleep 0.1; done
[ "$(inside systemctl is-active cumuxd)" = active ] || { inside systemctl status cumuxd --no-pager >"$tmp/st.out" 2>&1; fail_show="$tmp/st.out" fail "cumuxd is not active"; }
inside cumux run -- "$gdir/gpu_vecadd" >"$tmp/vecadd.out" 2>&1 && grep -q '^PASS' "$tmp/vecadd.out" ||
    { fail_show="$tmp/vecadd.out"; fail "gpu_vecadd through the service"; }

# A reload while a program computes: 40 kernels of 50 ms, checked, then it waits for a line.
mkfifo "$root/var/tmp/go"
inside sh -c "exec cumux run -- '$gdir/gpu_busy' 50 40 </var/tmp/go >/var/tmp/busy.out 2>&1" &
busy=$!
exec {go}>"$root/var/tmp/go"
server=$(inside cat /run/cumux/cumuxd.pid) worker=$(inside cat /run/cumux/cumuxd-gpu.pid)
for ((i = 0; i < 200; i++)); do inside cumux status 2>/dev/null | grep -q '^clients: 1$' && break; sleep 0.05; done
inside cumux status | grep -q '^clients: 1$' || fail "the busy program did not connect"
printf 'CUMUX_DEFAULT_MEMORY_LIMIT=64M\n' >"$root/etc/cumux/cumuxd.conf"
inside systemctl reload cumuxd >"$tmp/reload.out" 2>&1 || { fail_show="$tmp/reload.out" fail "systemctl reload cumuxd"; }
grep -q "^busy: done" "$root/var/tmp/busy.out" && fail "the program was done before the reload: the test proves nothing"
[ "$(inside cumux control get_default_device_pinned_mem_limit 0)" = 64M ] || fail "the reloaded default: $(inside cumux control get_default_device_pinned_mem_limit 0)"
[ "$(inside cat /run/cumux/cumuxd.pid)" = "$server" ] && [ "$(inside cat /run/cumux/cumuxd-gpu.pid)" = "$worker" ] ||
    fail "the reload changed the server or its worker"
for ((i = 0; i < 600; i++)); do grep -q "^busy: done" "$root/var/tmp/busy.out" && break; sleep 0.05; done
echo >&"$go"
exec {go}>&-
wait "$busy" && grep -q '^PASS' "$root/var/tmp/busy.out" ||
    { fail_show="$root/var/tmp/busy.out" fail "the program running across the reload"; }
# In the foreground (the service) the log goes to the journal.
inside journalctl -u cumuxd --no-pager >"$tmp/journal.out" 2>&1
grep -q "reloaded /etc/cumux/cumuxd.conf: default memory limit 64M" "$tmp/journal.out" || { fail_show="$tmp/journal.out" fail "the journal has no reload"; }

# Stop, uninstall: nothing of the package left.
files=$(inside dpkg -L cumux | sort)
inside systemctl disable --now cumuxd >"$tmp/stop.out" 2>&1 || { fail_show="$tmp/stop.out" fail "systemctl disable --now cumuxd"; }
[ "$(inside systemctl is-active cumuxd)" != active ] || fail "cumuxd still active after the stop"
inside test -e /run/cumux && fail "/run/cumux left after the stop"
inside dpkg --purge cumux >"$tmp/purge.out" 2>&1 || { fail_show="$tmp/purge.out" fail "dpkg --purge cumux"; }
for f in $files; do
    [ -f "$root$f" ] && fail "left after dpkg --purge: $f"
done
for d in /usr/lib/cumux /etc/cumux /usr/share/doc/cumux; do [ -e "$root$d" ] && fail "left after dpkg --purge: $d"; done
inside systemctl daemon-reload
inside systemctl cat cumuxd >/dev/null 2>&1 && fail "systemd still knows cumuxd.service after the purge"
inside systemctl poweroff >/dev/null 2>&1
for ((i = 0; i < 200; i++)); do kill -0 "$nspawn" 2>/dev/null || break; sleep 0.1; done
echo "PASS service: $(basename "$deb") installed in a booted Debian 12, started by systemd, a program ran, a reload under a running program kept it, stopped and purged"
