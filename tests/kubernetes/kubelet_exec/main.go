// A stand-in kubelet for the Kubernetes tests: only its exec endpoint, which the API server
// relays pods/exec to (/exec/<namespace>/<pod>/<container>), served with the kubelet's own
// streaming code. A "container" is a PID namespace on this machine: the command runs inside
// the namespaces of the process a map file names for the pod (nsenter), as a container
// runtime runs an exec. No other kubelet function exists here.
//
//	kubelet-exec -listen 127.0.0.1:PORT -cert C -key K -pods MAP.json
//
// MAP.json: {"<namespace>/<pod>": <PID of the container's init>}, read at every request.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/remotecommand"
	crirc "k8s.io/kubelet/pkg/cri/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

type namespaces struct{ mapFile string }

func (n namespaces) ExecInContainer(ctx context.Context, name string, uid types.UID, container string,
	cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool,
	resize <-chan remotecommand.TerminalSize, timeout time.Duration) error {
	data, err := os.ReadFile(n.mapFile)
	if err != nil {
		return err
	}
	pods := map[string]int{}
	if err := json.Unmarshal(data, &pods); err != nil {
		return err
	}
	pid, ok := pods[name]
	if !ok {
		return fmt.Errorf("container %s of pod %s is not running", container, name)
	}
	argv := append([]string{"-t", strconv.Itoa(pid), "-p", "-m", "--"}, cmd...)
	run := exec.CommandContext(ctx, "nsenter", argv...)
	run.Stdin, run.Stdout, run.Stderr = in, out, errw
	err = run.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return utilexec.CodeExitError{Err: err, Code: exit.ExitCode()}
	}
	return err
}

func main() {
	listen := flag.String("listen", "127.0.0.1:10250", "address")
	cert := flag.String("cert", "", "TLS certificate")
	key := flag.String("key", "", "TLS key")
	mapFile := flag.String("pods", "", "pod → container init PID map (JSON)")
	flag.Parse()
	executor := namespaces{*mapFile}
	http.HandleFunc("/exec/", func(w http.ResponseWriter, req *http.Request) {
		parts := strings.Split(strings.TrimPrefix(req.URL.Path, "/exec/"), "/")
		if len(parts) != 3 {
			http.Error(w, "want /exec/<namespace>/<pod>/<container>", http.StatusNotFound)
			return
		}
		opts, err := crirc.NewOptions(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		crirc.ServeExec(w, req, executor, parts[0]+"/"+parts[1], "", parts[2],
			req.URL.Query()["command"], opts, time.Minute, 30*time.Second,
			[]string{"v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io", "channel.k8s.io"})
	})
	log.Fatal(http.ListenAndServeTLS(*listen, *cert, *key, nil))
}
