// What the stand-in does for an IOChaos or a BlockChaos: each container whose data volume the
// harness put on faultfs (rsdrill's own fault-injecting filesystem) gets the injection as
// faultfs rules on that mount, set before the call is answered and cleared on recovery, as the
// daemon's toda and chaos-driver act before answering. A container the harness named no volume
// for is only recorded.
package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chaos-mesh/chaos-mesh/api/v1alpha1"
)

const controlTimeout = 5 * time.Second

type injection struct {
	mount string
	names []string // its faultfs rules
}

type volumes struct {
	file  string // JSON: container id → the faultfs mount point its data volume is
	netns string // the network namespace the faultfs daemons' control sockets are in
	mu    sync.Mutex
	made  map[string]injection // by the injection's key (its instance uid, or block id)
}

func (v *volumes) mountOf(container string) (string, error) {
	if v.file == "" {
		return "", nil
	}
	raw, err := os.ReadFile(v.file)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	mounts := map[string]string{}
	if err := json.Unmarshal(raw, &mounts); err != nil {
		return "", fmt.Errorf("%s: %w", v.file, err)
	}
	return mounts[container], nil
}

// apply sets `rules` on the container's volume as the injection `key`.
func (v *volumes) apply(key, container string, rules []map[string]any) error {
	mount, err := v.mountOf(container)
	if err != nil {
		return status.Errorf(codes.Internal, "reading the volumes: %v", err)
	}
	if mount == "" {
		return nil
	}
	made := injection{mount: mount}
	for i, rule := range rules {
		name := fmt.Sprintf("chaos-mesh-%s-%d", key, i)
		if err := v.control(mount, map[string]any{"op": "set", "name": name, "rule": rule}); err != nil {
			v.clear(made)
			return status.Errorf(codes.Internal, "injecting into %s: %v", mount, err)
		}
		made.names = append(made.names, name)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.made[key] = made
	return nil
}

// remove takes the injection `key` away (nothing to do for one not made here).
func (v *volumes) remove(key string) error {
	v.mu.Lock()
	made, ok := v.made[key]
	delete(v.made, key)
	v.mu.Unlock()
	if !ok {
		return nil
	}
	if err := v.clear(made); err != nil {
		v.mu.Lock()
		v.made[key] = made // the controller retries its recovery
		v.mu.Unlock()
		return status.Errorf(codes.Internal, "recovering %s: %v", made.mount, err)
	}
	return nil
}

func (v *volumes) clear(made injection) error {
	for _, name := range made.names {
		err := v.control(made.mount, map[string]any{"op": "clear", "name": name})
		// A mount whose daemon is gone took its rules with it.
		if err != nil && !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ENOENT) {
			return err
		}
	}
	return nil
}

// control sends one request to the faultfs daemon of `mount` (rsdrill/faultfs/control.py's
// protocol: a JSON line each way, on an abstract socket named after the mount point).
func (v *volumes) control(mount string, request map[string]any) error {
	sum := sha256.Sum256([]byte(filepath.Clean(mount)))
	conn, err := v.dial("@rsdrill-faultfs/" + hex.EncodeToString(sum[:])[:32])
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(controlTimeout)); err != nil {
		return err
	}
	line, err := json.Marshal(request)
	if err != nil {
		return err
	}
	if _, err := conn.Write(append(line, '\n')); err != nil {
		return err
	}
	answer, err := bufio.NewReader(conn).ReadBytes('\n')
	if err != nil {
		return err
	}
	var reply struct {
		Ok    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(answer, &reply); err != nil {
		return err
	}
	if !reply.Ok {
		return fmt.Errorf("faultfs refused %v: %s", request["op"], reply.Error)
	}
	return nil
}

// dial connects to an abstract Unix socket of the harness's network namespace (abstract
// sockets belong to one; the stand-in serves in a namespace of its own): the socket is made
// on a thread moved there for the call.
func (v *volumes) dial(address string) (net.Conn, error) {
	if v.netns == "" {
		return net.DialTimeout("unix", address, controlTimeout)
	}
	runtime.LockOSThread()
	own, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer own.Close()
	target, err := os.Open(v.netns)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	conn, dialed := net.DialTimeout("unix", address, controlTimeout)
	if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays locked, so it ends with this goroutine instead of serving others.
		if conn != nil {
			conn.Close()
		}
		return nil, err
	}
	runtime.UnlockOSThread()
	return conn, dialed
}

// ioRule is the faultfs rule for one IOChaos action on the volume mounted at `volume` in the
// container: a latency or an errno, on the operations and files it names, at its percent.
func ioRule(action v1alpha1.IOChaosAction, volume string) (map[string]any, error) {
	rule := map[string]any{"operations": operations(action.Methods)}
	if action.Percent > 0 {
		rule["probability"] = float64(action.Percent) / 100
	}
	if path := relativeGlob(action.Path, volume); path != "" {
		rule["path"] = path
	}
	switch action.Type {
	case v1alpha1.IoLatency:
		latency, err := time.ParseDuration(action.Latency)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "latency %q: %v", action.Latency, err)
		}
		rule["latency_s"] = latency.Seconds()
	case v1alpha1.IoFaults:
		// faultfs fails with one errno: the heaviest of those weighed.
		var heaviest *v1alpha1.IoFault
		for i := range action.Faults {
			if heaviest == nil || action.Faults[i].Weight > heaviest.Weight {
				heaviest = &action.Faults[i]
			}
		}
		if heaviest == nil {
			return nil, status.Errorf(codes.InvalidArgument, "a fault action with no faults")
		}
		rule["errno"] = unix.ErrnoName(syscall.Errno(heaviest.Errno))
	default:
		return nil, status.Errorf(codes.Unimplemented, "the stand-in acts on latency and fault actions, not %s", action.Type)
	}
	return rule, nil
}

// operations maps IOChaos methods to faultfs's operations (no methods: every operation).
func operations(methods []v1alpha1.IoMethod) []string {
	if len(methods) == 0 {
		return []string{"any"}
	}
	seen := map[string]bool{}
	var out []string
	for _, method := range methods {
		var op string
		switch strings.ToLower(string(method)) {
		case "read":
			op = "read"
		case "write":
			op = "write"
		case "fsync", "fsyncdir", "flush":
			op = "fsync"
		case "open", "create", "mknod":
			op = "open"
		default:
			continue // metadata operations: faultfs never faults them
		}
		if !seen[op] {
			seen[op] = true
			out = append(out, op)
		}
	}
	return out
}

// relativeGlob is an IOChaos path (a glob in the container's namespace) relative to the
// volume, as faultfs matches paths; "" for every file. faultfs's `*` crosses directories, so a
// `**/` adds nothing to it.
func relativeGlob(path, volume string) string {
	relative := strings.TrimPrefix(strings.TrimPrefix(path, strings.TrimSuffix(volume, "/")), "/")
	relative = strings.ReplaceAll(relative, "**/", "")
	if relative == "" || relative == "*" || relative == "**" {
		return ""
	}
	return relative
}
