package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	pathpkg "path"
	"slices"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"
	"github.com/musterhq/muster"
)

// ImageRepository is the repository of agent images; the tag is the first
// 12 hex digits of the agent binary's SHA-256 (of a static binary) or of
// agentRoot.TagSum (binary, loader and libraries of a dynamic one).
const ImageRepository = "muster-agent"

// LabelAgentRootSHA256 labels the image of a dynamically linked agent with
// agentRoot.TagSum.
const LabelAgentRootSHA256 = "muster-agent-root-sha256"

// dockerfile is the whole recipe: the agent binary, and for a dynamic one
// its loader and libraries, on an empty filesystem. The agent config is
// copied in per container.
const dockerfile = `FROM scratch
COPY rootfs/ /
ENTRYPOINT ["` + AgentPath + `", "agent", "--config", "` + AgentConfigPath + `"]
`

// dockerfileFor is the Dockerfile of root.
func dockerfileFor(root *agentRoot) string {
	if len(root.LibDirs) == 0 {
		return dockerfile
	}
	env := "ENV LD_LIBRARY_PATH=" + strings.Join(root.LibDirs, ":") + "\n"
	i := strings.Index(dockerfile, "ENTRYPOINT")
	return dockerfile[:i] + env + dockerfile[i:]
}

// buildSem serialises image builds in this process, so that providers of
// several models sharing one binary build it once.
var buildSem = make(chan struct{}, 1)

// acquire takes sem or gives up when ctx ends; release with <-sem.
func acquire(ctx context.Context, sem chan struct{}) error {
	select {
	case sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type agentImage struct {
	Ref    string // muster-agent:<sha12>
	ID     string
	SHA256 string
	Arch   string // muster arch name, e.g. amd64
}

type engineInfo struct {
	NCPU     int
	MemTotal int64 // bytes
	Arch     string
}

// engineInfo returns the engine's CPUs, memory and architecture, fetched
// once.
func (p *Provider) engineInfo(ctx context.Context) (*engineInfo, error) {
	p.mu.Lock()
	ei := p.engine
	p.mu.Unlock()
	if ei != nil {
		return ei, nil
	}
	res, err := p.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return nil, classify(err, "engine info")
	}
	ei = &engineInfo{NCPU: res.Info.NCPU, MemTotal: res.Info.MemTotal, Arch: engineArch(res.Info.Architecture)}
	p.mu.Lock()
	p.engine = ei
	p.mu.Unlock()
	return ei, nil
}

// engineArch maps uname machine names to muster's arch names.
func engineArch(m string) string {
	switch m {
	case "x86_64", "amd64":
		return "amd64"
	case "aarch64", "arm64":
		return "arm64"
	case "ppc64le", "ppc64el":
		return "ppc64el"
	}
	return m
}

// elfArch maps an ELF machine to muster's arch name.
func elfArch(m elf.Machine) string {
	switch m {
	case elf.EM_X86_64:
		return "amd64"
	case elf.EM_AARCH64:
		return "arm64"
	case elf.EM_PPC64:
		return "ppc64el"
	case elf.EM_S390:
		return "s390x"
	case elf.EM_RISCV:
		return "riscv64"
	}
	return m.String()
}

// EnsureImage returns the agent image reference, building the image from
// Config.AgentBinary when no image for this binary exists yet. The result is
// cached for the life of the provider.
func (p *Provider) EnsureImage(ctx context.Context) (string, error) {
	img, err := p.ensureImage(ctx, p.cfg.AgentBinary, "")
	if err != nil {
		return "", err
	}
	return img.Ref, nil
}

// agentFor picks the binary of a start: the first local linux binary of the
// engine's arch in sp.AgentBinaries (the catalogue's choice for the
// machine's version), else Config.AgentBinary.
func (p *Provider) agentFor(sp muster.StartParams, arch string) (path, sum string) {
	for _, b := range sp.AgentBinaries {
		if b.Path != "" && (b.OS == "" || b.OS == "linux") && (b.Arch == "" || b.Arch == arch) {
			return b.Path, strings.ToLower(b.SHA256)
		}
	}
	return p.cfg.AgentBinary, ""
}

// ensureImage returns the image of the binary at path, building it when
// missing. wantSum, when known, is the binary's SHA-256: an image of a
// static binary already labelled with it is used without reading the
// binary, and a binary that does not match it is refused.
func (p *Provider) ensureImage(ctx context.Context, path, wantSum string) (*agentImage, error) {
	key := path
	if wantSum != "" {
		key = "sha256:" + wantSum
	}
	p.mu.Lock()
	img := p.images[key]
	p.mu.Unlock()
	if img != nil {
		return img, nil
	}
	ei, err := p.engineInfo(ctx)
	if err != nil {
		return nil, err
	}
	if err := acquire(ctx, buildSem); err != nil {
		return nil, fmt.Errorf("agent image of %s: %w", path, err)
	}
	defer func() { <-buildSem }()

	var ins client.ImageInspectResult
	var ref string
	found := false
	if wantSum != "" {
		if len(wantSum) < 12 {
			return nil, zoneIndependent("agent binary %s: bad sha256 %q", path, wantSum)
		}
		ref = ImageRepository + ":" + wantSum[:12]
		ins, err = p.cli.ImageInspect(ctx, ref)
		switch {
		case err == nil && ins.Config != nil && ins.Config.Labels[LabelAgentSHA256] == wantSum && ins.Config.Labels[LabelAgentRootSHA256] == "":
			found = true
		case err != nil && !cerrdefs.IsNotFound(err):
			return nil, classify(err, "inspect image "+ref)
		}
	}
	sum := wantSum
	if !found {
		root, err := p.readAgent(path, ei.Arch)
		if err != nil {
			return nil, err
		}
		if wantSum != "" && root.SHA256 != wantSum {
			return nil, zoneIndependent("agent binary %s does not match its sha256 %s", path, wantSum)
		}
		sum = root.SHA256
		tagSum := root.TagSum()
		rootLabel := ""
		if root.Dynamic() {
			rootLabel = tagSum
		}
		ref = ImageRepository + ":" + tagSum[:12]
		ins, err = p.cli.ImageInspect(ctx, ref)
		switch {
		case err == nil && ins.Config != nil && ins.Config.Labels[LabelAgentSHA256] == sum && ins.Config.Labels[LabelAgentRootSHA256] == rootLabel:
			// Reuse.
		case err == nil || cerrdefs.IsNotFound(err):
			if err := p.buildImage(ctx, ref, path, root); err != nil {
				return nil, err
			}
			if ins, err = p.cli.ImageInspect(ctx, ref); err != nil {
				return nil, classify(err, "inspect built image "+ref)
			}
		default:
			return nil, classify(err, "inspect image "+ref)
		}
	}
	img = &agentImage{Ref: ref, ID: ins.ID, SHA256: sum, Arch: engineArch(ins.Architecture)}
	if img.Arch == "" {
		img.Arch = ei.Arch
	}
	p.mu.Lock()
	p.images[key] = img
	p.mu.Unlock()
	return img, nil
}

// readAgent reads a binary, and the loader and libraries of a dynamic one,
// and checks that it runs on the engine.
func (p *Provider) readAgent(path, engineArch string) (*agentRoot, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, zoneIndependent("read agent binary: %v", err)
	}
	root, err := agentRootOf(path, data)
	if err != nil {
		return nil, err
	}
	if root.Arch != engineArch {
		return nil, zoneIndependent("agent binary %s is for %s but the docker engine runs %s", path, root.Arch, engineArch)
	}
	return root, nil
}

// buildContext is a tar of the Dockerfile and rootfs/: the binary as
// rootfs/muster, and the loader and libraries under their paths.
func buildContext(root *agentRoot) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	type file struct {
		name string
		mode int64
		data []byte
	}
	files := []file{
		{"Dockerfile", 0o644, []byte(dockerfileFor(root))},
		{"rootfs" + AgentPath, 0o755, root.Binary},
	}
	dirs := map[string]bool{"rootfs": true}
	var dirList []string
	for _, f := range root.Files {
		name := "rootfs" + f.Path
		for d := pathpkg.Dir(name); !dirs[d]; d = pathpkg.Dir(d) {
			dirs[d] = true
			dirList = append(dirList, d)
		}
		files = append(files, file{name, 0o755, f.Data})
	}
	slices.Sort(dirList)
	if err := tw.WriteHeader(&tar.Header{Name: "rootfs/", Mode: 0o755, Typeflag: tar.TypeDir}); err != nil {
		return nil, err
	}
	for _, d := range dirList {
		if err := tw.WriteHeader(&tar.Header{Name: d + "/", Mode: 0o755, Typeflag: tar.TypeDir}); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (p *Provider) buildImage(ctx context.Context, ref, path string, root *agentRoot) error {
	bc, err := buildContext(root)
	if err != nil {
		return fmt.Errorf("docker: build context: %w", err)
	}
	labels := map[string]string{LabelImage: "agent", LabelAgentSHA256: root.SHA256}
	if root.Dynamic() {
		labels[LabelAgentRootSHA256] = root.TagSum()
	}
	p.log.Info("building agent image", "image", ref, "binary", path, "libraries", len(root.Files))
	res, err := p.cli.ImageBuild(ctx, bytes.NewReader(bc), client.ImageBuildOptions{
		Tags:        []string{ref},
		Dockerfile:  "Dockerfile",
		Remove:      true,
		ForceRemove: true,
		Version:     build.BuilderV1,
		Labels:      labels,
	})
	if err != nil {
		return classify(err, "build image "+ref)
	}
	defer res.Body.Close()
	dec := json.NewDecoder(res.Body)
	for {
		var m jsonstream.Message
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			if ctx.Err() != nil {
				return classify(ctx.Err(), "build image "+ref)
			}
			return classify(err, "read build output of "+ref)
		}
		if m.Error != nil {
			return zoneIndependent("build image %s: %s", ref, m.Error.Message)
		}
	}
	p.mu.Lock()
	p.builds++
	p.mu.Unlock()
	p.log.Info("agent image built", "image", ref)
	return nil
}
