package controller

import (
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
)

// AgentCatalogue is the agent binary catalogue of SPEC P8, kept in
// <data-dir>/agent-binaries: index.json lists the entries, and the files
// added with `muster agent-binaries add` are copied next to it. The
// controller registers its own binary at start. The index is read at each
// lookup, so binaries added while the controller runs are found at once.
type AgentCatalogue struct {
	dir string
	mu  sync.Mutex // serialises this process's read-modify-write of the index
}

// AgentBinaryEntry is one entry of the index.
type AgentBinaryEntry struct {
	Version string    `json:"version"`
	OS      string    `json:"os"`
	Arch    string    `json:"arch"`
	SHA256  string    `json:"sha256"`
	Size    int64     `json:"size"`
	Path    string    `json:"path"` // absolute, or relative to the catalogue dir
	ModTime time.Time `json:"mod-time"`
	Added   time.Time `json:"added"`
	// Self marks the controller's own binary, registered at start and not
	// copied.
	Self bool `json:"self,omitempty"`
}

type agentIndex struct {
	Binaries []AgentBinaryEntry `json:"binaries"`
}

var _ muster.AgentBinaryFinder = (*AgentCatalogue)(nil)

// NewAgentCatalogue returns the catalogue of the data dir.
func NewAgentCatalogue(dataDir string) *AgentCatalogue {
	return &AgentCatalogue{dir: filepath.Join(dataDir, "agent-binaries")}
}

func (c *AgentCatalogue) indexPath() string { return filepath.Join(c.dir, "index.json") }

// load reads the index; a missing index is an empty catalogue.
func (c *AgentCatalogue) load() (agentIndex, error) {
	var idx agentIndex
	b, err := os.ReadFile(c.indexPath())
	if errors.Is(err, os.ErrNotExist) {
		return idx, nil
	}
	if err != nil {
		return idx, fmt.Errorf("read agent binary index: %w", err)
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return idx, fmt.Errorf("read agent binary index %s: %w", c.indexPath(), err)
	}
	return idx, nil
}

// save replaces the index atomically.
func (c *AgentCatalogue) save(idx agentIndex) error {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return fmt.Errorf("create agent binary dir: %w", err)
	}
	b, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(c.dir, "index-*.json")
	if err != nil {
		return fmt.Errorf("write agent binary index: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("write agent binary index: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write agent binary index: %w", err)
	}
	if err := os.Rename(tmp.Name(), c.indexPath()); err != nil {
		return fmt.Errorf("write agent binary index: %w", err)
	}
	return nil
}

// put adds e to the index, replacing the entry of the same version, OS and
// arch.
func (c *AgentCatalogue) put(e AgentBinaryEntry) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	idx, err := c.load()
	if err != nil {
		return err
	}
	idx.Binaries = slices.DeleteFunc(idx.Binaries, func(o AgentBinaryEntry) bool {
		return o.Version == e.Version && o.OS == e.OS && o.Arch == e.Arch
	})
	idx.Binaries = append(idx.Binaries, e)
	sort.SliceStable(idx.Binaries, func(i, j int) bool {
		a, b := idx.Binaries[i], idx.Binaries[j]
		if a.Version != b.Version {
			return a.Version < b.Version
		}
		if a.OS != b.OS {
			return a.OS < b.OS
		}
		return a.Arch < b.Arch
	})
	return c.save(idx)
}

// registerSelf registers the controller's own binary at path for this
// version, OS and arch. Its hash is reused while the file's size and
// modification time are unchanged.
func (c *AgentCatalogue) registerSelf(path string, now time.Time) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("register agent binary: %w", err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return fmt.Errorf("register agent binary: %w", err)
	}
	osName, arch := hostPlatform()
	idx, err := c.load()
	if err != nil {
		return err
	}
	for _, e := range idx.Binaries {
		if e.Self && e.Path == abs && e.Version == muster.Version && e.OS == osName && e.Arch == arch &&
			e.Size == fi.Size() && e.ModTime.Equal(fi.ModTime()) {
			return nil // unchanged
		}
	}
	sum, size, err := fileSHA256(abs)
	if err != nil {
		return fmt.Errorf("register agent binary: %w", err)
	}
	return c.put(AgentBinaryEntry{
		Version: muster.Version, OS: osName, Arch: arch, SHA256: sum, Size: size,
		Path: abs, ModTime: fi.ModTime(), Added: now.UTC(), Self: true,
	})
}

// Add copies the binary at src into the catalogue for version, OS and
// arch, after checking that it is an executable of that OS and arch.
func (c *AgentCatalogue) Add(src, version, osName, arch string, now time.Time) (AgentBinaryEntry, error) {
	if version == "" || osName == "" || arch == "" {
		return AgentBinaryEntry{}, muster.Errorf(muster.EInvalid, "version, os and arch are required")
	}
	if !versionRE.MatchString(version) {
		return AgentBinaryEntry{}, muster.Errorf(muster.EInvalid, "bad version %q: want e.g. 1.2.3", version)
	}
	if !slices.Contains(muster.Arches, arch) {
		return AgentBinaryEntry{}, muster.Errorf(muster.EInvalid, "bad arch %q (known: %v)", arch, muster.Arches)
	}
	if osName != "linux" {
		return AgentBinaryEntry{}, muster.Errorf(muster.EInvalid, "bad os %q: only linux agents are supported", osName)
	}
	fi, err := os.Stat(src)
	if err != nil {
		return AgentBinaryEntry{}, muster.Errorf(muster.EInvalid, "agent binary: %v", err)
	}
	if !fi.Mode().IsRegular() || fi.Size() == 0 {
		return AgentBinaryEntry{}, muster.Errorf(muster.EInvalid, "agent binary %s is not a non-empty regular file", src)
	}
	if got, err := elfArch(src); err != nil {
		return AgentBinaryEntry{}, muster.Errorf(muster.EInvalid, "agent binary %s is not a linux executable: %v", src, err)
	} else if got != arch {
		return AgentBinaryEntry{}, muster.Errorf(muster.EInvalid, "agent binary %s is for %s, not %s", src, got, arch)
	}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return AgentBinaryEntry{}, fmt.Errorf("create agent binary dir: %w", err)
	}
	tmp, err := os.CreateTemp(c.dir, "add-*")
	if err != nil {
		return AgentBinaryEntry{}, fmt.Errorf("copy agent binary: %w", err)
	}
	defer os.Remove(tmp.Name())
	in, err := os.Open(src)
	if err != nil {
		tmp.Close()
		return AgentBinaryEntry{}, muster.Errorf(muster.EInvalid, "agent binary: %v", err)
	}
	h := sha256.New()
	size, err := io.Copy(io.MultiWriter(tmp, h), in)
	in.Close()
	if err == nil {
		err = tmp.Chmod(0o755)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return AgentBinaryEntry{}, fmt.Errorf("copy agent binary: %w", err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	name := fmt.Sprintf("muster-%s-%s-%s-%s", version, osName, arch, sum[:12])
	if err := os.Rename(tmp.Name(), filepath.Join(c.dir, name)); err != nil {
		return AgentBinaryEntry{}, fmt.Errorf("copy agent binary: %w", err)
	}
	e := AgentBinaryEntry{Version: version, OS: osName, Arch: arch, SHA256: sum, Size: size, Path: name, Added: now.UTC()}
	if err := c.put(e); err != nil {
		return AgentBinaryEntry{}, err
	}
	return e, nil
}

// List returns the entries of the index.
func (c *AgentCatalogue) List() ([]AgentBinaryEntry, error) {
	idx, err := c.load()
	return idx.Binaries, err
}

// FindAgentBinaries returns the binaries of version, OS and arch whose
// file exists; ENotFound when there is none.
func (c *AgentCatalogue) FindAgentBinaries(_ context.Context, version, osName, arch string) ([]muster.AgentBinary, error) {
	idx, err := c.load()
	if err != nil {
		return nil, err
	}
	var out []muster.AgentBinary
	for _, e := range idx.Binaries {
		if e.Version != version || e.OS != osName || e.Arch != arch {
			continue
		}
		p := e.Path
		if !filepath.IsAbs(p) {
			p = filepath.Join(c.dir, p)
		}
		if _, err := os.Stat(p); err != nil {
			continue
		}
		out = append(out, muster.AgentBinary{Version: e.Version, OS: e.OS, Arch: e.Arch, SHA256: e.SHA256, Size: e.Size, Path: p})
	}
	if len(out) == 0 {
		return nil, muster.Errorf(muster.ENotFound, "no matching agent binaries available for %s/%s version %s", osName, arch, version)
	}
	return out, nil
}

func fileSHA256(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

var versionRE = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}$`)

// hostPlatform is this binary's OS and arch, named as in constraints.
func hostPlatform() (osName, arch string) {
	arch = runtime.GOARCH
	if arch == "ppc64le" {
		arch = "ppc64el"
	}
	return runtime.GOOS, arch
}

// elfArch returns the muster arch name (muster.Arches) of an ELF executable.
func elfArch(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	switch f.Machine {
	case elf.EM_X86_64:
		return "amd64", nil
	case elf.EM_AARCH64:
		return "arm64", nil
	case elf.EM_PPC64:
		return "ppc64el", nil
	case elf.EM_S390:
		return "s390x", nil
	case elf.EM_RISCV:
		return "riscv64", nil
	}
	return "", fmt.Errorf("unknown machine %s", f.Machine)
}

// pathOf returns the file of the catalogue's binary with SHA-256 sum;
// ENotFound when there is none (what GET /v1/agent-binaries/{sha256}
// serves).
func (c *AgentCatalogue) pathOf(sum string) (string, error) {
	idx, err := c.load()
	if err != nil {
		return "", err
	}
	for _, e := range idx.Binaries {
		if e.SHA256 != sum {
			continue
		}
		p := e.Path
		if !filepath.IsAbs(p) {
			p = filepath.Join(c.dir, p)
		}
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", muster.Errorf(muster.ENotFound, "no agent binary with SHA-256 %s", sum)
}

// downloadURLs is a binary finder whose binaries carry the URL instances
// download them from: the controller address the model's agents use.
type downloadURLs struct {
	muster.AgentBinaryFinder
	base string // https://host:port
}

func (d downloadURLs) FindAgentBinaries(ctx context.Context, version, osName, arch string) ([]muster.AgentBinary, error) {
	bins, err := d.AgentBinaryFinder.FindAgentBinaries(ctx, version, osName, arch)
	for i := range bins {
		if bins[i].URL == "" && bins[i].SHA256 != "" {
			bins[i].URL = d.base + api.AgentBinaryPath + bins[i].SHA256
		}
	}
	return bins, err
}
