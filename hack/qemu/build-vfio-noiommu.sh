#!/usr/bin/env bash
# Builds vfio.ko with CONFIG_VFIO_NOIOMMU for a Debian kernel whose own vfio.ko
# lacks it (Debian 6.1 does not set the option), so that the QEMU test guest
# can run VFIO's unsafe no-IOMMU mode.
#
#   hack/qemu/build-vfio-noiommu.sh KERNEL_RELEASE OUT.ko
#   e.g. hack/qemu/build-vfio-noiommu.sh 6.1.0-56-amd64 build/qemu/cache/vfio-noiommu-6.1.0-56-amd64.ko
#
# It installs (once) the kernel's headers and Debian's kernel source package
# (linux-source-6.1, a 139 MB download), unpacks only drivers/vfio, and builds
# the vfio module out of tree with the option defined. Only vfio.ko changes:
# the stock vfio_iommu_type1, vfio-pci-core and vfio-pci modules load against
# it because the exported symbols' versions (modversions) are the same. The
# module is unsigned, which the Debian kernel accepts with a taint.
set -euo pipefail

if [ $# -ne 2 ]; then
	echo "usage: $0 KERNEL_RELEASE OUT.ko" >&2
	exit 2
fi
krel=$1
out=$2
series=$(echo "$krel" | sed -E 's/^([0-9]+\.[0-9]+).*/\1/') # 6.1.0-56-amd64 -> 6.1
headers=/usr/src/linux-headers-$krel
tarball=/usr/src/linux-source-$series.tar.xz

apt_install() {
	echo "build-vfio-noiommu: apt-get install $*"
	export DEBIAN_FRONTEND=noninteractive
	apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "$@" ||
		{ apt-get -o DPkg::Lock::Timeout=300 update -q && apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "$@"; }
}

need=()
[ -d "$headers" ] || need+=("linux-headers-$krel")
[ -f "$tarball" ] || need+=("linux-source-$series")
command -v make >/dev/null || need+=(make)
command -v xz >/dev/null || need+=(xz-utils)
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "build-vfio-noiommu: need ${need[*]}; run as root or install them" >&2
		exit 1
	fi
	apt_install "${need[@]}"
fi

# The source package must be the kernel's own version, or the module may not
# match the running kernel's structures.
srcver=$(dpkg-query -W -f='${Version}' "linux-source-$series" 2>/dev/null || echo unknown)
imgver=$(dpkg-query -W -f='${Version}' "linux-headers-$krel" 2>/dev/null || echo unknown)
if [ "$srcver" != "$imgver" ]; then
	echo "build-vfio-noiommu: warning: linux-source-$series is $srcver but linux-headers-$krel is $imgver" >&2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -xJf "$tarball" -C "$work" "linux-source-$series/drivers/vfio"
src=$work/linux-source-$series/drivers/vfio
# Out-of-tree build of vfio.ko alone, from the same objects as the in-tree
# Makefile, with the option the Debian config leaves unset.
cat >"$src/Kbuild" <<'EOF'
ccflags-y += -DCONFIG_VFIO_NOIOMMU=1
obj-m += vfio.o
vfio-y := vfio_main.o iova_bitmap.o container.o
EOF
make -s -C "$headers" M="$src" -j"$(nproc)" modules
mkdir -p "$(dirname "$out")"
cp "$src/vfio.ko" "$out.tmp"
mv "$out.tmp" "$out"
echo "build-vfio-noiommu: built $out"
