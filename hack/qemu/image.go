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
	"sync"
	"time"

	"github.com/u-root/mkuimage/cpio"
	"github.com/u-root/mkuimage/uimage/initramfs"
	"github.com/u-root/u-root/pkg/kmodule"
	"github.com/u-root/u-root/pkg/ldd"
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
	{"depmod", "kmod"},
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

// Modules are the guest's kernel modules: the modules.dep that depmod wrote
// for the kernel package, and the .ko files that GuestModules need.
type Modules struct {
	// Dir is the kernel package's lib/modules/RELEASE directory on the host.
	Dir string
	// Paths are the .ko files GuestModules and their dependencies need,
	// sorted; the guest's init loads them in dependency order itself.
	Paths []string
}

// ResolveModules finds the modules GuestModules need in the kernel package.
// Debian's package ships no modules.dep (its postinst runs depmod), so it
// runs `depmod -b` on the unpacked package once; u-root's kmodule then walks
// that file exactly as it will in the guest, in dry-run mode, and names
// every .ko it would load.
func ResolveModules(ctx context.Context, k Kernel, out io.Writer) (Modules, error) {
	return ResolveModulesNamed(ctx, k, out, GuestModules)
}

// ResolveModulesNamed is ResolveModules for the modules named, which the
// guest may load itself later (hack/peers loads e1000e between phases).
func ResolveModulesNamed(ctx context.Context, k Kernel, out io.Writer, names []string) (Modules, error) {
	m := Modules{Dir: k.Modules}
	root := filepath.Dir(filepath.Dir(filepath.Dir(k.Modules))) // ROOT/lib/modules/RELEASE
	if _, err := os.Stat(filepath.Join(k.Modules, "modules.dep")); err != nil {
		if err := command(ctx, 2*time.Minute, out, "", "depmod", "-b", root, k.Release); err != nil {
			return Modules{}, fmt.Errorf("%w (depmod is in the kmod package)", err)
		}
	}
	var mu sync.Mutex // kmodule loads independent dependencies concurrently
	p, err := kmodule.NewProber(kmodule.ProbeOpts{
		RootDir:        root,
		KVer:           k.Release,
		IgnoreProcMods: true, // the host's loaded modules say nothing about the guest
		DryRunCB: func(path string) {
			mu.Lock()
			m.Paths = append(m.Paths, path)
			mu.Unlock()
		},
	})
	if err != nil {
		return Modules{}, fmt.Errorf("reading %s: %w", filepath.Join(k.Modules, "modules.dep"), err)
	}
	for _, name := range names {
		if err := p.Probe(name, ""); err != nil {
			return Modules{}, fmt.Errorf("module %s of kernel %s: %w", name, k.Release, err)
		}
	}
	sort.Strings(m.Paths)
	return m, nil
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

// What the guest gets. These two lists are the places to extend when a new
// package's tests need a real device (a `go test -c` binary and its
// testdata per package) or the guest needs another kernel module.
var (
	// DefaultPackages are the packages whose tests run in the guest: the
	// ones with tests that need root, hugepages or real VFIO devices. A
	// package written PATH@PATTERN runs only its tests that match
	// -test.run=PATTERN there (transport/nic: its tests over the VFIO
	// NICs, as its model tests need no device and take minutes under TCG;
	// mx: the forged-frame attack over the VFIO NICs, endpoints of queued
	// boards steered by the 82574's RSS, and the zero-copy tests' subtests
	// over the VFIO pair, whose other subtests use the models and run on
	// the host).
	DefaultPackages = []string{"./pci", "./hugepage", "./vfio", "./nicdrv/e1000e",
		"./transport/nic@^(TestConformanceVFIO|TestMXSizeClasses)$", "./mx@" + mxVFIOTests}

	// GuestModules are the kernel modules the guest's init loads, by name;
	// u-root's kmodule loads their dependencies first, from modules.dep.
	GuestModules = []string{"vfio-pci", "vfio_iommu_type1", "uio_pci_generic"}

	// USBPackages are the packages whose tests run in the usb
	// configuration (Config.USB), in place of DefaultPackages: built with
	// cgo and the usb build tag against libusb (USBBuildPackages on the
	// host), with the shared libraries they need and the dynamic loader
	// beside them in the image, as u-root's ldd names them.
	USBPackages = []string{"./nicdrv/usbnet@^TestQEMU/^(PoolExhaustion|Restart|NoDMAAfterClose|Rules|Filters|Interrupts|Attached)$"}

	// USBGuestModules are the modules the usb configuration loads besides
	// GuestModules: the xHCI host controller driver (usbcore comes with
	// it) and the kernel's CDC Ethernet driver, which claims the usb-net
	// until gomx's driver detaches it, and takes it back after.
	USBGuestModules = []string{"xhci_pci", "cdc_ether"}

	// USBBuildPackages are the Debian packages the cgo build of
	// USBPackages needs on the host.
	USBBuildPackages = []string{"libusb-1.0-0-dev", "pkg-config", "gcc"}
)

// mxVFIOTests is the -test.run pattern of mx's tests in the guest: the
// tests over the VFIO NICs, and the VFIO subtests (zcVFIOModels) of the
// zero-copy tests that loop over NIC pairs. A test without subtests runs
// whole when its name matches; a listed test with subtests runs only
// those whose names contain "VFIO", so a subtest added to one of the
// VFIO-only tests must carry "VFIO" in its name or the guest skips it
// and still reports a pass.
const mxVFIOTests = "^(TestForgedFramesVFIO|TestQueuedRSSVFIO|TestZeroCopyReceiveInPlaceVFIO|" +
	"TestZeroCopyByteExact|TestZeroCopyGuard|TestZeroCopyCache|TestZeroCopyFaults|TestPlacedPullTruncated)$/VFIO"

// USBTestDir is the guest directory of the USBPackages test binaries; the
// usb configuration's init runs the binaries there (-tests), and the other
// configurations never see them.
const USBTestDir = "/tests-usb"

// TestRunFile is the file beside a guest test binary that holds its
// -test.run pattern, when its package was given as PATH@PATTERN.
const TestRunFile = "run"

// NoIOMMUVfioPath is where the rebuilt vfio.ko sits in the initramfs. The
// no-IOMMU configuration loads it before GuestModules, so that kmodule finds
// vfio already loaded and does not load Debian's.
const NoIOMMUVfioPath = "/mods/vfio-noiommu.ko"

// Image describes what goes into the guest's initramfs.
type Image struct {
	// Repo is the repository root.
	Repo string
	// Kernel supplies the modules.
	Kernel Kernel
	// Modules are the stock modules the guest loads.
	Modules Modules
	// NoIOMMUVfio is the rebuilt vfio.ko, "" when no configuration needs it.
	NoIOMMUVfio string
	// Packages are the Go packages whose tests run in the guest
	// ("./vfio"), each optionally followed by @PATTERN to run only the
	// tests -test.run=PATTERN selects; their testdata directories go with
	// them.
	Packages []string
	// USBPackages are packages written as Packages whose test binaries are
	// built with cgo and the usb tag into USBTestDir, with the shared
	// libraries they load.
	USBPackages []string
	// Programs are main packages built (static) into /bin/NAME, NAME being
	// the package's last element.
	Programs []string
	// USBPrograms are main packages built like Programs but with cgo and
	// the usb tag, with the shared libraries they load (mxbench with
	// gomx's libusb device, for hack/peers).
	USBPrograms []string
	// Files are host files (absolute paths, copied with their own paths; a
	// symbolic link to another of them stays a link) such as a dynamically linked program and
	// the libraries ldd names for it.
	Files []string
}

// Build compiles the init and the test binaries (static, CGO_ENABLED=0;
// those of USBPackages with cgo, beside their shared libraries) in dir and
// writes the gzip-compressed initramfs to dir/initramfs.cpio.gz,
// whose path it returns. The archive is laid out by u-root's initramfs
// package: parents before children, host files read as they are written.
func (im Image) Build(ctx context.Context, dir string, out io.Writer, log logf) (string, error) {
	files := initramfs.NewFiles()
	for _, d := range []string{"dev", "proc", "sys", "tmp", "mods", "tests", "bin", strings.TrimPrefix(USBTestDir, "/")} {
		if err := files.AddRecord(cpio.Directory(d, 0o755)); err != nil {
			return "", err
		}
	}
	// PID 1 gets /dev/console as stdin, stdout and stderr only if the node
	// exists before devtmpfs is mounted.
	for _, r := range []cpio.Record{cpio.CharDev("dev/console", 0o600, 5, 1), cpio.CharDev("dev/null", 0o666, 1, 3)} {
		if err := files.AddRecord(r); err != nil {
			return "", err
		}
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
	if len(im.Programs) > 0 {
		log("building the guest init and the programs %s", strings.Join(im.Programs, " "))
	} else {
		all := append(append([]string(nil), im.Packages...), im.USBPackages...)
		log("building the guest init and %d test binaries (%s)", len(all), strings.Join(all, " "))
	}
	initBin := filepath.Join(dir, "init")
	if err := build("build", "-trimpath", "-ldflags=-s -w", "-o", initBin, "./hack/qemu/init"); err != nil {
		return "", err
	}
	if err := files.AddFile(initBin, "init"); err != nil {
		return "", err
	}
	for _, pkg := range im.Packages {
		if _, err := addTest(files, "tests", pkg, im.Repo, dir, build); err != nil {
			return "", err
		}
	}
	var libRoots []string
	for _, pkg := range im.USBPackages {
		bin, err := addTest(files, strings.TrimPrefix(USBTestDir, "/"), pkg, im.Repo, dir, func(args ...string) error {
			return buildCgo(ctx, im.Repo, out, append([]string{args[0], "-tags=usb"}, args[1:]...)...)
		})
		if err != nil {
			return "", err
		}
		libRoots = append(libRoots, bin)
	}
	for _, p := range im.USBPrograms {
		bin := filepath.Join(dir, "usb-"+filepath.Base(p))
		if err := buildCgo(ctx, im.Repo, out, "build", "-tags=usb", "-trimpath", "-o", bin, p); err != nil {
			return "", err
		}
		if err := files.AddFile(bin, "bin/"+filepath.Base(p)); err != nil {
			return "", err
		}
		libRoots = append(libRoots, bin)
	}
	if len(libRoots) > 0 {
		libs, err := ldd.List(libRoots...)
		if err != nil {
			return "", fmt.Errorf("ldd %s: %w", strings.Join(libRoots, " "), err)
		}
		im.Files = append(append([]string(nil), im.Files...), libs...)
	}
	for _, p := range im.Programs {
		bin := filepath.Join(dir, filepath.Base(p))
		if err := build("build", "-trimpath", "-o", bin, p); err != nil {
			return "", err
		}
		if err := files.AddFile(bin, "bin/"+filepath.Base(p)); err != nil {
			return "", err
		}
	}
	inImage := map[string]bool{}
	for _, f := range im.Files {
		inImage[f] = true
	}
	for _, f := range im.Files {
		if !filepath.IsAbs(f) {
			return "", fmt.Errorf("image file %q: want an absolute host path", f)
		}
		name := strings.TrimPrefix(f, "/")
		// A library's symbolic link to another file of the list stays a
		// link: a copy would be a distinct file, which the dynamic loader
		// (and DPDK's plugin loader) would load twice. A link to a file
		// not in the list is copied.
		if target, err := os.Readlink(f); err == nil {
			abs := target
			if !filepath.IsAbs(abs) {
				abs = filepath.Join(filepath.Dir(f), target)
			}
			if inImage[abs] {
				if err := files.AddRecord(cpio.Symlink(name, target)); err != nil {
					return "", err
				}
				continue
			}
		}
		if err := files.AddFile(f, name); err != nil {
			return "", err
		}
	}
	if err := im.Modules.add(files, im.Kernel.Release); err != nil {
		return "", err
	}
	if im.NoIOMMUVfio != "" {
		if err := files.AddFile(im.NoIOMMUVfio, strings.TrimPrefix(NoIOMMUVfioPath, "/")); err != nil {
			return "", err
		}
	}
	path := filepath.Join(dir, "initramfs.cpio.gz")
	if err := WriteInitramfs(path, files); err != nil {
		return "", err
	}
	return path, nil
}

// addTest builds the test binary of pkg (PATH[@PATTERN]) with build into
// dir and adds it to files as ROOT/NAME/NAME.test, with its -test.run
// pattern file and its testdata. It returns the binary's host path.
func addTest(files *initramfs.Files, root, pkg, repo, dir string, build func(args ...string) error) (string, error) {
	p, pattern, _ := strings.Cut(pkg, "@")
	name := filepath.Base(p)
	bin := filepath.Join(dir, filepath.Base(root)+"-"+name+".test")
	if err := build("test", "-c", "-o", bin, p); err != nil {
		return "", err
	}
	if err := files.AddFile(bin, root+"/"+name+"/"+name+".test"); err != nil {
		return "", err
	}
	if pattern != "" {
		// The init passes it as -test.run (TestRunFile).
		if err := files.AddRecord(cpio.StaticFile(root+"/"+name+"/"+TestRunFile, pattern, 0o644)); err != nil {
			return "", err
		}
	}
	testdata := filepath.Join(repo, p, "testdata")
	if _, err := os.Stat(testdata); err == nil {
		if err := files.AddFile(testdata, root+"/"+name+"/testdata"); err != nil {
			return "", err
		}
	}
	return bin, nil
}

// buildCgo runs the go command with cgo on, for the test binaries that
// link libusb: they are dynamically linked, since Debian's static libusb
// needs a libudev it ships no static library of.
func buildCgo(ctx context.Context, repo string, out io.Writer, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "GOOS=linux", "GOARCH=amd64", "GOFLAGS=-buildvcs=false")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s (cgo, needs %s): %w", strings.Join(args, " "), strings.Join(USBBuildPackages, " "), err)
	}
	return nil
}

// EnsureUSBBuild installs USBBuildPackages with apt-get (as root) when
// pkg-config does not know libusb-1.0.
func EnsureUSBBuild(ctx context.Context, out io.Writer, log logf) error {
	if exec.CommandContext(ctx, "pkg-config", "--exists", "libusb-1.0").Run() == nil {
		if _, err := exec.LookPath("gcc"); err == nil {
			return nil
		}
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("the usb configuration builds its tests against libusb: install %s (apt-get install %s) or run as root", strings.Join(USBBuildPackages, ", "), strings.Join(USBBuildPackages, " "))
	}
	log("installing %s with apt-get", strings.Join(USBBuildPackages, " "))
	return aptInstall(ctx, out, USBBuildPackages...)
}

// add puts modules.dep and the modules at their standard places,
// lib/modules/RELEASE/..., where kmodule looks for them in the guest.
func (m Modules) add(files *initramfs.Files, release string) error {
	dst := "lib/modules/" + release
	if err := files.AddFile(filepath.Join(m.Dir, "modules.dep"), dst+"/modules.dep"); err != nil {
		return err
	}
	for _, p := range m.Paths {
		rel, err := filepath.Rel(m.Dir, p)
		if err != nil || strings.HasPrefix(rel, "..") {
			return fmt.Errorf("module %s is outside %s", p, m.Dir)
		}
		if err := files.AddFile(p, dst+"/"+filepath.ToSlash(rel)); err != nil {
			return err
		}
	}
	return nil
}

// WriteInitramfs writes files as a gzip-compressed newc cpio archive (the
// format the kernel unpacks into its initial root file system) to path,
// with u-root's cpio writer. Parent directories that were not added are
// added, so the kernel creates every path.
func WriteInitramfs(path string, files *initramfs.Files) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	zw, _ := gzip.NewWriterLevel(f, gzip.BestSpeed)
	w := gzipCPIO{RecordWriter: cpio.Newc.Writer(zw), zw: zw, f: f}
	if err := files.WriteTo(w); err != nil {
		w.Finish()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := w.Finish(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// gzipCPIO is an initramfs.Writer that compresses the archive as it goes.
type gzipCPIO struct {
	cpio.RecordWriter
	zw *gzip.Writer
	f  *os.File
}

// Finish writes the trailer record and closes the compressor and the file.
func (w gzipCPIO) Finish() error {
	return errors.Join(cpio.WriteTrailer(w), w.zw.Close(), w.f.Close())
}
