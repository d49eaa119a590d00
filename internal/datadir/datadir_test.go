package datadir

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/musterhq/muster"
)

func TestEnsureMakesPrivate(t *testing.T) {
	base := t.TempDir()
	fresh := filepath.Join(base, "a", "b")
	wide := filepath.Join(base, "wide")
	if err := os.Mkdir(wide, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(wide, 0o755) // whatever the umask
	for _, dir := range []string{fresh, wide} {
		if err := Ensure(dir); err != nil {
			t.Fatalf("ensure %s: %v", dir, err)
		}
		st, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != 0o700 {
			t.Errorf("%s: got mode %v, want 0700", dir, got)
		}
	}
}

func TestEnsureErrors(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, dir, want string }{
		{"empty", "", "data dir is empty"},
		{"a file", file, "not a directory"},
		{"under a file", filepath.Join(file, "x"), file},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Ensure(tc.dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("ensure %q: got %v, want one line naming %q", tc.dir, err, tc.want)
			}
		})
	}
}

// TestLockHeldByAnotherProcess checks S1 across processes: a child
// process takes the lock; this one is refused with the child's pid; once
// the child is killed the lock is free again.
func TestLockHeldByAnotherProcess(t *testing.T) {
	if os.Getenv("DATADIR_LOCK_CHILD") != "" {
		l, err := Acquire(os.Getenv("DATADIR_LOCK_CHILD"))
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		defer l.Release()
		fmt.Println("locked")
		os.Stdin.Read(make([]byte, 1)) // hold until killed
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockHeldByAnotherProcess$")
	cmd.Env = append(os.Environ(), "DATADIR_LOCK_CHILD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, _ := cmd.StdinPipe()
	defer stdin.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, _ := out.Read(buf)
	if !strings.Contains(string(buf[:n]), "locked") {
		cmd.Process.Kill()
		t.Fatalf("child: got %q, want locked", buf[:n])
	}
	_, err = Acquire(dir)
	want := fmt.Sprintf("data dir %s is in use by pid %d", dir, cmd.Process.Pid)
	if err == nil || err.Error() != want || muster.ErrorCode(err) != muster.EConflict {
		t.Fatalf("second lock: got %v, want conflict %q", err, want)
	}
	cmd.Process.Kill()
	cmd.Wait()
	l, err := Acquire(dir)
	if err != nil {
		t.Fatalf("lock after the holder died: %v", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Fatalf("second release: %v", err)
	}
}

func TestLockInProcess(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	// flock locks belong to the open file: a second open in the same
	// process is refused too (two controllers in one test process).
	if _, err := Acquire(dir); muster.ErrorCode(err) != muster.EConflict {
		t.Fatalf("second lock in process: got %v, want conflict", err)
	}
	l.Release()
	l2, err := Acquire(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	l2.Release()
	st, err := os.Stat(filepath.Join(dir, LockFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("lock file: got %v, %v, want mode 0600", st.Mode(), err)
	}
}
