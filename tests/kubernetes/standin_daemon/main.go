// A stand-in for Chaos Mesh's chaos-daemon, behind the daemon's own gRPC service (Chaos Mesh's
// pkg/chaosdaemon/pb, compiled from the same module as the real controller-manager), with the
// daemon's mutual TLS. The test cluster has no container runtime for a real daemon to enter:
// this one answers each call as the daemon does when it succeeds and records it, one JSON line
// per call, for the tests to read; an IOChaos or BlockChaos on a container whose volume the
// harness put on faultfs it also carries out there (volumes.go).
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"log"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang/protobuf/ptypes/empty"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/chaos-mesh/chaos-mesh/api/v1alpha1"
	"github.com/chaos-mesh/chaos-mesh/pkg/chaosdaemon/pb"
)

type daemon struct {
	pb.UnimplementedChaosDaemonServer
	mu       sync.Mutex
	out      *os.File
	instance atomic.Int64 // the "process" each injection reports, as the daemon's pids
	volumes  *volumes
}

// record appends one call; a call not recorded fails, so a test never misses one silently.
func (d *daemon) record(method string, request any) error {
	line, err := json.Marshal(map[string]any{
		"method": method, "request": request, "at": float64(time.Now().UnixNano()) / 1e9,
	})
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	_, err = d.out.Write(append(line, '\n'))
	return err
}

func (d *daemon) none(method string, request any) (*empty.Empty, error) {
	return &empty.Empty{}, d.record(method, request)
}

func (d *daemon) SetTcs(_ context.Context, r *pb.TcsRequest) (*empty.Empty, error) {
	return d.none("SetTcs", r)
}

func (d *daemon) FlushIPSets(_ context.Context, r *pb.IPSetsRequest) (*empty.Empty, error) {
	return d.none("FlushIPSets", r)
}

func (d *daemon) SetIptablesChains(_ context.Context, r *pb.IptablesChainsRequest) (*empty.Empty, error) {
	return d.none("SetIptablesChains", r)
}

func (d *daemon) SetTimeOffset(_ context.Context, r *pb.TimeRequest) (*empty.Empty, error) {
	return d.none("SetTimeOffset", r)
}

func (d *daemon) RecoverTimeOffset(_ context.Context, r *pb.TimeRequest) (*empty.Empty, error) {
	return d.none("RecoverTimeOffset", r)
}

func (d *daemon) ContainerKill(_ context.Context, r *pb.ContainerRequest) (*empty.Empty, error) {
	return d.none("ContainerKill", r)
}

func (d *daemon) ContainerGetPid(_ context.Context, r *pb.ContainerRequest) (*pb.ContainerResponse, error) {
	return &pb.ContainerResponse{Pid: uint32(d.instance.Add(1))}, d.record("ContainerGetPid", r)
}

func (d *daemon) ExecStressors(_ context.Context, r *pb.ExecStressRequest) (*pb.ExecStressResponse, error) {
	now := time.Now().Unix()
	response := &pb.ExecStressResponse{}
	if r.CpuStressors != "" {
		n := d.instance.Add(1)
		response.CpuInstance, response.CpuStartTime = "standin", now
		response.CpuInstanceUid = "cpu-" + strconv.FormatInt(n, 10)
	}
	if r.MemoryStressors != "" {
		n := d.instance.Add(1)
		response.MemoryInstance, response.MemoryStartTime = "standin", now
		response.MemoryInstanceUid = "memory-" + strconv.FormatInt(n, 10)
	}
	return response, d.record("ExecStressors", r)
}

func (d *daemon) CancelStressors(_ context.Context, r *pb.CancelStressRequest) (*empty.Empty, error) {
	return d.none("CancelStressors", r)
}

func (d *daemon) ApplyIOChaos(_ context.Context, r *pb.ApplyIOChaosRequest) (*pb.ApplyIOChaosResponse, error) {
	if err := d.record("ApplyIOChaos", r); err != nil {
		return nil, err
	}
	// As the daemon: the injection the request names (the one it reported last) goes first.
	previous := r.InstanceUid
	if previous == "" && r.Instance != 0 {
		previous = "io-" + strconv.FormatInt(r.Instance, 10)
	}
	if err := d.volumes.remove(previous); err != nil {
		return nil, err
	}
	var actions []v1alpha1.IOChaosAction
	if err := json.Unmarshal([]byte(r.Actions), &actions); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "unmarshal json bytes: %v", err)
	}
	if len(actions) == 0 {
		return &pb.ApplyIOChaosResponse{}, nil
	}
	n := d.instance.Add(1)
	uid := "io-" + strconv.FormatInt(n, 10)
	rules := make([]map[string]any, 0, len(actions))
	for _, action := range actions {
		rule, err := ioRule(action, r.Volume)
		if err != nil {
			return nil, err
		}
		rules = append(rules, rule)
	}
	if err := d.volumes.apply(uid, r.ContainerId, rules); err != nil {
		return nil, err
	}
	return &pb.ApplyIOChaosResponse{Instance: n, StartTime: time.Now().Unix(), InstanceUid: uid}, nil
}

func (d *daemon) ApplyBlockChaos(_ context.Context, r *pb.ApplyBlockChaosRequest) (*pb.ApplyBlockChaosResponse, error) {
	if err := d.record("ApplyBlockChaos", r); err != nil {
		return nil, err
	}
	if r.Action != pb.ApplyBlockChaosRequest_Delay || r.Delay == nil {
		return nil, status.Errorf(codes.Unimplemented, "the stand-in acts on a BlockChaos delay only")
	}
	n := int32(d.instance.Add(1))
	// Each block request delayed. What reaches the device from the member: a write lands in
	// the page cache and its requests go out, in parallel, on the fsync that waits for them;
	// its reads are of pages just written (the log, copied back by a checkpoint) or held in
	// its own cache, which the page cache would serve. faultfs's compiled layer has no page
	// cache, so it delays each fsync only (each read too would stall every checkpoint for a
	// second: 50 pages read back at 20 ms).
	rule := map[string]any{"latency_s": float64(r.Delay.Delay) / 1e9, "operations": []string{"fsync"}}
	if err := d.volumes.apply(blockKey(n), r.ContainerId, []map[string]any{rule}); err != nil {
		return nil, err
	}
	return &pb.ApplyBlockChaosResponse{InjectionId: n}, nil
}

func (d *daemon) RecoverBlockChaos(_ context.Context, r *pb.RecoverBlockChaosRequest) (*empty.Empty, error) {
	if err := d.record("RecoverBlockChaos", r); err != nil {
		return nil, err
	}
	return &empty.Empty{}, d.volumes.remove(blockKey(r.InjectionId))
}

func blockKey(id int32) string {
	return "block-" + strconv.FormatInt(int64(id), 10)
}

func main() {
	listen := flag.String("listen", "", "address to serve on (host:port)")
	record := flag.String("record", "", "file each call is appended to")
	ca := flag.String("ca", "", "with -cert: serve mutual TLS, as the daemon does, to clients whose certificate this CA signed")
	cert := flag.String("cert", "", "the daemon's certificate and its key, in one PEM file")
	mounts := flag.String("volumes", "", "JSON file: container id → the faultfs mount of its data volume")
	netns := flag.String("netns", "", "the network namespace of those mounts' control sockets")
	flag.Parse()
	out, err := os.OpenFile(*record, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		log.Fatal(err)
	}
	listener, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	var options []grpc.ServerOption
	if *ca != "" {
		options = append(options, grpc.Creds(credentials.NewTLS(mutualTLS(*ca, *cert))))
	}
	server := grpc.NewServer(options...)
	pb.RegisterChaosDaemonServer(server, &daemon{
		out: out, volumes: &volumes{file: *mounts, netns: *netns, made: map[string]injection{}},
	})
	log.Printf("stand-in chaos-daemon serving on %s", listener.Addr())
	log.Fatal(server.Serve(listener))
}

// mutualTLS is the daemon's server side of Chaos Mesh's mTLS: a caller without a certificate
// signed by the CA is refused before any call.
func mutualTLS(caFile, certFile string) *tls.Config {
	pair, err := tls.LoadX509KeyPair(certFile, certFile)
	if err != nil {
		log.Fatal(err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		log.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		log.Fatalf("no certificate in %s", caFile)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{pair},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}
}
