//! Mage's device crate: the five operations as `no_std` Rust kernels for `nvptx64-nvidia-cuda`.
//! Built to one PTX module by `../build.sh`; every `unsafe` lives in `gpu`, the kernels use its
//! typed indices, views and tiles. Each kernel is one launch per call.
//! For the host (`rustc --test`), `gpu` runs on `emulate`: blocks of OS threads with real
//! barriers, so the same kernel code is tested on the CPU before it meets a GPU.
#![cfg_attr(target_arch = "nvptx64", no_std)]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx, stdarch_nvptx, asm_experimental_arch, core_intrinsics))]
#![cfg_attr(target_arch = "nvptx64", allow(internal_features))]

pub mod gpu;
pub mod math;
#[cfg(not(target_arch = "nvptx64"))]
pub mod emulate;
#[cfg(test)]
mod tests;

pub mod bias_gelu;
pub mod layernorm;
pub mod matmul;
pub mod neighbor_agg;
pub mod triangle;
