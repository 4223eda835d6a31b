//! Mage's device crate: the five operations as `no_std` Rust kernels for `nvptx64-nvidia-cuda`.
//! Built to one PTX module by `../build.sh`; every `unsafe` lives in `gpu`, the kernels use its
//! typed indices, views and tiles. Each kernel is one launch per call.
#![no_std]
#![feature(abi_ptx, stdarch_nvptx, asm_experimental_arch, core_intrinsics)]
#![allow(internal_features)]

pub mod gpu;
pub mod math;

mod bias_gelu;
mod layernorm;
mod matmul;
mod neighbor_agg;
mod triangle;
