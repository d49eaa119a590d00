package agent

import (
	"bufio"
	"bytes"
	"io/fs"
	"math"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/musterhq/muster"
)

// ProbeHardware returns this host's hardware as an agent sees it: the
// runtime's architecture, the cores it may use (runtime.NumCPU, lowered by
// a cgroup CPU quota) and its memory in MiB (/proc/meminfo, lowered by a
// cgroup memory limit). What cannot be read is left zero.
func ProbeHardware() muster.Hardware {
	return probeHardware(os.DirFS("/"), runtime.NumCPU(), runtime.GOARCH)
}

func probeHardware(fsys fs.FS, numCPU int, arch string) muster.Hardware {
	hw := muster.Hardware{Arch: arch}
	cores := numCPU
	if q, ok := cgroupCPULimit(fsys); ok && q < cores {
		cores = q
	}
	if cores > 0 {
		hw.Cores = uint64(cores)
	}
	mem := memTotal(fsys)
	if lim, ok := cgroupMemLimit(fsys); ok && (mem == 0 || lim < mem) {
		mem = lim
	}
	hw.Mem = mem >> 20
	return hw
}

// cgroupCPULimit returns the CPU quota in whole cores (rounded up), from
// cgroup v2 cpu.max or cgroup v1 cpu.cfs_quota_us.
func cgroupCPULimit(fsys fs.FS) (int, bool) {
	if b, err := fs.ReadFile(fsys, "sys/fs/cgroup/cpu.max"); err == nil {
		f := strings.Fields(string(b))
		if len(f) == 2 && f[0] != "max" {
			return cores(f[0], f[1])
		}
		return 0, false
	}
	q, err1 := fs.ReadFile(fsys, "sys/fs/cgroup/cpu/cpu.cfs_quota_us")
	p, err2 := fs.ReadFile(fsys, "sys/fs/cgroup/cpu/cpu.cfs_period_us")
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return cores(strings.TrimSpace(string(q)), strings.TrimSpace(string(p)))
}

func cores(quota, period string) (int, bool) {
	q, err1 := strconv.ParseFloat(quota, 64)
	p, err2 := strconv.ParseFloat(period, 64)
	if err1 != nil || err2 != nil || q <= 0 || p <= 0 {
		return 0, false
	}
	return max(int(math.Ceil(q/p)), 1), true
}

// cgroupMemLimit returns the cgroup memory limit in bytes (v2 memory.max,
// v1 memory.limit_in_bytes); v1 reports "no limit" as a huge number, which
// the caller's minimum with MemTotal discards.
func cgroupMemLimit(fsys fs.FS) (uint64, bool) {
	for _, p := range []string{"sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			continue
		}
		v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || v == 0 {
			return 0, false // "max"
		}
		return v, true
	}
	return 0, false
}

// memTotal returns MemTotal of /proc/meminfo in bytes, or 0.
func memTotal(fsys fs.FS) uint64 {
	b, err := fs.ReadFile(fsys, "proc/meminfo")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// InterfaceAddresses returns the IP addresses of this host's interfaces,
// without loopback, link-local and multicast ones.
func InterfaceAddresses() []string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []string
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip := ipn.IP
		if ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() {
			continue
		}
		out = append(out, ip.String())
	}
	return out
}
