package mx

import (
	"context"
	"errors"
	"testing"

	"github.com/gomx-dev/gomx/transport/loopback"
)

func TestNames(t *testing.T) {
	checkLeaks(t)
	names := NewNames()
	n := loopback.NewNetwork(loopback.Options{})
	defer n.Close()
	p, err := n.Attach(0x0200000000AA)
	if err != nil {
		t.Fatal(err)
	}
	opts := DefaultBoardOptions()
	opts.Names, opts.Hostname = names, "node7:0"
	b, err := NewBoard(p, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if nic, err := names.HostnameToNICID(ctx, "node7:0"); err != nil || nic != b.NICID() {
		t.Fatalf("lookup: %v %v", nic, err)
	}
	if name, err := names.NICIDToHostname(b.NICID()); err != nil || name != "node7:0" {
		t.Fatalf("reverse lookup: %q %v", name, err)
	}
	if nic, err := names.HostnameToNICID(ctx, "127.0.0.1:4000"); err != nil || nic != 0x7F0000010FA0 {
		t.Fatalf("udp literal: %v %v", nic, err)
	}
	b.Close()
	if _, err := names.HostnameToNICID(ctx, "node7:0"); !errors.Is(err, ErrHostNotFound) {
		t.Fatalf("after close: %v", err)
	}
	if _, err := names.HostnameToNICID(ctx, "no-such-host.invalid:1"); !errors.Is(err, ErrHostNotFound) {
		t.Fatalf("unknown host: %v", err)
	}
}
