package testutil

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// WriteELF writes a minimal ELF64 file of the given machine (62 = x86-64,
// 183 = AArch64) and returns its path: enough for the agent-binary
// catalogue's arch check.
func WriteELF(tb testing.TB, machine uint16) string {
	tb.Helper()
	var b bytes.Buffer
	b.Write([]byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	le := binary.LittleEndian
	for _, v := range []any{uint16(2), machine, uint32(1), uint64(0), uint64(0), uint64(0), uint32(0),
		uint16(64), uint16(56), uint16(0), uint16(64), uint16(0), uint16(0)} {
		binary.Write(&b, le, v)
	}
	b.WriteString("payload of a fake agent binary")
	p := filepath.Join(tb.TempDir(), "muster-fake")
	if err := os.WriteFile(p, b.Bytes(), 0o755); err != nil {
		tb.Fatal(err)
	}
	return p
}
