package docker

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// rootFile is a file of an agent image besides the agent binary: the
// dynamic loader or a shared library, copied from the host.
type rootFile struct {
	Path string // absolute path in the image (the path searched, not the symlink target)
	Data []byte
}

// agentRoot is what an agent image holds: the binary, and for a
// dynamically linked binary its loader and libraries.
type agentRoot struct {
	Binary []byte
	SHA256 string // of Binary, hex
	Arch   string
	// Interp is the binary's ELF interpreter; "" for a static binary.
	Interp string
	// Files are the loader and the libraries, sorted by Path.
	Files []rootFile
	// LibDirs are the directories of the libraries, in search order, for
	// LD_LIBRARY_PATH.
	LibDirs []string
}

// Dynamic reports whether the binary needs a loader.
func (r *agentRoot) Dynamic() bool { return r.Interp != "" || len(r.Files) > 0 }

// TagSum is the hash the image is tagged with: the binary's SHA-256 for a
// static binary, else a SHA-256 over the binary's hash and every file's
// path and content, so that the image changes when a library does.
func (r *agentRoot) TagSum() string {
	if !r.Dynamic() {
		return r.SHA256
	}
	h := sha256.New()
	fmt.Fprintf(h, "agent %s\ninterp %s\n", r.SHA256, r.Interp)
	for _, f := range r.Files {
		sum := sha256.Sum256(f.Data)
		fmt.Fprintf(h, "file %s %x\n", f.Path, sum)
	}
	fmt.Fprintf(h, "libdirs %s\n", strings.Join(r.LibDirs, ":"))
	return hex.EncodeToString(h.Sum(nil))
}

// multiarch maps muster arch names to Debian multiarch triplets.
var multiarch = map[string]string{
	"amd64":   "x86_64-linux-gnu",
	"arm64":   "aarch64-linux-gnu",
	"ppc64el": "powerpc64le-linux-gnu",
	"s390x":   "s390x-linux-gnu",
	"riscv64": "riscv64-linux-gnu",
}

// hostLibDirs are the standard directories searched for a library after
// the runpath, in order.
func hostLibDirs(arch string) []string {
	var dirs []string
	if t := multiarch[arch]; t != "" {
		dirs = append(dirs, "/lib/"+t, "/usr/lib/"+t)
	}
	return append(dirs, "/lib64", "/usr/lib64", "/lib", "/usr/lib", "/usr/local/lib")
}

// agentRootOf checks that data (read from path) is a linux ELF executable
// and gathers what it needs to run FROM scratch: nothing for a static
// binary; the interpreter and the DT_NEEDED libraries, recursively,
// resolved from the host's library directories for a dynamic one. A
// library that cannot be found is a zone-independent error.
func agentRootOf(path string, data []byte) (*agentRoot, error) {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return nil, zoneIndependent("agent binary %s is not a linux executable: %v", path, err)
	}
	defer f.Close()
	sum := sha256.Sum256(data)
	r := &agentRoot{Binary: data, SHA256: hex.EncodeToString(sum[:]), Arch: elfArch(f.Machine)}
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, prog.Filesz)
		if _, err := prog.ReadAt(b, 0); err != nil {
			return nil, zoneIndependent("agent binary %s: read its interpreter: %v", path, err)
		}
		r.Interp = strings.TrimRight(string(b), "\x00")
	}
	needed, _ := f.ImportedLibraries()
	if r.Interp == "" && len(needed) == 0 {
		return r, nil
	}
	if r.Interp == "" {
		return nil, zoneIndependent("agent binary %s needs shared libraries %v but names no interpreter; build it static (CGO_ENABLED=0)", path, needed)
	}
	g := &gatherer{
		binary: path,
		class:  f.Class,
		mach:   f.Machine,
		std:    hostLibDirs(r.Arch),
		files:  map[string]rootFile{},
		done:   map[string]bool{},
	}
	if !strings.HasPrefix(r.Interp, "/") {
		return nil, zoneIndependent("agent binary %s has a relative interpreter %q", path, r.Interp)
	}
	interp, err := os.ReadFile(r.Interp)
	if err != nil {
		return nil, zoneIndependent("agent binary %s needs its loader %s, which this host lacks: %v; build it static (CGO_ENABLED=0)", path, r.Interp, err)
	}
	g.files[r.Interp] = rootFile{Path: r.Interp, Data: interp}
	g.exeRPath = g.rpath(f, filepath.Dir(path), true)
	if err := g.need(f, filepath.Dir(path), path); err != nil {
		return nil, err
	}
	for _, rf := range g.files {
		r.Files = append(r.Files, rf)
	}
	slices.SortFunc(r.Files, func(a, b rootFile) int { return strings.Compare(a.Path, b.Path) })
	r.LibDirs = g.dirs
	return r, nil
}

// gatherer resolves libraries the way the dynamic loader would on this
// host.
type gatherer struct {
	binary   string
	class    elf.Class
	mach     elf.Machine
	std      []string
	exeRPath []string // the executable's DT_RPATH, searched for every library
	files    map[string]rootFile
	done     map[string]bool // sonames resolved
	dirs     []string        // directories of resolved libraries, first use first
}

// rpath returns f's search path: DT_RUNPATH, else DT_RPATH (with $ORIGIN
// expanded to origin). exe returns only DT_RPATH, which applies to the
// executable's whole tree.
func (g *gatherer) rpath(f *elf.File, origin string, exe bool) []string {
	var raw []string
	if rp, _ := f.DynString(elf.DT_RUNPATH); len(rp) > 0 {
		if exe {
			return nil
		}
		raw = rp
	} else if rp, _ := f.DynString(elf.DT_RPATH); len(rp) > 0 {
		raw = rp
	}
	var dirs []string
	for _, s := range raw {
		for _, d := range strings.Split(s, ":") {
			d = strings.ReplaceAll(strings.ReplaceAll(d, "${ORIGIN}", origin), "$ORIGIN", origin)
			if d == "" || strings.Contains(d, "$") || !strings.HasPrefix(d, "/") {
				continue
			}
			dirs = append(dirs, path.Clean(d))
		}
	}
	return dirs
}

// need resolves the libraries f (at file, in directory origin) needs, and
// theirs.
func (g *gatherer) need(f *elf.File, origin, file string) error {
	needed, err := f.ImportedLibraries()
	if err != nil {
		return zoneIndependent("agent binary %s: read the libraries %s needs: %v", g.binary, file, err)
	}
	search := append(g.rpath(f, origin, false), g.exeRPath...)
	search = append(search, g.std...)
	for _, name := range needed {
		if g.done[name] {
			continue
		}
		g.done[name] = true
		imgPath, data, err := g.find(name, search)
		if err != nil {
			return err
		}
		if imgPath == "" {
			return zoneIndependent("agent binary %s needs the shared library %s (for %s), which is not in %s on this host; build it static (CGO_ENABLED=0)",
				g.binary, name, file, strings.Join(search, ", "))
		}
		if _, ok := g.files[imgPath]; !ok {
			g.files[imgPath] = rootFile{Path: imgPath, Data: data}
		}
		if d := path.Dir(imgPath); !slices.Contains(g.dirs, d) {
			g.dirs = append(g.dirs, d)
		}
		lf, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			return zoneIndependent("agent binary %s: library %s: %v", g.binary, imgPath, err)
		}
		err = g.need(lf, path.Dir(imgPath), imgPath)
		lf.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// find returns the first library called name in dirs that is an ELF file
// of the binary's class and machine, and its content (symlinks followed);
// "" when there is none.
func (g *gatherer) find(name string, dirs []string) (string, []byte, error) {
	cands := dirs
	if strings.Contains(name, "/") {
		cands = []string{""}
	}
	for _, d := range cands {
		p := name
		if d != "" {
			p = path.Join(d, name)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || isDirErr(p) {
				continue
			}
			return "", nil, zoneIndependent("agent binary %s: read library %s: %v", g.binary, p, err)
		}
		lf, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			continue // e.g. a linker script
		}
		ok := lf.Class == g.class && lf.Machine == g.mach
		lf.Close()
		if ok {
			return p, data, nil
		}
	}
	return "", nil, nil
}

func isDirErr(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
