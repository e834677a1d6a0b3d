package qemu

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"time"
)

// SetLinkEnv names the guest environment variable that lists the netdevs a
// guest test may pull the cable of ("n0,n1"), by printing a SetLinkPrefix
// line on the console; the host answers with the QEMU monitor's set_link.
// A test that finds the variable unset cannot pull cables and skips that
// part.
const SetLinkEnv = "GOMX_QEMU_SET_LINK"

// SetLinkPrefix starts a console line asking the host to change a link:
// "GOMX-QEMU-SET-LINK n0 off". The guest then waits (bounded) for its NIC
// to see the change.
const SetLinkPrefix = "GOMX-QEMU-SET-LINK "

// setLinkNetdevs are the netdevs QEMUArgs cables the two e1000e to.
const setLinkNetdevs = "n0,n1"

// DeviceDelEnv names the guest environment variable that lists the QEMU
// devices a guest test may unplug ("usb0"), by printing a DeviceDelPrefix
// line; the host answers with the monitor's device_del. A test that finds
// the variable unset cannot unplug and skips that part.
const DeviceDelEnv = "GOMX_QEMU_DEVICE_DEL"

// DeviceDelPrefix starts a console line asking the host to unplug a
// device: "GOMX-QEMU-DEVICE-DEL usb0".
const DeviceDelPrefix = "GOMX-QEMU-DEVICE-DEL "

var (
	setLinkLine   = regexp.MustCompile(`GOMX-QEMU-SET-LINK (n[01]) (on|off)\b`)
	deviceDelLine = regexp.MustCompile(`GOMX-QEMU-DEVICE-DEL (` + regexp.QuoteMeta(USBNetID) + `)\b`)
)

// setLinkRequest parses a console line into the monitor command it asks
// for (set_link or device_del); ok is false for every other line.
func setLinkRequest(line string) (cmd string, ok bool) {
	if m := setLinkLine.FindStringSubmatch(line); m != nil {
		return "set_link " + m[1] + " " + m[2], true
	}
	if m := deviceDelLine.FindStringSubmatch(line); m != nil {
		return "device_del " + m[1], true
	}
	return "", false
}

// monitorArgs replaces "-monitor none" in args with a human monitor on the
// unix socket sock.
func monitorArgs(args []string, sock string) []string {
	out := append([]string(nil), args...)
	for i := 0; i+1 < len(out); i++ {
		if out[i] == "-monitor" && out[i+1] == "none" {
			out[i+1] = "unix:" + sock + ",server=on,wait=off"
		}
	}
	return out
}

// cableArgs puts the unix socket path prefix sock where args hold
// USBCableSock.
func cableArgs(args []string, sock string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = strings.ReplaceAll(a, USBCableSock, sock)
	}
	return out
}

// monitorCommand runs one command on QEMU's human monitor at sock and
// waits for the prompt after it, so the command has run when it returns.
func monitorCommand(sock, cmd string) error {
	c, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		return fmt.Errorf("qemu monitor: %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	prompt := func() error {
		var seen strings.Builder
		for !strings.HasSuffix(seen.String(), "(qemu) ") {
			b, err := r.ReadByte()
			if err != nil {
				return fmt.Errorf("qemu monitor: waiting for the prompt after %q: %w", seen.String(), err)
			}
			seen.WriteByte(b)
		}
		return nil
	}
	if err := prompt(); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(c, "%s\n", cmd); err != nil {
		return fmt.Errorf("qemu monitor: %w", err)
	}
	return prompt()
}

// linkPuller runs the guest's set_link requests on QEMU's monitor, in the
// order the guest printed them, on its own goroutine: the console writer
// that sees the requests must never wait for the monitor, or QEMU's output
// would stop draining.
type linkPuller struct {
	mon   string
	log   io.Writer
	start time.Time
	reqs  chan string
	done  chan struct{}
}

// newLinkPuller starts the goroutine that talks to the monitor at mon and
// notes each command and its result in log.
func newLinkPuller(mon string, log io.Writer, start time.Time) *linkPuller {
	p := &linkPuller{mon: mon, log: log, start: start, reqs: make(chan string, 64), done: make(chan struct{})}
	go p.run()
	return p
}

func (p *linkPuller) run() {
	defer close(p.done)
	for cmd := range p.reqs {
		err := monitorCommand(p.mon, cmd)
		fmt.Fprintf(p.log, "%7.2f # monitor %q: %v\n", time.Since(p.start).Seconds(), cmd, err)
	}
}

// request queues the command a console line asks for, if any. A request
// beyond the queue's room is noted and dropped; the guest's bounded wait
// then fails its test with the reason.
func (p *linkPuller) request(line string) {
	cmd, ok := setLinkRequest(line)
	if !ok {
		return
	}
	select {
	case p.reqs <- cmd:
	default:
		fmt.Fprintf(p.log, "%7.2f # monitor %q: dropped, %d requests already queued\n", time.Since(p.start).Seconds(), cmd, cap(p.reqs))
	}
}

// stop ends the goroutine after the queued commands have run (or failed,
// once QEMU is gone).
func (p *linkPuller) stop() {
	close(p.reqs)
	<-p.done
}
