//! The device module: thread and block indices as types, input and output views, shared-memory
//! tiles, barriers and warp shuffles. All of the crate's `unsafe` is here, in the spirit of
//! cuda-oxide's safe indexing, so kernels read as index arithmetic with no raw pointers.

// ------------------------------------------------------------------------------------ indices
/// This thread's index within its block (x is the fastest-moving dimension).
#[derive(Clone, Copy)]
pub struct ThreadIdx {
    pub x: u32,
    pub y: u32,
}

/// This block's index within the grid.
#[derive(Clone, Copy)]
pub struct BlockIdx {
    pub x: u32,
    pub y: u32,
    pub z: u32,
}

#[inline(always)]
pub fn thread() -> ThreadIdx {
    let (x, y) = hw::thread_idx();
    ThreadIdx { x, y }
}

#[inline(always)]
pub fn block() -> BlockIdx {
    let (x, y, z) = hw::block_idx();
    BlockIdx { x, y, z }
}

#[inline(always)]
pub fn block_dim_x() -> u32 {
    hw::block_dim_x()
}

/// `bar.sync 0`: every thread of the block arrives before any leaves. Call it from uniform
/// control flow only (all threads or none), as CUDA's `__syncthreads`.
#[inline(always)]
pub fn barrier() {
    hw::barrier()
}

#[inline(always)]
pub fn lane() -> u32 {
    thread().x & 31
}

/// Butterfly shuffle over the full warp: the value held by lane `lane ^ mask`. All 32 lanes
/// must call it together.
#[inline(always)]
pub fn shfl_xor(v: f32, mask: u32) -> f32 {
    hw::shfl_xor(v, mask)
}

/// Sum over the 32 lanes of a warp; every lane gets the total, added in the same order each run.
#[inline(always)]
pub fn warp_sum(mut v: f32) -> f32 {
    let mut m = 16;
    while m > 0 {
        v += shfl_xor(v, m);
        m >>= 1;
    }
    v
}

/// `bar.warp.sync`: the 32 lanes of this warp meet (lanes do not run in lockstep since Volta).
#[inline(always)]
pub fn warp_sync() {
    hw::warp_sync()
}

/// `fence.acq_rel.gpu`: orders this thread's memory operations GPU-wide.
#[inline(always)]
pub fn fence() {
    hw::fence()
}

pub use hw::{ex2, fma, rcp, rint, sqrt, to_i32};

// ------------------------------------------------------------------- the hardware, on nvptx
#[cfg(target_arch = "nvptx64")]
mod hw {
    use core::arch::{asm, nvptx};

    #[inline(always)]
    pub fn thread_idx() -> (u32, u32) {
        // SAFETY: reading special registers has no preconditions.
        unsafe { (nvptx::_thread_idx_x() as u32, nvptx::_thread_idx_y() as u32) }
    }
    #[inline(always)]
    pub fn block_idx() -> (u32, u32, u32) {
        // SAFETY: as above.
        unsafe { (nvptx::_block_idx_x() as u32, nvptx::_block_idx_y() as u32, nvptx::_block_idx_z() as u32) }
    }
    #[inline(always)]
    pub fn block_dim_x() -> u32 {
        // SAFETY: as above.
        unsafe { nvptx::_block_dim_x() as u32 }
    }
    #[inline(always)]
    pub fn barrier() {
        // SAFETY: the kernels call it from block-uniform control flow.
        unsafe { nvptx::_syncthreads() }
    }
    #[inline(always)]
    pub fn fence() {
        // SAFETY: a memory fence, no operands.
        unsafe { asm!("fence.acq_rel.gpu;", options(nostack)) };
    }
    #[inline(always)]
    pub fn warp_sync() {
        // SAFETY: all 32 lanes call it (member mask 0xffffffff).
        unsafe { asm!("bar.warp.sync -1;", options(nostack)) };
    }
    #[inline(always)]
    pub fn shfl_xor(v: f32, mask: u32) -> f32 {
        let out: f32;
        // SAFETY: all 32 lanes take part (member mask 0xffffffff); called warp-uniformly.
        unsafe {
            asm!("shfl.sync.bfly.b32 {o}, {v}, {m}, 31, -1;", o = out(reg32) out, v = in(reg32) v,
                 m = in(reg32) mask, options(nomem, nostack))
        };
        out
    }
    #[inline(always)]
    pub fn fma(a: f32, b: f32, c: f32) -> f32 {
        #[allow(unused_unsafe)]
        unsafe {
            core::intrinsics::fmaf32(a, b, c)
        }
    }
    #[inline(always)]
    pub fn sqrt(x: f32) -> f32 {
        #[allow(unused_unsafe)]
        unsafe {
            core::intrinsics::sqrtf32(x)
        }
    }
    /// 1 / x to about 1 ulp (`rcp.approx.f32`: one special-function instruction instead of the
    /// dozen of an IEEE division).
    #[inline(always)]
    pub fn rcp(x: f32) -> f32 {
        let out: f32;
        // SAFETY: arithmetic only.
        unsafe { asm!("rcp.approx.f32 {o}, {x};", o = out(reg32) out, x = in(reg32) x, options(pure, nomem, nostack)) };
        out
    }
    /// 2^x for |x| <= 1/2 to about 2 ulp (`ex2.approx.ftz.f32`: one special-function instruction).
    #[inline(always)]
    pub fn ex2(x: f32) -> f32 {
        let out: f32;
        // SAFETY: arithmetic only.
        unsafe {
            asm!("ex2.approx.ftz.f32 {o}, {x};", o = out(reg32) out, x = in(reg32) x, options(pure, nomem, nostack))
        };
        out
    }
    /// x rounded to the nearest integer, ties to even (`cvt.rni.f32.f32`).
    #[inline(always)]
    pub fn rint(x: f32) -> f32 {
        let out: f32;
        // SAFETY: arithmetic only.
        unsafe {
            asm!("cvt.rni.f32.f32 {o}, {x};", o = out(reg32) out, x = in(reg32) x, options(pure, nomem, nostack))
        };
        out
    }
    /// An integral float as i32 (`cvt.rzi.s32.f32`, which saturates in hardware): Rust's `as`
    /// adds six instructions of saturation and NaN checks around the same conversion.
    #[inline(always)]
    pub fn to_i32(x: f32) -> i32 {
        let out: i32;
        // SAFETY: arithmetic only.
        unsafe {
            asm!("cvt.rzi.s32.f32 {o}, {x};", o = out(reg32) out, x = in(reg32) x, options(pure, nomem, nostack))
        };
        out
    }
    /// Every lane fences its own earlier stores GPU-wide, the warp meets, lane 0 raises `*flag`.
    /// SAFETY (caller): `flag` is a valid global address.
    #[inline(always)]
    pub unsafe fn publish(flag: *mut u32, lane0: bool) {
        unsafe {
            asm!("fence.acq_rel.gpu;", "bar.warp.sync -1;", options(nostack));
            if lane0 {
                asm!("st.release.gpu.global.u32 [{p}], 1;", p = in(reg64) flag, options(nostack));
            }
        }
    }
    /// SAFETY (caller): `flag` is a valid global address.
    #[inline(always)]
    pub unsafe fn load_acquire(flag: *const u32) -> u32 {
        let v: u32;
        unsafe {
            asm!("ld.acquire.gpu.global.u32 {v}, [{p}];", v = out(reg32) v, p = in(reg64) flag, options(nostack))
        };
        v
    }
    #[inline(always)]
    pub fn pause() {
        // SAFETY: a hint to the scheduler, no memory effect.
        unsafe { asm!("nanosleep.u32 64;", options(nomem, nostack)) };
    }
    /// SAFETY (caller): `flag` is a valid global address.
    #[inline(always)]
    pub unsafe fn store_relaxed(flag: *mut u32, v: u32) {
        unsafe { asm!("st.relaxed.gpu.global.u32 [{p}], {v};", p = in(reg64) flag, v = in(reg32) v, options(nostack)) };
    }
}

#[cfg(not(target_arch = "nvptx64"))]
use crate::emulate as hw;

// --------------------------------------------------------------- views and tiles (submodules)
mod tiles;
mod views;
pub use tiles::{Tile, TileView, TileWindow};
pub use views::{F2, F4, Flags, H2, H4, In, Out};

/// Declares a module-level `.shared` array of `$n` floats and gives its generic address as a
/// [`Tile`]: `shared_tile!(fn as_tile, AS_TILE, 2048)`. (Under the host emulator: the block's
/// buffer of that name.)
#[macro_export]
macro_rules! shared_tile {
    ($fname:ident, $sym:ident, $n:expr) => {
        #[cfg(target_arch = "nvptx64")]
        core::arch::global_asm!(concat!(".shared .align 16 .b8 ", stringify!($sym), "[{bytes}];"), bytes = const ($n * 4));
        #[inline(always)]
        fn $fname() -> $crate::gpu::Tile<{ $n }> {
            #[cfg(target_arch = "nvptx64")]
            let p = $crate::gpu::shared_addr!($sym);
            #[cfg(not(target_arch = "nvptx64"))]
            let p = $crate::emulate::shared(stringify!($sym), $n);
            // SAFETY: `p` is the array declared just above (or the emulator's block buffer), N floats.
            unsafe { $crate::gpu::Tile::from_generic(p) }
        }
    };
}

#[cfg(target_arch = "nvptx64")]
#[macro_export]
macro_rules! shared_addr {
    ($sym:ident) => {{
        let p: u64;
        // SAFETY: converts the address of a declared .shared symbol to a generic pointer.
        unsafe {
            core::arch::asm!(concat!("cvta.shared.u64 {p}, ", stringify!($sym), ";"), p = out(reg64) p,
                             options(pure, nomem, nostack))
        };
        p as *mut f32
    }};
}
#[cfg(target_arch = "nvptx64")]
pub use shared_addr;

/// `unroll!(i in 8 => { ... })` repeats the body with `i` = 0, 1, .., 7 as literal constants, so
/// register arrays indexed by `i` stay in registers (LLVM leaves some counted loops rolled, and a
/// rolled loop over an array sends the array to local memory).
#[macro_export]
macro_rules! unroll {
    ($i:ident in 2 => $body:block) => { $crate::unroll!(@ $i [0 1] $body) };
    ($i:ident in 4 => $body:block) => { $crate::unroll!(@ $i [0 1 2 3] $body) };
    ($i:ident in 8 => $body:block) => { $crate::unroll!(@ $i [0 1 2 3 4 5 6 7] $body) };
    (@ $i:ident [$($n:literal)*] $body:block) => { $( { #[allow(non_upper_case_globals)] const $i: usize = $n; $body } )* };
}
