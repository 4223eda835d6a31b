//! Mage's device crate: the operations' `no_std` Rust kernels for `nvptx64-nvidia-cuda`, built to one
//! PTX module by `../build.sh`. Each op's kernels live in `kernels/<op>/rust.rs`; the op modules and
//! their PTX entry points are generated from the ops' kernel tables (`kernels/<op>/rust_table.py`)
//! into `build/gen/device_ops.rs`, so no list of kernels is kept by hand. Every `unsafe` that touches
//! memory lives in `gpu`; kernels use its typed indices, views and tiles. One launch per call.
//! For the host (`rustc --test`), `gpu` runs on `emulate`: blocks of OS threads with real barriers,
//! so the same kernel code is tested on the CPU before it meets a GPU.
#![cfg_attr(target_arch = "nvptx64", no_std)]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx, stdarch_nvptx, asm_experimental_arch, core_intrinsics))]
#![cfg_attr(target_arch = "nvptx64", allow(internal_features))]
// The kernels take raw device pointers by the launch contract: the host checks each against its
// kernel table's lengths before any launch, and the views' unsafe constructors state the rest.
#![allow(clippy::not_unsafe_ptr_arg_deref)]
// A kernel's parameter list is its table's (neighbor_agg has 14).
#![allow(clippy::too_many_arguments)]
// `usize::is_multiple_of` is newer than the oldest compiler the kernels build with (rustc 1.85); the
// lint that suggests it is unknown to that compiler's clippy.
#![allow(unknown_lints, clippy::manual_is_multiple_of)]

pub mod bf16;
#[cfg(not(target_arch = "nvptx64"))]
pub mod emulate;
pub mod gpu;
pub mod math;
pub mod mma;
#[cfg(test)]
pub mod testing;

include!("../build/gen/device_ops.rs");
