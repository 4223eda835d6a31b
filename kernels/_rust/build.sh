#!/usr/bin/env bash
# Builds the Rust side of mage: the device crate to PTX (validated by ptxas for sm_90), the host
# cdylib that embeds it, the rust_native benchmark, and two test binaries (host logic and device
# math; the kernels on a CPU emulator), all under build/. What the kernel tables
# (kernels/<op>/rust_table.py) determine is generated first into build/gen/ by gen.py.
# Installs nothing: a missing tool is named together with the Debian package that provides it.
# build.sh --lint: rustfmt --check and clippy (warnings denied) over host and device code instead.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$here/build"
mkdir -p "$out"
arch="${MAGE_SM:-sm_90}"
target=nvptx64-nvidia-cuda

missing() { echo "build.sh: $1 not found. $2" >&2; exit 2; }
kernels="$(cd "$here/.." && pwd)"
if [ "${1:-}" = "--lint" ]; then
  # rustfmt --check and clippy with warnings denied, over host and device code; the device crate is
  # linted as its host build (the emulator), which compiles the same kernel code.
  PYTHON="${PYTHON:-python3}"; "$PYTHON" "$here/gen.py" "$out/gen"
  FMT="${RUSTFMT:-$(command -v rustfmt || true)}"; CLIPPY="${CLIPPY_DRIVER:-$(command -v clippy-driver || true)}"
  [ -n "$FMT" ] || missing "rustfmt" "Install Debian's rustfmt-web (or rustfmt)."
  [ -n "$CLIPPY" ] || missing "clippy-driver" "Install Debian's rust-web-clippy."
  files=("$here"/device/*.rs "$here"/device/gpu/*.rs "$here"/host/src/*.rs "$here"/host/src/bin/*.rs "$kernels"/*/rust.rs)
  "$FMT" --check --edition 2024 --config-path "$here/rustfmt.toml" "${files[@]}"
  lint="$out/lint"; mkdir -p "$lint"
  "$CLIPPY" --edition 2021 --crate-type rlib --crate-name mage_rust "$here/host/src/lib.rs" --out-dir "$lint" -D warnings
  "$CLIPPY" --edition 2021 --test --crate-name mage_rust "$here/host/src/lib.rs" -o "$lint/host_tests" -D warnings
  "$CLIPPY" --edition 2021 --crate-type bin --crate-name rust_native --extern mage_rust="$lint/libmage_rust.rlib" \
    "$here/host/src/bin/rust_native.rs" -o "$lint/rust_native" -D warnings
  "$CLIPPY" --edition 2024 --test --crate-name mage_kernels "$here/device/lib.rs" -o "$lint/device_tests" -D warnings
  echo "build.sh: rustfmt and clippy clean"
  exit 0
fi
PYTHON="${PYTHON:-$(command -v python3 || true)}"
[ -n "$PYTHON" ] || missing "python3" "gen.py derives the kernels' entry points and launch code from their tables."
"$PYTHON" "$here/gen.py" "$out/gen"

# --- the compiler: Debian's rustc-web (or RUSTC=...), which must know the nvptx target
RUSTC="${RUSTC:-}"
if [ -z "$RUSTC" ]; then
  for c in /usr/bin/rustc "$(command -v rustc || true)"; do
    if [ -n "$c" ] && [ -x "$c" ] && "$c" --print target-list 2>/dev/null | grep -qx "$target"; then RUSTC="$c"; break; fi
  done
fi
[ -n "$RUSTC" ] || missing "a rustc with the $target target" "Install Debian's rustc-web (apt-get install rustc-web rust-web-src llvm-22)."
version="$("$RUSTC" --version | awk '{print $2}')"
# --- the library sources to build core for the target: rust-web-src, or a rustup toolchain's rust-src
src=""
for s in "/usr/src/rustc-$version/library" "$("$RUSTC" --print sysroot)/lib/rustlib/src/rust/library"; do
  if [ -f "$s/core/src/lib.rs" ]; then src="$s"; break; fi
done
[ -n "$src" ] || missing "the Rust library sources for rustc $version" "Install rust-web-src (apt-get install rust-web-src), or 'rustup component add rust-src'."
PTXAS="${PTXAS:-$(command -v ptxas || true)}"
[ -n "$PTXAS" ] || missing "ptxas" "It ships with the CUDA toolkit (Debian: nvidia-cuda-toolkit); set PTXAS=/path/to/ptxas."

export RUSTC_BOOTSTRAP=1  # the nvptx target and the kernel ABI are unstable features
cg=(-C target-cpu="$arch" -C opt-level=3 -C panic=abort -C debug-assertions=off -C overflow-checks=off)
t0=$(date +%s)

# --- core and compiler_builtins for the target, once per compiler version (a sysroot of our own)
sysroot="$out/sysroot-$version-$arch"
lib="$sysroot/lib/rustlib/$target/lib"
if [ ! -f "$lib/.done" ]; then
  echo "build.sh: building core for $target ($arch) with rustc $version (once, ~20 s)"
  mkdir -p "$lib"
  core_edition="$(sed -n 's/^edition *= *"\(.*\)"/\1/p' "$src/core/Cargo.toml" | head -1)"
  "$RUSTC" --edition "${core_edition:-2021}" --crate-type rlib --crate-name core --target "$target" "${cg[@]}" \
    "$src/core/src/lib.rs" -o "$lib/libcore.rlib"
  cb="$src/compiler-builtins/compiler-builtins/src/lib.rs"
  # each crate in the edition its own Cargo.toml names (1.96's compiler_builtins is 2024, 1.85's core 2021)
  cb_edition="$(sed -n 's/^edition *= *"\(.*\)"/\1/p' "$src/compiler-builtins/compiler-builtins/Cargo.toml" 2>/dev/null | head -1)"
  if [ ! -f "$cb" ]; then
    # older library trees take compiler_builtins from crates.io; the kernels call none of its
    # functions (a call would be an .extern, refused below), so an empty crate stands in
    cb="$out/compiler_builtins_stub.rs"
    printf '#![no_std]\n#![feature(compiler_builtins)]\n#![compiler_builtins]\n' > "$cb"
  fi
  "$RUSTC" --edition "${cb_edition:-2021}" --crate-type rlib --crate-name compiler_builtins --target "$target" "${cg[@]}" \
    --cfg 'feature="mem"' --cfg 'feature="compiler-builtins"' -L "$lib" "$cb" -o "$lib/libcompiler_builtins.rlib"
  touch "$lib/.done"
fi

# --- the kernels: one PTX module
echo "build.sh: device crate -> build/mage_kernels.ptx"
"$RUSTC" --edition 2024 --crate-type rlib --crate-name mage_kernels --target "$target" "${cg[@]}" \
  --sysroot "$sysroot" --emit=asm -o "$out/mage_kernels.raw.ptx" "$here/device/lib.rs"
# Rust has no launch-bounds attribute: each kernel's block size (and blocks per SM wanted) from its
# table (gen/bounds.txt: name threads blocks) goes to ptxas, which sets its register budget from them.
awk '
  FNR == NR { lb[$1] = $2 ":" $3; next }
  /^\.visible \.entry / { name = $3; sub(/\(.*/, "", name)
                           if (!(name in lb)) { print "build.sh: kernel " name " is in no table" > "/dev/stderr"; exit 1 }
                           pending = lb[name]; seen[name] = 1 }
  pending != "" && /^\{/ { split(pending, tb, ":"); print ".maxntid " tb[1] ", 1, 1"
                            if (tb[2] > 1) print ".minnctapersm " tb[2]; pending = "" }
  { print }
  END { for (k in lb) if (!(k in seen)) { print "build.sh: table kernel " k " is not in the PTX" > "/dev/stderr"; exit 1 } }
' "$out/gen/bounds.txt" "$out/mage_kernels.raw.ptx" > "$out/mage_kernels.ptx"
if grep -n '^\.extern' "$out/mage_kernels.ptx"; then
  echo "build.sh: the PTX calls functions it does not define (a panic path?): see above" >&2; exit 1
fi
"$PTXAS" -arch="$arch" -v "$out/mage_kernels.ptx" -o "$out/mage_kernels.cubin" 2> "$out/ptxas.log" || {
  cat "$out/ptxas.log" >&2; echo "build.sh: ptxas rejected build/mage_kernels.ptx" >&2; exit 1; }
grep -E "Compiling entry|registers|spill" "$out/ptxas.log" | sed 's/^ptxas info *: //' > "$out/ptxas.summary"
echo "build.sh: ptxas -arch=$arch accepted every kernel:"; sed 's/^/  /' "$out/ptxas.summary"

# --- the host side: cdylib, benchmark binary and the host tests (plain rustc: no cargo needed)
host=(--edition 2021 -C opt-level=3 -C debug-assertions=off -C strip=debuginfo)
echo "build.sh: host crate -> build/libmage_rust.so, build/rust_native; tests -> build/host_tests, build/device_tests"
"$RUSTC" "${host[@]}" --crate-type cdylib,rlib --crate-name mage_rust "$here/host/src/lib.rs" --out-dir "$out"
"$RUSTC" "${host[@]}" --crate-type bin --crate-name rust_native --extern mage_rust="$out/libmage_rust.rlib" \
  "$here/host/src/bin/rust_native.rs" -o "$out/rust_native"
"$RUSTC" --edition 2021 --test --crate-name mage_rust "$here/host/src/lib.rs" -o "$out/host_tests"
# the device crate for the host: its kernels on the CPU emulator (device/src/emulate.rs)
"$RUSTC" --edition 2024 --test -C opt-level=1 --crate-name mage_kernels "$here/device/lib.rs" -o "$out/device_tests"
echo "build.sh: done in $(( $(date +%s) - t0 )) s; build/host_tests and build/device_tests are the Rust tests"
