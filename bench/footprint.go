package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// footprint returns the process's peak resident set (VmHWM, falling back
// to getrusage's maxrss) in MB and the CPU time (user + system) it has
// used so far, in seconds.
func footprint() (peakMB, cpuSeconds float64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		cpuSeconds = float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
		peakMB = float64(ru.Maxrss) / 1024 // KiB on Linux
	}
	if kb, ok := vmHWM(); ok {
		peakMB = float64(kb) / 1024
	}
	return round2(peakMB), round2(cpuSeconds)
}

// vmHWM reads the peak resident set in KiB from /proc/self/status.
func vmHWM() (int64, bool) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		return kb, err == nil
	}
	return 0, false
}

func round2(f float64) float64 {
	return float64(int64(f*100+0.5)) / 100
}
