package qemu

import (
	"bufio"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSetLinkRequest(t *testing.T) {
	for _, c := range []struct {
		line, want string
	}{
		{"GOMX-QEMU-SET-LINK n0 off", "set_link n0 off"},
		{"    nictest: GOMX-QEMU-SET-LINK n1 on\r", "set_link n1 on"},
		{"GOMX-QEMU-SET-LINK n2 off", ""},
		{"GOMX-QEMU-SET-LINK n0 maybe", ""},
		{"GOMX-QEMU-SET-LINK n0 off; quit", "set_link n0 off"},
		{"=== RUN TestLinkDownUp", ""},
		{"GOMX-QEMU-DEVICE-DEL usb0", "device_del usb0"},
		{"    qemu_test.go:80: GOMX-QEMU-DEVICE-DEL usb0\r", "device_del usb0"},
		{"GOMX-QEMU-DEVICE-DEL edu0", ""},
		{"GOMX-QEMU-DEVICE-DEL usb01", ""},
	} {
		got, ok := setLinkRequest(c.line)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("%q: %q %v, want %q", c.line, got, ok, c.want)
		}
	}
}

func TestMonitorArgs(t *testing.T) {
	args := monitorArgs(Configs[0].QEMUArgs("k", "i"), "/tmp/x.mon")
	i := slices.Index(args, "-monitor")
	if i < 0 || args[i+1] != "unix:/tmp/x.mon,server=on,wait=off" {
		t.Fatalf("monitor args %v", args)
	}
	if !strings.Contains(Configs[0].Append(), SetLinkEnv+"=n0,n1") {
		t.Error("the guest is not told which links it may pull")
	}
}

// A fake monitor: banner and prompt, then the command echoed and a prompt.
func TestMonitorCommand(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "mon")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan string, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- err.Error()
			return
		}
		defer c.Close()
		c.Write([]byte("QEMU 7.2.22 monitor - type 'help' for more information\r\n(qemu) "))
		line, _ := bufio.NewReader(c).ReadString('\n')
		c.Write([]byte(line + "(qemu) "))
		got <- strings.TrimSpace(line)
	}()
	if err := monitorCommand(sock, "set_link n0 off"); err != nil {
		t.Fatal(err)
	}
	if g := <-got; g != "set_link n0 off" {
		t.Errorf("monitor got %q", g)
	}
}
