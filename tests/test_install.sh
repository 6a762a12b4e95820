#!/usr/bin/env bash
# The installed tree (issue 41, item 1): `cmake --install` of this build into a fresh prefix gives bin/cumux,
# sbin/cumuxd, the shim alone in lib/cumux (the tracing one under it), the man pages and the bash
# completion; the installed cumux says its version, finds the installed server and shim (not the build
# tree's), starts the server on the fake driver, runs a GPU test program that computes right, and stops.
# usage: test_install.sh BUILD_DIR DRIVER_DIR GPU_TEST_DIR
set -u
build=$1 drv=$2 gdir=$3
cli=/nonexistent # server_procs.sh's stop_ours uses the installed one, set below
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
own_server_test
root="$tmp/root"
# DESTDIR: a staged root, as a package is made (nothing goes into this machine's /usr).
DESTDIR="$root" cmake --install "$build" --prefix /usr >"$tmp/install.out" 2>&1 </dev/null ||
    { fail_show="$tmp/install.out"; fail "cmake --install into $root"; }
for f in usr/bin/cumux usr/sbin/cumuxd usr/share/man/man1/cumux.1 usr/share/man/man8/cumuxd.8 \
         usr/share/bash-completion/completions/cumux; do
    [ -e "$root/$f" ] || fail "not installed: /$f"
done
shim=$(ls "$root"/usr/lib*/cumux/libcuda.so.1 2>/dev/null | head -1)
[ -n "$shim" ] || fail "the shim is not in lib/cumux: $(cd "$root" && find . -name 'libcuda*')"
[ -e "$(dirname "$shim")/trace/libcuda.so.1" ] || fail "the tracing library is not in lib/cumux/trace"
# Nothing of cumux where the system looks for NVIDIA's driver.
for d in "$root"/usr/lib "$root"/usr/lib64 "$root"/usr/lib/x86_64-linux-gnu; do
    [ -e "$d/libcuda.so.1" ] && fail "a libcuda.so.1 installed in ${d#$root}, where the system finds NVIDIA's"
done
# The installed binaries need nothing of the build tree (no RUNPATH into it).
for b in "$root/usr/bin/cumux" "$root/usr/sbin/cumuxd" "$shim"; do
    readelf -d "$b" | grep -E 'R(UN)?PATH' | grep -qF "$build" && fail "$b keeps a path into the build tree"
done
# Man pages that man can render without warnings, where groff is there.
if command -v groff >/dev/null 2>&1; then
    for m in "$root/usr/share/man/man1/cumux.1" "$root/usr/share/man/man8/cumuxd.8"; do
        w=$(groff -man -Tutf8 -ww -z "$m" 2>&1)
        [ -z "$w" ] || fail "$m: $w"
    done
fi
bash -n "$root/usr/share/bash-completion/completions/cumux" || fail "the bash completion does not parse"
cli="$root/usr/bin/cumux"
v=$("$cli" --version) || fail "cumux --version"
echo "$v" | grep -Eq '^cumux [0-9]+\.[0-9]+\.[0-9]+ \(protocol [0-9]+\)$' || fail "cumux --version: $v"
LD_LIBRARY_PATH="$drv" "$cli" start >"$tmp/start.out" 2>&1 || { fail_show="$tmp/start.out"; fail "installed cumux start"; }
pid=$(pids_of_ours | head -1)
exe=$(readlink "/proc/$pid/exe")
[ "$exe" = "$root/usr/sbin/cumuxd" ] || fail "the server running is $exe, not the installed one"
"$cli" run -- "$gdir/gpu_vecadd" >"$tmp/vecadd.out" 2>&1 && grep -q '^PASS' "$tmp/vecadd.out" ||
    { fail_show="$tmp/vecadd.out"; fail "gpu_vecadd under the installed cumux"; }
# It ran on the installed shim.
"$cli" run -- sh -c 'echo "$LD_LIBRARY_PATH"' >"$tmp/path.out" 2>&1
grep -qF "$(dirname "$shim")" "$tmp/path.out" || { fail_show="$tmp/path.out"; fail "cumux run does not put the installed shim first"; }
"$cli" stop >/dev/null || fail "installed cumux stop"
echo "PASS install: $v; /usr/bin/cumux, /usr/sbin/cumuxd, ${shim#$root}; a program ran under it"
