// cumux-device-plugin: the kubelet's device plugin (API v1beta1) for GPUs shared through cumuxd.
//
// It serves three resources, each a count the kubelet can hand out and a pod can ask for by size:
//   cumux.io/gpu         a share of a GPU with no size of its own (SHARES units a GPU)
//   cumux.io/gpu-memory  device memory, in units of MEMORY_UNIT (1Gi by default) of each GPU's memory
//   cumux.io/gpu-sms     SMs, one unit an SM
// A container's allocation is one CDI device per resource (written to the CDI directory) whose OCI hook,
// `cumux hook`, makes the container's cgroup a client group with that memory limit or those SMs
// reserved before its program starts (and the pod's names its labels for /metrics); the shared part
// (the shim, the pipe directory, the environment) is `cumux cdi`'s cumux.io/gpu=all. Why device counts
// and not DRA: docs/kubernetes.md.
//
// Health comes from cumuxd: a GPU whose worker met a fatal fault since the last look is Unhealthy until
// its worker serves again; every GPU is Unhealthy while no server answers. The settings file (a
// ConfigMap) is read again when it changes: the units are re-advertised and cumuxd reloads its own
// settings from it (`cumux reload`); running containers are not touched.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	api "cumux/kubernetes/api"

	"google.golang.org/grpc"
)

var (
	kubeletDir = flag.String("kubelet-dir", "/var/lib/kubelet/device-plugins", "the kubelet's device plugin directory")
	cumuxCLI   = flag.String("cumux", "/usr/bin/cumux", "the cumux CLI")
	configFile = flag.String("config", "/etc/cumux/cumuxd.conf", "the settings file (CUMUX_K8S_* for the plugin; the rest cumuxd's)")
	cdiDir     = flag.String("cdi-dir", "/var/run/cdi", "where allocations' CDI specs are written")
	poll       = flag.Duration("poll", time.Second, "how often cumuxd's health and the settings file are read")
	prefix     = flag.String("resource-prefix", "cumux.io", "the resources' domain")
	pipeDir    = flag.String("pipe-dir", "/run/cumux", "cumuxd's pipe directory (for the hook)")
)

// settings from the file: KEY=VALUE lines, # comments, values optionally quoted.
type settings struct {
	memoryUnit uint64 // bytes
	shares     int
	reloadSrv  bool
}

func parseSize(s string) (uint64, error) {
	mult := map[string]uint64{"": 1, "K": 1 << 10, "Ki": 1 << 10, "M": 1 << 20, "Mi": 1 << 20, "G": 1 << 30, "Gi": 1 << 30, "T": 1 << 40, "Ti": 1 << 40}
	i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if i < 0 {
		i = len(s)
	}
	n, err := strconv.ParseUint(s[:i], 10, 64)
	m, ok := mult[s[i:]]
	if err != nil || !ok || n == 0 {
		return 0, fmt.Errorf("%q: not a size (1Gi, 512Mi)", s)
	}
	return n * m, nil
}

func readSettings(path string) (settings, error) {
	st := settings{memoryUnit: 1 << 30, shares: 16}
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return st, nil
	} else if err != nil {
		return st, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		v = strings.Trim(strings.TrimSpace(v), `"'`)
		switch strings.TrimSpace(k) {
		case "CUMUX_K8S_MEMORY_UNIT":
			if st.memoryUnit, err = parseSize(v); err != nil {
				return st, fmt.Errorf("CUMUX_K8S_MEMORY_UNIT=%s", v)
			}
		case "CUMUX_K8S_SHARES":
			if st.shares, err = strconv.Atoi(v); err != nil || st.shares < 1 || st.shares > 1024 {
				return st, fmt.Errorf("CUMUX_K8S_SHARES=%s: not 1 to 1024", v)
			}
		}
	}
	return st, sc.Err()
}

// What cumuxd says of its GPUs (cumux top --once --json).
type gpuState struct {
	Index    int    `json:"index"`
	SMs      int    `json:"sms"`
	Total    uint64 `json:"memory_total_bytes"`
	Faults   int    `json:"faults"`
	Restarts int    `json:"restarts"`
}

func readGPUs() ([]gpuState, error) {
	cmd := exec.Command(*cumuxCLI, "top", "--once", "--json", "--interval", "0.1")
	cmd.Env = append(os.Environ(), "CUMUX_PIPE_DIRECTORY="+*pipeDir)
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("cumux top: %v", err)
	}
	var v struct {
		GPUs []gpuState `json:"gpus"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		return nil, err
	}
	return v.GPUs, nil
}

// One resource: its devices (unit IDs "gpuG-KIND-N"), served on a socket of its own.
type resource struct {
	name, kind string // cumux.io/gpu-memory, "mem"
	mu         sync.Mutex
	devices    []*api.Device
	watchers   map[chan []*api.Device]bool
	server     *grpc.Server
}

func (r *resource) set(devs []*api.Device) {
	r.mu.Lock()
	defer r.mu.Unlock()
	same := len(devs) == len(r.devices)
	for i := 0; same && i < len(devs); i++ {
		same = devs[i].ID == r.devices[i].ID && devs[i].Health == r.devices[i].Health
	}
	if same {
		return
	}
	r.devices = devs
	for w := range r.watchers {
		select {
		case w <- devs:
		default: // a slow watcher gets the newest at its next receive
			select {
			case <-w:
			default:
			}
			w <- devs
		}
	}
}

func (r *resource) GetDevicePluginOptions(context.Context, *api.Empty) (*api.DevicePluginOptions, error) {
	return &api.DevicePluginOptions{GetPreferredAllocationAvailable: true}, nil
}

func (r *resource) ListAndWatch(_ *api.Empty, s api.DevicePlugin_ListAndWatchServer) error {
	w := make(chan []*api.Device, 1)
	r.mu.Lock()
	r.watchers[w] = true
	w <- r.devices
	r.mu.Unlock()
	defer func() { r.mu.Lock(); delete(r.watchers, w); r.mu.Unlock() }()
	for {
		select {
		case devs := <-w:
			if err := s.Send(&api.ListAndWatchResponse{Devices: devs}); err != nil {
				return err
			}
		case <-s.Context().Done():
			return nil
		}
	}
}

// gpuOf("gpu3-mem-17") = 3.
func gpuOf(id string) int {
	g, _, _ := strings.Cut(strings.TrimPrefix(id, "gpu"), "-")
	n, err := strconv.Atoi(g)
	if err != nil {
		return -1
	}
	return n
}

// The units of one GPU, the one with the most available (then the lowest), must-includes first: a
// container's size is on one GPU.
func (r *resource) GetPreferredAllocation(_ context.Context, req *api.PreferredAllocationRequest) (*api.PreferredAllocationResponse, error) {
	resp := &api.PreferredAllocationResponse{}
	for _, c := range req.ContainerRequests {
		by := map[int][]string{}
		for _, id := range c.AvailableDeviceIDs {
			by[gpuOf(id)] = append(by[gpuOf(id)], id)
		}
		best := -1
		for g, ids := range by {
			if best < 0 || len(ids) > len(by[best]) || (len(ids) == len(by[best]) && g < best) {
				best = g
			}
		}
		if len(c.MustIncludeDeviceIDs) > 0 {
			best = gpuOf(c.MustIncludeDeviceIDs[0])
		}
		pick := append([]string{}, c.MustIncludeDeviceIDs...)
		seen := map[string]bool{}
		for _, id := range pick {
			seen[id] = true
		}
		ids := by[best]
		sort.Strings(ids)
		for _, id := range ids {
			if len(pick) >= int(c.AllocationSize) {
				break
			}
			if !seen[id] {
				pick = append(pick, id)
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &api.ContainerPreferredAllocationResponse{DeviceIDs: pick})
	}
	return resp, nil
}

var current struct {
	sync.Mutex
	st settings
}

// A CDI spec of one device, cumux.io/alloc=ID, whose hook gives the container's cgroup its settings.
func writeSpec(id string, hookArgs []string, env []string) (string, error) {
	spec := map[string]interface{}{
		"cdiVersion": "0.6.0",
		"kind":       *prefix + "/alloc",
		"devices": []interface{}{map[string]interface{}{
			"name": id,
			"containerEdits": map[string]interface{}{
				"env": env,
				"hooks": []interface{}{map[string]interface{}{
					"hookName": "createRuntime",
					"path":     *cumuxCLI,
					"args":     append([]string{"cumux", "hook"}, hookArgs...),
					"env":      []string{"CUMUX_PIPE_DIRECTORY=" + *pipeDir},
				}},
			},
		}},
	}
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(*cdiDir, "cumux-alloc-"+id+".json")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return "", err
	}
	return path, os.Rename(tmp, path)
}

func (r *resource) Allocate(_ context.Context, req *api.AllocateRequest) (*api.AllocateResponse, error) {
	current.Lock()
	st := current.st
	current.Unlock()
	resp := &api.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		if len(c.DevicesIds) == 0 {
			return nil, fmt.Errorf("%s: an allocation of no units", r.name)
		}
		gpu := gpuOf(c.DevicesIds[0])
		for _, id := range c.DevicesIds {
			if gpuOf(id) != gpu || !strings.Contains(id, "-"+r.kind+"-") {
				return nil, fmt.Errorf("%s: units %v are not of one GPU", r.name, c.DevicesIds)
			}
		}
		n := uint64(len(c.DevicesIds))
		var args []string
		switch r.kind {
		case "mem":
			args = []string{"--memory", strconv.FormatUint(n*st.memoryUnit, 10)}
		case "sm":
			args = []string{"--sms", strconv.FormatUint(n, 10)}
		}
		raw := make([]byte, 8)
		if _, err := rand.Read(raw); err != nil {
			return nil, err
		}
		id := r.kind + "-" + hex.EncodeToString(raw)
		if _, err := writeSpec(id, args, []string{"CUDA_VISIBLE_DEVICES=" + strconv.Itoa(gpu)}); err != nil {
			return nil, fmt.Errorf("%s: the allocation's CDI spec: %v", r.name, err)
		}
		devs := []string{*prefix + "/gpu=all", *prefix + "/alloc=" + id}
		cr := &api.ContainerAllocateResponse{
			Annotations: map[string]string{"cdi.k8s.io/cumux-" + r.kind: strings.Join(devs, ",")},
		}
		for _, d := range devs {
			cr.CdiDevices = append(cr.CdiDevices, &api.CDIDevice{Name: d})
		}
		log.Printf("%s: allocated %v: %s (%s)", r.name, c.DevicesIds, devs[1], strings.Join(args, " "))
		resp.ContainerResponses = append(resp.ContainerResponses, cr)
	}
	return resp, nil
}

func (r *resource) PreStartContainer(context.Context, *api.PreStartContainerRequest) (*api.PreStartContainerResponse, error) {
	return &api.PreStartContainerResponse{}, nil
}

// The devices of every resource from cumuxd's GPUs; faulted: GPUs that faulted since the last look.
func advertise(res []*resource, gpus []gpuState, st settings, faulted map[int]bool, up bool) {
	for _, r := range res {
		var devs []*api.Device
		for _, g := range gpus {
			health := "Healthy"
			if faulted[g.Index] || !up {
				health = "Unhealthy"
			}
			n := 0
			switch r.kind {
			case "share":
				n = st.shares
			case "mem":
				n = int(g.Total / st.memoryUnit)
			case "sm":
				n = g.SMs
			}
			for k := 0; k < n; k++ {
				devs = append(devs, &api.Device{ID: fmt.Sprintf("gpu%d-%s-%d", g.Index, r.kind, k), Health: health})
			}
		}
		r.set(devs)
	}
}

// Its socket in the kubelet's directory, served anew (a kubelet at its start removes every socket there).
func serve(r *resource) (string, error) {
	sock := "cumux-" + strings.TrimPrefix(r.name, *prefix+"/") + ".sock"
	path := filepath.Join(*kubeletDir, sock)
	if r.server != nil {
		r.server.Stop()
	}
	os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return "", err
	}
	r.server = grpc.NewServer()
	api.RegisterDevicePluginServer(r.server, r)
	go r.server.Serve(l)
	return sock, nil
}

func register(r *resource, sock string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := grpc.DialContext(ctx, "unix://"+filepath.Join(*kubeletDir, "kubelet.sock"), grpc.WithInsecure(), grpc.WithBlock())
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = api.NewRegistrationClient(conn).Register(ctx, &api.RegisterRequest{
		Version: "v1beta1", Endpoint: sock, ResourceName: r.name,
		Options: &api.DevicePluginOptions{GetPreferredAllocationAvailable: true},
	})
	return err
}

func main() {
	flag.Parse()
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	st, err := readSettings(*configFile)
	if err != nil {
		log.Fatalf("%s: %v", *configFile, err)
	}
	current.st = st
	if err := os.MkdirAll(*cdiDir, 0o755); err != nil {
		log.Fatal(err)
	}
	res := []*resource{
		{name: *prefix + "/gpu", kind: "share"},
		{name: *prefix + "/gpu-memory", kind: "mem"},
		{name: *prefix + "/gpu-sms", kind: "sm"},
	}
	gpus, err := readGPUs()
	for i := 0; err != nil && i < 30; i++ { // cumuxd may start beside it
		time.Sleep(time.Second)
		gpus, err = readGPUs()
	}
	if err != nil {
		log.Fatalf("no cumuxd answers: %v", err)
	}
	faults := map[int]int{}
	for _, g := range gpus {
		faults[g.Index] = g.Faults
	}
	for _, r := range res {
		r.watchers = map[chan []*api.Device]bool{}
	}
	advertise(res, gpus, st, nil, true)
	// Registration: again whenever the kubelet's socket is made anew (a kubelet restart forgets plugins).
	var kubeletStamp time.Time
	socks := map[*resource]string{}
	for _, r := range res {
		if socks[r], err = serve(r); err != nil {
			log.Fatalf("%s: %v", r.name, err)
		}
	}
	confStamp := time.Time{}
	if fi, err := os.Stat(*configFile); err == nil {
		confStamp = fi.ModTime()
	}
	for {
		if fi, err := os.Stat(filepath.Join(*kubeletDir, "kubelet.sock")); err == nil && fi.ModTime() != kubeletStamp {
			ok := true
			for _, r := range res {
				if _, err := os.Stat(filepath.Join(*kubeletDir, socks[r])); err != nil { // a new kubelet removed it
					if socks[r], err = serve(r); err != nil {
						log.Printf("%s: its socket: %v", r.name, err)
						ok = false
						continue
					}
					log.Printf("%s: its socket made again (the kubelet restarted)", r.name)
				}
				if err := register(r, socks[r]); err != nil {
					log.Printf("%s: registration: %v", r.name, err)
					ok = false
				} else {
					log.Printf("%s: registered with the kubelet (%s)", r.name, socks[r])
				}
			}
			if ok {
				kubeletStamp = fi.ModTime()
			}
		}
		// The settings, when the file changed (a ConfigMap's update): the units, and cumuxd's own.
		if fi, err := os.Stat(*configFile); err == nil && fi.ModTime() != confStamp {
			confStamp = fi.ModTime()
			if nst, err := readSettings(*configFile); err != nil {
				log.Printf("%s: %v: the old settings stay", *configFile, err)
			} else {
				current.Lock()
				current.st = nst
				current.Unlock()
				st = nst
				cmd := exec.Command(*cumuxCLI, "reload")
				cmd.Env = append(os.Environ(), "CUMUX_PIPE_DIRECTORY="+*pipeDir)
				out, err := cmd.CombinedOutput()
				log.Printf("settings read again (memory unit %d bytes, %d shares); cumux reload: %s%v", st.memoryUnit, st.shares,
					strings.TrimSpace(string(out)), map[bool]string{true: "", false: " (failed)"}[err == nil])
			}
		}
		now, err := readGPUs()
		faulted := map[int]bool{}
		if err == nil {
			gpus = now
			for _, g := range gpus {
				if g.Faults > faults[g.Index] {
					faulted[g.Index] = true
					log.Printf("GPU %d: a fatal fault (%d in all): its units are Unhealthy until its worker serves again", g.Index, g.Faults)
				}
				faults[g.Index] = g.Faults
			}
			advertise(res, gpus, st, faulted, true)
		} else {
			log.Printf("cumuxd: %v: every unit Unhealthy", err)
			advertise(res, gpus, st, nil, false)
		}
		time.Sleep(*poll)
	}
}
