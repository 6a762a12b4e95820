// testkubelet: the kubelet's side of the device plugin API (v1beta1), written from its documentation, for
// tests/test_kubernetes.sh: it serves Registration on DIR/kubelet.sock, dials each plugin that registers,
// and takes commands, a line each, on stdin, answering on stdout:
//   wait RESOURCE                 -> "registered RESOURCE ENDPOINT" once it registered
//   options RESOURCE              -> "options RESOURCE {json}"
//   watch RESOURCE                -> then "devices RESOURCE healthy=N unhealthy=M" at each ListAndWatch answer
//                                    ("ended watch RESOURCE: WHY" when the stream ends)
//   allocate RESOURCE N           -> GetPreferredAllocation over its healthy units not yet given out, then
//                                    Allocate of those: "allocated RESOURCE {json of the container's answer}"
//   free RESOURCE                 -> its pods are gone: every unit given out is free again: "freed RESOURCE"
//   restart now                   -> a kubelet's restart: every socket in DIR removed, the registrations
//                                    forgotten, kubelet.sock made anew: "restarted"
// Errors: "error COMMAND: WHY".
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	api "cumux/kubernetes/api"

	"google.golang.org/grpc"
)

type kubelet struct {
	dir     string
	mu      sync.Mutex
	cond    *sync.Cond
	plugins map[string]string // resource -> endpoint
	devices map[string][]*api.Device
	given   map[string]bool
	out     *bufio.Writer
	outMu   sync.Mutex
}

func (k *kubelet) say(format string, a ...interface{}) {
	k.outMu.Lock()
	defer k.outMu.Unlock()
	fmt.Fprintf(k.out, format+"\n", a...)
	k.out.Flush()
}

func (k *kubelet) Register(_ context.Context, r *api.RegisterRequest) (*api.Empty, error) {
	if r.Version != "v1beta1" {
		return nil, fmt.Errorf("version %q: this kubelet speaks v1beta1", r.Version)
	}
	if strings.Contains(r.Endpoint, "/") || !strings.Contains(r.ResourceName, "/") {
		return nil, fmt.Errorf("endpoint %q / resource %q: not a socket name / a domain/name", r.Endpoint, r.ResourceName)
	}
	k.mu.Lock()
	k.plugins[r.ResourceName] = r.Endpoint
	k.cond.Broadcast()
	k.mu.Unlock()
	return &api.Empty{}, nil
}

func (k *kubelet) dial(res string) (api.DevicePluginClient, *grpc.ClientConn, error) {
	k.mu.Lock()
	ep, ok := k.plugins[res]
	k.mu.Unlock()
	if !ok {
		return nil, nil, fmt.Errorf("%s: not registered", res)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := grpc.DialContext(ctx, "unix://"+filepath.Join(k.dir, ep), grpc.WithInsecure(), grpc.WithBlock())
	if err != nil {
		return nil, nil, err
	}
	return api.NewDevicePluginClient(conn), conn, nil
}

func (k *kubelet) watch(res string) error {
	c, _, err := k.dial(res)
	if err != nil {
		return err
	}
	s, err := c.ListAndWatch(context.Background(), &api.Empty{})
	if err != nil {
		return err
	}
	go func() {
		for {
			r, err := s.Recv()
			if err != nil {
				k.say("ended watch %s: %v", res, err) // the plugin went, or the kubelet restarted
				return
			}
			h, u := 0, 0
			for _, d := range r.Devices {
				if d.Health == "Healthy" {
					h++
				} else {
					u++
				}
			}
			k.mu.Lock()
			k.devices[res] = r.Devices
			k.cond.Broadcast()
			k.mu.Unlock()
			k.say("devices %s healthy=%d unhealthy=%d", res, h, u)
		}
	}()
	return nil
}

func (k *kubelet) allocate(res string, n int) error {
	c, conn, err := k.dial(res)
	if err != nil {
		return err
	}
	defer conn.Close()
	k.mu.Lock()
	for len(k.devices[res]) == 0 { // the watch's first answer
		k.cond.Wait()
	}
	var avail []string
	for _, d := range k.devices[res] {
		if d.Health == "Healthy" && !k.given[res+"/"+d.ID] {
			avail = append(avail, d.ID)
		}
	}
	k.mu.Unlock()
	if len(avail) < n {
		return fmt.Errorf("%s: %d units free, %d asked", res, len(avail), n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ids := avail[:n]
	if o, err := c.GetDevicePluginOptions(ctx, &api.Empty{}); err == nil && o.GetPreferredAllocationAvailable {
		p, err := c.GetPreferredAllocation(ctx, &api.PreferredAllocationRequest{ContainerRequests: []*api.ContainerPreferredAllocationRequest{
			{AvailableDeviceIDs: avail, AllocationSize: int32(n)}}})
		if err != nil {
			return err
		}
		if len(p.ContainerResponses) != 1 || len(p.ContainerResponses[0].DeviceIDs) != n {
			return fmt.Errorf("%s: the preferred allocation is not %d units: %v", res, n, p)
		}
		ids = p.ContainerResponses[0].DeviceIDs
	}
	a, err := c.Allocate(ctx, &api.AllocateRequest{ContainerRequests: []*api.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		return err
	}
	if len(a.ContainerResponses) != 1 {
		return fmt.Errorf("%s: %d container answers for one container", res, len(a.ContainerResponses))
	}
	k.mu.Lock()
	for _, id := range ids {
		k.given[res+"/"+id] = true
	}
	k.mu.Unlock()
	b, _ := json.Marshal(a.ContainerResponses[0])
	k.say("allocated %s %s", res, b)
	return nil
}

func main() {
	dir := flag.String("dir", "", "the device plugin directory (kubelet.sock is made in it)")
	flag.Parse()
	k := &kubelet{dir: *dir, plugins: map[string]string{}, devices: map[string][]*api.Device{}, given: map[string]bool{},
		out: bufio.NewWriter(os.Stdout)}
	k.cond = sync.NewCond(&k.mu)
	sock := filepath.Join(*dir, "kubelet.sock")
	listen := func() *grpc.Server {
		os.Remove(sock)
		l, err := net.Listen("unix", sock)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		s := grpc.NewServer()
		api.RegisterRegistrationServer(s, k)
		go s.Serve(l)
		return s
	}
	s := listen()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		w := strings.Fields(in.Text())
		if len(w) < 2 {
			continue
		}
		var err error
		switch w[0] {
		case "wait":
			k.mu.Lock()
			for k.plugins[w[1]] == "" {
				k.cond.Wait()
			}
			ep := k.plugins[w[1]]
			k.mu.Unlock()
			k.say("registered %s %s", w[1], ep)
		case "options":
			var c api.DevicePluginClient
			var conn *grpc.ClientConn
			if c, conn, err = k.dial(w[1]); err == nil {
				var o *api.DevicePluginOptions
				if o, err = c.GetDevicePluginOptions(context.Background(), &api.Empty{}); err == nil {
					b, _ := json.Marshal(o)
					k.say("options %s %s", w[1], b)
				}
				conn.Close()
			}
		case "watch":
			err = k.watch(w[1])
		case "free":
			k.mu.Lock()
			for key := range k.given {
				if strings.HasPrefix(key, w[1]+"/") {
					delete(k.given, key)
				}
			}
			k.mu.Unlock()
			k.say("freed %s", w[1])
		case "restart":
			s.Stop()
			socks, _ := filepath.Glob(filepath.Join(*dir, "*.sock"))
			for _, f := range socks {
				os.Remove(f)
			}
			k.mu.Lock()
			k.plugins = map[string]string{}
			k.mu.Unlock()
			time.Sleep(1100 * time.Millisecond) // a new modification time for kubelet.sock
			s = listen()
			k.say("restarted")
		case "allocate":
			n, _ := strconv.Atoi(w[len(w)-1])
			err = k.allocate(w[1], n)
		default:
			err = fmt.Errorf("no such command")
		}
		if err != nil {
			k.say("error %s: %v", in.Text(), err)
		}
	}
	s.Stop()
}
