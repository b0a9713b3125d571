#!/bin/sh
# pkg/mkdeb.sh ROOT OUTDIR: the Debian package of qgate from ROOT, a tree that
# `make install DESTDIR=ROOT PREFIX=/usr` filled (make deb does both). Adds what a .deb has
# beyond an installed tree (a stripped binary, the man page and README gzipped, the copyright
# file and changelog of pkg/debian/ in the doc folder, DEBIAN/ with control, conffiles, md5sums
# and the maintainer scripts of pkg/debian/) and builds OUTDIR/qgate_VERSION_ARCH.deb with
# dpkg-deb, every file owned by root. Prints its path. lintian has nothing to say about it
# (docs/deployment.md).
set -eu
root=${1:?usage: mkdeb.sh ROOT OUTDIR}
out=${2:?usage: mkdeb.sh ROOT OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
umask 022

version=$(sed -n 's/^#define QG_VERSION "\(.*\)"$/\1/p' "$here/../src/base/version.h")
[ -n "$version" ] || { echo "mkdeb.sh: no QG_VERSION in src/base/version.h" >&2; exit 1; }
arch=$(dpkg --print-architecture)
bin="$root/usr/bin/qgate"
[ -x "$bin" ] || { echo "mkdeb.sh: $bin is missing: run make install DESTDIR=$root PREFIX=/usr" >&2; exit 1; }

strip --strip-unneeded --remove-section=.comment --remove-section=.note "$bin"
gzip -9nf "$root/usr/share/man/man1/qgate.1" "$root/usr/share/doc/qgate/README.md"

# the doc folder: copyright (machine-readable), and the changelog as a native package has it
# (changelog.gz). pkg/debian/changelog's first entry should be this version; when it is not (the
# version was raised without one), an entry saying so is put first and make deb warns.
doc="$root/usr/share/doc/qgate"
install -m 0644 "$here/debian/copyright" "$doc/copyright"
top=$(sed -n '1s/^qgate (\([^)]*\)).*/\1/p' "$here/debian/changelog")
if [ "$top" = "$version" ]; then
    cp "$here/debian/changelog" "$doc/changelog"
else
    echo "mkdeb.sh: warning: pkg/debian/changelog has no entry for $version (its first is ${top:-none}): add one" >&2
    maint=$(sed -n 's/^Maintainer: //p' "$here/debian/control.in")
    when=$(git -C "$here/.." log -1 --format=%cD 2>/dev/null || date -R)
    { printf 'qgate (%s) unstable; urgency=medium\n\n' "$version"
      printf '  * qgate %s (src/base/version.h); pkg/debian/changelog has no entry for it.\n\n' "$version"
      printf ' -- %s  %s\n\n' "$maint" "$when"
      cat "$here/debian/changelog"; } > "$doc/changelog"
fi
gzip -9nf "$doc/changelog"

# the libraries it needs, as dpkg-shlibdeps names them (from the symbol versions without it)
if command -v dpkg-shlibdeps >/dev/null 2>&1; then
    abs=$(cd "$(dirname "$bin")" && pwd)/qgate
    work=$(mktemp -d)
    mkdir "$work/debian" && : >"$work/debian/control"
    depends=$(cd "$work" && dpkg-shlibdeps -O -e "$abs" 2>/dev/null |
        sed -n 's/^shlibs:Depends=//p')
    rm -rf "$work"
else
    glibc=$(objdump -T "$bin" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -Vu | tail -n 1)
    depends="libc6 (>= $glibc)"
fi
[ -n "$depends" ] || { echo "mkdeb.sh: cannot tell which libc qgate needs" >&2; exit 1; }

rm -rf "$root/DEBIAN"
mkdir -p "$root/DEBIAN"
size=$(du -sk "$root" | cut -f1)
sed -e "s|@VERSION@|$version|" -e "s|@ARCH@|$arch|" -e "s|@SIZE@|$size|" -e "s|@DEPENDS@|$depends|" \
    "$here/debian/control.in" >"$root/DEBIAN/control"
(cd "$root" && find etc -type f | sort | sed 's|^|/|') >"$root/DEBIAN/conffiles"
(cd "$root" && find usr -type f | sort | xargs md5sum) >"$root/DEBIAN/md5sums"
for s in postinst prerm postrm; do
    install -m 0755 "$here/debian/$s" "$root/DEBIAN/$s"
done
chmod -R u+rwX,go+rX,go-w "$root"

mkdir -p "$out"
deb="$out/qgate_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
