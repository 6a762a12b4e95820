# The test kubelet and the device plugin for tests/test_kubernetes.sh and tests/test_torch_pods.sh.
# k8s_up PLUGIN KUBELET CONF [PLUGIN_ARG...]: the kubelet (its commands through fd $kin, its answers in
# $tmp/kubelet.out) on $tmp/kubelet, then the plugin (log $tmp/plugin.log) against the server of
# CUMUX_PIPE_DIRECTORY, writing CDI specs to $tmp/cdi; both pids appended to pids.
k8s_up() {
    local plugin=$1 kubelet=$2 conf=$3 i
    shift 3
    mkdir -p "$tmp/kubelet" "$tmp/cdi"
    mkfifo "$tmp/kubelet.in"
    "$kubelet" --dir "$tmp/kubelet" <"$tmp/kubelet.in" >"$tmp/kubelet.out" 2>&1 &
    pids+=($!)
    exec {kin}>"$tmp/kubelet.in"
    # The kubelet's socket first: the plugin registers once it is there.
    for ((i = 0; i < 100; i++)); do [ -S "$tmp/kubelet/kubelet.sock" ] && break; sleep 0.05; done
    "$plugin" --kubelet-dir "$tmp/kubelet" --cumux "$cli" --config "$conf" --cdi-dir "$tmp/cdi" \
        --pipe-dir "$CUMUX_PIPE_DIRECTORY" "$@" >"$tmp/plugin.log" 2>&1 &
    pids+=($!)
}
