package qemu

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Guest kernel: Debian's package, pinned, with a fallback.
const (
	// KernelPackage is the pinned guest kernel package.
	KernelPackage = "linux-image-6.1.0-56-amd64"
	// KernelMetaPackage is what the fallback asks for when the archive no
	// longer has KernelPackage: whichever kernel it depends on.
	KernelMetaPackage = "linux-image-amd64"
)

// Kernel is the unpacked guest kernel.
type Kernel struct {
	// Release is the kernel release ("6.1.0-56-amd64").
	Release string
	// Vmlinux is the uncompressed ELF, which QEMU boots through PVH
	// (seconds faster than the bzImage under TCG).
	Vmlinux string
	// Modules is the lib/modules/RELEASE directory of the package.
	Modules string
}

// logf is where the host side reports progress.
type logf func(format string, args ...any)

// command runs a program with a timeout, its output going to the log
// writer, and names the program and the fix in its error.
func command(ctx context.Context, timeout time.Duration, out io.Writer, dir, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%s %s: timed out after %v", name, strings.Join(args, " "), timeout)
		}
		return fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return nil
}

// tools maps the programs the host side runs to their Debian packages.
var tools = []struct{ prog, pkg string }{
	{"qemu-system-x86_64", "qemu-system-x86"},
	{"modinfo", "kmod"},
	{"xz", "xz-utils"},
	{"dpkg-deb", "dpkg"},
	{"apt-get", "apt"},
}

// EnsureTools installs the Debian packages of missing host programs with
// apt-get (as root), once: a machine that has them all is left alone.
func EnsureTools(ctx context.Context, out io.Writer, log logf) error {
	var missing []string
	for _, t := range tools {
		if _, err := exec.LookPath(t.prog); err != nil {
			missing = append(missing, t.pkg)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("missing host packages %s: install them (apt-get install %s) or run as root", strings.Join(missing, ", "), strings.Join(missing, " "))
	}
	log("installing %s with apt-get", strings.Join(missing, " "))
	return aptInstall(ctx, out, missing...)
}

func aptInstall(ctx context.Context, out io.Writer, pkgs ...string) error {
	args := append([]string{"-o", "DPkg::Lock::Timeout=300", "install", "-y", "-q", "--no-install-recommends"}, pkgs...)
	if err := command(ctx, 10*time.Minute, out, "", "apt-get", args...); err == nil {
		return nil
	}
	if err := command(ctx, 5*time.Minute, out, "", "apt-get", "-o", "DPkg::Lock::Timeout=300", "update", "-q"); err != nil {
		return err
	}
	return command(ctx, 10*time.Minute, out, "", "apt-get", args...)
}

// FetchKernel downloads the guest kernel package with apt-get download into
// cache (once), unpacks it, and extracts the uncompressed vmlinux. When the
// archive no longer has KernelPackage it warns and takes the kernel
// KernelMetaPackage depends on.
func FetchKernel(ctx context.Context, cache string, out io.Writer, log logf) (Kernel, error) {
	debs := filepath.Join(cache, "debs")
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return Kernel{}, err
	}
	pkg := KernelPackage
	deb, err := findDeb(debs, pkg)
	if err != nil {
		log("downloading %s", pkg)
		if err := download(ctx, debs, pkg, out); err != nil {
			fallback, ferr := metaDependency(ctx)
			if ferr != nil {
				return Kernel{}, fmt.Errorf("%w; and resolving %s failed: %w", err, KernelMetaPackage, ferr)
			}
			log("WARNING: %s is not in the archive (%v); falling back to %s, which %s depends on", pkg, err, fallback, KernelMetaPackage)
			pkg = fallback
			if _, err := findDeb(debs, pkg); err != nil {
				if err := download(ctx, debs, pkg, out); err != nil {
					return Kernel{}, err
				}
			}
		}
		if deb, err = findDeb(debs, pkg); err != nil {
			return Kernel{}, err
		}
	}
	release := strings.TrimPrefix(pkg, "linux-image-")
	root := filepath.Join(cache, "kernel-"+release)
	k := Kernel{
		Release: release,
		Vmlinux: filepath.Join(cache, "vmlinux-"+release),
		Modules: filepath.Join(root, "lib", "modules", release),
	}
	if _, err := os.Stat(k.Modules); err != nil {
		log("unpacking %s", filepath.Base(deb))
		tmp := root + ".tmp"
		os.RemoveAll(tmp)
		if err := command(ctx, 2*time.Minute, out, "", "dpkg-deb", "-x", deb, tmp); err != nil {
			return Kernel{}, err
		}
		if err := os.Rename(tmp, root); err != nil {
			return Kernel{}, err
		}
	}
	if _, err := os.Stat(k.Vmlinux); err != nil {
		log("extracting vmlinux from vmlinuz-%s", release)
		if err := extractVmlinux(ctx, filepath.Join(root, "boot", "vmlinuz-"+release), k.Vmlinux); err != nil {
			return Kernel{}, err
		}
	}
	return k, nil
}

// findDeb returns the downloaded .deb of pkg in dir.
func findDeb(dir, pkg string) (string, error) {
	m, _ := filepath.Glob(filepath.Join(dir, pkg+"_*.deb"))
	if len(m) == 0 {
		return "", fmt.Errorf("no %s .deb in %s", pkg, dir)
	}
	sort.Strings(m)
	return m[len(m)-1], nil
}

// download runs apt-get download for pkg in dir, after apt-get update when
// the first attempt fails (a fresh machine may have no package lists).
func download(ctx context.Context, dir, pkg string, out io.Writer) error {
	if err := command(ctx, 5*time.Minute, out, dir, "apt-get", "download", pkg); err == nil {
		return nil
	}
	if os.Geteuid() == 0 {
		_ = command(ctx, 5*time.Minute, out, "", "apt-get", "-o", "DPkg::Lock::Timeout=300", "update", "-q")
	}
	return command(ctx, 5*time.Minute, out, dir, "apt-get", "download", pkg)
}

// metaDependency returns the linux-image package KernelMetaPackage depends
// on.
func metaDependency(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	b, err := exec.CommandContext(ctx, "apt-cache", "depends", KernelMetaPackage).Output()
	if err != nil {
		return "", fmt.Errorf("apt-cache depends %s: %w", KernelMetaPackage, err)
	}
	return parseDepends(string(b))
}

// parseDepends finds the linux-image dependency in apt-cache depends output.
func parseDepends(s string) (string, error) {
	for _, line := range strings.Split(s, "\n") {
		dep, ok := strings.CutPrefix(strings.TrimSpace(line), "Depends: ")
		if ok && strings.HasPrefix(dep, "linux-image-") {
			return strings.TrimSpace(dep), nil
		}
	}
	return "", fmt.Errorf("no linux-image dependency in %q", s)
}

// xzMagic starts an xz stream.
var xzMagic = []byte("\xfd7zXZ\x00")

// extractVmlinux decompresses the xz-compressed kernel inside a bzImage to
// an ELF file. xz reports the bytes after the stream as an error, which is
// expected; the result is checked to be an ELF instead.
func extractVmlinux(ctx context.Context, vmlinuz, out string) error {
	b, err := os.ReadFile(vmlinuz)
	if err != nil {
		return err
	}
	i := bytes.Index(b, xzMagic)
	if i < 0 {
		return fmt.Errorf("%s has no xz stream: cannot extract vmlinux", vmlinuz)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "xz", "-dc", "--single-stream")
	cmd.Stdin = bytes.NewReader(b[i:])
	elf, err := cmd.Output()
	if len(elf) < 4 || string(elf[:4]) != "\x7fELF" {
		return fmt.Errorf("decompressing %s: not an ELF (%v)", vmlinuz, err)
	}
	if err := os.WriteFile(out+".tmp", elf, 0o644); err != nil {
		return err
	}
	return os.Rename(out+".tmp", out)
}

// moduleRoots are the modules the guest needs; their dependencies come
// from modinfo.
var moduleRoots = []string{"vfio-pci", "vfio_iommu_type1", "uio_pci_generic"}

// Modules lists kernel modules in load order: dependencies first.
type Modules struct {
	// Paths are the .ko files in load order.
	Paths []string
}

// ResolveModules finds the guest's modules in the kernel package and
// orders them so that every module comes after the ones it depends on.
func ResolveModules(ctx context.Context, k Kernel) (Modules, error) {
	byName := map[string]string{}
	err := filepath.WalkDir(filepath.Join(k.Modules, "kernel"), func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".ko") {
			byName[modName(filepath.Base(p))] = p
		}
		return err
	})
	if err != nil {
		return Modules{}, err
	}
	deps := func(name string) ([]string, error) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		b, err := exec.CommandContext(ctx, "modinfo", "-F", "depends", byName[name]).Output()
		if err != nil {
			return nil, fmt.Errorf("modinfo %s: %w (install kmod)", byName[name], err)
		}
		var out []string
		for _, d := range strings.Split(strings.TrimSpace(string(b)), ",") {
			if d != "" {
				out = append(out, modName(d))
			}
		}
		return out, nil
	}
	var m Modules
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(name string, depth int) error
	visit = func(name string, depth int) error {
		if depth > 32 {
			return fmt.Errorf("module dependencies of %s nest too deep", name)
		}
		switch state[name] {
		case 1:
			return fmt.Errorf("module dependency cycle through %s", name)
		case 2:
			return nil
		}
		if byName[name] == "" {
			return fmt.Errorf("module %s is not in %s", name, k.Modules)
		}
		state[name] = 1
		ds, err := deps(name)
		if err != nil {
			return err
		}
		for _, d := range ds {
			if err := visit(d, depth+1); err != nil {
				return err
			}
		}
		state[name] = 2
		m.Paths = append(m.Paths, byName[name])
		return nil
	}
	for _, r := range moduleRoots {
		if err := visit(modName(r), 0); err != nil {
			return Modules{}, err
		}
	}
	return m, nil
}

// modName normalises a module name: the kernel treats - and _ alike.
func modName(s string) string {
	return strings.ReplaceAll(strings.TrimSuffix(s, ".ko"), "-", "_")
}

// BuildNoIOMMUVfio builds (once, cached) a vfio.ko with CONFIG_VFIO_NOIOMMU
// for the kernel, with build-vfio-noiommu.sh, and returns its path.
func BuildNoIOMMUVfio(ctx context.Context, repo, cache string, k Kernel, out io.Writer, log logf) (string, error) {
	ko := filepath.Join(cache, "vfio-noiommu-"+k.Release+".ko")
	if _, err := os.Stat(ko); err == nil {
		return ko, nil
	}
	log("building vfio.ko with CONFIG_VFIO_NOIOMMU (first run only; installs linux-headers-%s and linux-source)", k.Release)
	script := filepath.Join(repo, "hack", "qemu", "build-vfio-noiommu.sh")
	if err := command(ctx, 15*time.Minute, out, repo, "bash", script, k.Release, ko); err != nil {
		return "", err
	}
	return ko, nil
}

// Image describes what goes into the guest's initramfs.
type Image struct {
	// Repo is the repository root.
	Repo string
	// Kernel supplies the modules.
	Kernel Kernel
	// Modules are the stock modules in load order.
	Modules Modules
	// NoIOMMUVfio is the rebuilt vfio.ko, "" when no configuration needs it.
	NoIOMMUVfio string
	// Packages are the Go packages whose tests run in the guest
	// ("./vfio"); their testdata directories go with them.
	Packages []string
}

// DefaultPackages are the packages whose tests run in the guest: the ones
// with tests that need root, hugepages or real VFIO devices.
var DefaultPackages = []string{"./pci", "./hugepage", "./vfio", "./nicdrv/e1000e", "./transport/nic"}

// Build compiles the init and the test binaries (static, CGO_ENABLED=0) in
// dir and writes the gzip-compressed initramfs to dir/initramfs.cpio.gz,
// whose path it returns.
func (im Image) Build(ctx context.Context, dir string, out io.Writer, log logf) (string, error) {
	a := NewArchive()
	for _, d := range []string{"dev", "proc", "sys", "tmp", "mods", "tests", "bin"} {
		a.Dir(d)
	}
	// PID 1 gets /dev/console as stdin, stdout and stderr only if the node
	// exists before devtmpfs is mounted.
	if err := a.CharDev("dev/console", 0o600, 5, 1); err != nil {
		return "", err
	}
	if err := a.CharDev("dev/null", 0o666, 1, 3); err != nil {
		return "", err
	}
	build := func(args ...string) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = im.Repo
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOFLAGS=-buildvcs=false")
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
		}
		return nil
	}
	log("building the guest init and %d test binaries (%s)", len(im.Packages), strings.Join(im.Packages, " "))
	initBin := filepath.Join(dir, "init")
	if err := build("build", "-trimpath", "-ldflags=-s -w", "-o", initBin, "./hack/qemu/init"); err != nil {
		return "", err
	}
	if err := addFile(a, "init", initBin, 0o755); err != nil {
		return "", err
	}
	for _, p := range im.Packages {
		name := filepath.Base(p)
		bin := filepath.Join(dir, name+".test")
		if err := build("test", "-c", "-o", bin, p); err != nil {
			return "", err
		}
		if err := addFile(a, "tests/"+name+"/"+name+".test", bin, 0o755); err != nil {
			return "", err
		}
		if err := addTree(a, filepath.Join(im.Repo, p, "testdata"), "tests/"+name+"/testdata"); err != nil {
			return "", err
		}
	}

	var iommu, noiommu []string
	for _, p := range im.Modules.Paths {
		base := filepath.Base(p)
		if err := addFile(a, "mods/"+base, p, 0o644); err != nil {
			return "", err
		}
		iommu = append(iommu, base)
		if modName(base) == "vfio" {
			base = "vfio-noiommu.ko enable_unsafe_noiommu_mode=1"
		}
		noiommu = append(noiommu, base)
	}
	if err := a.File("mods/load-iommu.txt", []byte(strings.Join(iommu, "\n")+"\n"), 0o644); err != nil {
		return "", err
	}
	if im.NoIOMMUVfio != "" {
		if err := addFile(a, "mods/vfio-noiommu.ko", im.NoIOMMUVfio, 0o644); err != nil {
			return "", err
		}
		if err := a.File("mods/load-noiommu.txt", []byte(strings.Join(noiommu, "\n")+"\n"), 0o644); err != nil {
			return "", err
		}
	}

	path := filepath.Join(dir, "initramfs.cpio.gz")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	zw, _ := gzip.NewWriterLevel(f, gzip.BestSpeed)
	_, werr := a.WriteTo(zw)
	cerr := zw.Close()
	ferr := f.Close()
	if err := errors.Join(werr, cerr, ferr); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return path, nil
}

func addFile(a *Archive, name, src string, perm uint32) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return a.File(name, b, perm)
}

// addTree adds the regular files under src (if it exists) below dst.
func addTree(a *Archive, src, dst string) error {
	if _, err := os.Stat(src); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		return addFile(a, filepath.ToSlash(filepath.Join(dst, rel)), p, 0o644)
	})
}
