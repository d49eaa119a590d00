package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"testing"
)

// bigStatus is a status of n machines as the sim's fleet shows them.
func bigStatus(n int) Status {
	st := Status{Model: "default", Provider: "sim", HarvestMode: "destroyed", Machines: map[string]MachineStatus{}, Zones: map[string]ZoneStatus{"a": {true, n / 3}}}
	for i := range n {
		st.Machines[fmt.Sprint(i)] = MachineStatus{Life: "alive", Status: "started", InstanceID: fmt.Sprintf("i-%017x", i), InstanceStatus: "running",
			Zone: "a", Base: "ubuntu@24.04", Hardware: "arch=amd64 cores=1 mem=2048M root-disk=8192M availability-zone=a", Addresses: []string{fmt.Sprintf("10.1.%d.%d", i/256, i%256)}}
	}
	return st
}

// BenchmarkStatusJSON100k is the CLI's share of `muster status --format
// json` at 100,000 machines: decoding ten pages of 10,000 and printing.
func BenchmarkStatusJSON100k(b *testing.B) {
	const n, page = 100_000, 10_000
	all := bigStatus(n)
	var pages [][]byte
	for p := 0; p < n; p += page {
		st := all
		st.Machines = map[string]MachineStatus{}
		for i := p; i < p+page; i++ {
			st.Machines[fmt.Sprint(i)] = all.Machines[fmt.Sprint(i)]
		}
		bs, _ := json.Marshal(st)
		pages = append(pages, bs)
	}
	b.ResetTimer()
	for range b.N {
		var out Status
		for _, p := range pages { // as Client.Status: into one map
			st := Status{Machines: out.Machines}
			if err := json.NewDecoder(bytes.NewReader(p)).Decode(&st); err != nil {
				b.Fatal(err)
			}
			out = st
		}
		if len(out.Machines) != n {
			b.Fatalf("decoded %d machines, want %d", len(out.Machines), n)
		}
		if err := WriteStatusJSON(io.Discard, out); err != nil {
			b.Fatal(err)
		}
	}
}
