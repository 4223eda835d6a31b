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

// -------------------------------------------------------------------------------------- views
/// Four floats that load and store as one 16-byte access (`ld.v4.f32`).
#[derive(Clone, Copy)]
#[repr(C, align(16))]
pub struct F4(pub [f32; 4]);

/// Two floats as one 8-byte access.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub struct F2(pub [f32; 2]);

/// A read-only array in global memory: `len` elements from `ptr`. Reads outside it give the
/// default value (zero) instead of faulting or panicking, which doubles as a tile's edge mask.
#[derive(Clone, Copy)]
pub struct In<T: Copy + Default> {
    ptr: *const T,
    len: usize,
}

impl<T: Copy + Default> In<T> {
    /// A view of `len` elements from `ptr`.
    ///
    /// # Safety
    /// `ptr` is null with `len` 0, or points to `len` readable elements that stay valid and unwritten
    /// for the whole launch (the host checks each pointer against its kernel table's `lengths`).
    #[inline(always)]
    pub unsafe fn new(ptr: *const T, len: usize) -> Self {
        In { ptr, len }
    }
    #[inline(always)]
    pub fn is_null(&self) -> bool {
        self.ptr.is_null()
    }
    #[inline(always)]
    pub fn get(&self, i: usize) -> T {
        // SAFETY: `i` is inside the array the host vouched for.
        if i < self.len { unsafe { *self.ptr.add(i) } } else { T::default() }
    }
}

impl In<f32> {
    /// True when elements `i .. i + 4` exist and start on a 16-byte boundary.
    #[inline(always)]
    pub fn can4(&self, i: usize) -> bool {
        i + 4 <= self.len && (self.ptr as usize + 4 * i) % 16 == 0
    }
    /// Elements `i .. i + 4` as one vector load when aligned, else one by one (zero past the end).
    #[inline(always)]
    pub fn get4(&self, i: usize) -> [f32; 4] {
        if self.can4(i) {
            // SAFETY: in bounds and 16-byte aligned, checked just above.
            unsafe { (*(self.ptr.add(i) as *const F4)).0 }
        } else {
            [self.get(i), self.get(i + 1), self.get(i + 2), self.get(i + 3)]
        }
    }
    /// The first `valid` of elements `i .. i + 4`, zeros after: a tile's ragged edge, element by
    /// element (no vector load: the run may be unaligned or cross the end).
    #[inline(always)]
    pub fn get4_masked(&self, i: usize, valid: usize) -> [f32; 4] {
        let mut v = [0.0f32; 4];
        crate::unroll!(q in 4 => {
            if q < valid {
                v[q] = self.get(i + q);
            }
        });
        v
    }
    #[inline(always)]
    pub fn get2(&self, i: usize) -> [f32; 2] {
        if i + 2 <= self.len && (self.ptr as usize + 4 * i) % 8 == 0 {
            // SAFETY: in bounds and 8-byte aligned.
            unsafe { (*(self.ptr.add(i) as *const F2)).0 }
        } else {
            [self.get(i), self.get(i + 1)]
        }
    }
}

/// A writable array in global memory. Stores outside it are dropped. Not `Copy`: one view per array,
/// so a kernel cannot hand out aliases of its output.
pub struct Out<T: Copy> {
    ptr: *mut T,
    len: usize,
}

impl<T: Copy> Out<T> {
    /// A view of `len` writable elements from `ptr`.
    ///
    /// # Safety
    /// `ptr` is null with `len` 0, or points to `len` writable elements valid for the whole launch;
    /// the kernel's index arithmetic gives every element at most one writer (the tiles partition the
    /// output), and any other view of the same memory reads an element only after a barrier or a
    /// flag orders that read after the write.
    #[inline(always)]
    pub unsafe fn new(ptr: *mut T, len: usize) -> Self {
        Out { ptr, len }
    }
    #[inline(always)]
    pub fn set(&self, i: usize, v: T) {
        // SAFETY: in bounds; one writer per element by the kernel's partition of the output.
        if i < self.len {
            unsafe { *self.ptr.add(i) = v }
        }
    }
}

impl Out<f32> {
    #[inline(always)]
    pub fn can4(&self, i: usize) -> bool {
        i + 4 <= self.len && (self.ptr as usize + 4 * i) % 16 == 0
    }
    /// Stores `v[q]` at `i + q` for the `q < n` (n = 4: one vector store when aligned).
    #[inline(always)]
    pub fn set4(&self, i: usize, v: [f32; 4], n: usize) {
        if n >= 4 && self.can4(i) {
            // SAFETY: in bounds and aligned.
            unsafe { *(self.ptr.add(i) as *mut F4) = F4(v) }
        } else {
            let mut q = 0;
            while q < 4 {
                if q < n {
                    self.set(i + q, v[q]);
                }
                q += 1;
            }
        }
    }
    #[inline(always)]
    pub fn set2(&self, i: usize, v: [f32; 2], n: usize) {
        if n >= 2 && i + 2 <= self.len && (self.ptr as usize + 4 * i) % 8 == 0 {
            // SAFETY: in bounds and aligned.
            unsafe { *(self.ptr.add(i) as *mut F2) = F2(v) }
        } else {
            self.set(i, v[0]);
            if n >= 2 {
                self.set(i + 1, v[1]);
            }
        }
    }
}

// -------------------------------------------------------------------------------------- flags
/// Per-chunk ready flags in global memory: a producer warp publishes its partial sum, the warp
/// that combines the chunks waits for it. Plain stores and loads with release/acquire order, no
/// read-modify-write atomics.
pub struct Flags {
    ptr: *mut u32,
    len: usize,
}

impl Flags {
    /// `len` flags from `ptr`.
    ///
    /// # Safety
    /// `ptr` is null with `len` 0, or points to `len` u32 in global memory, valid for the whole launch
    /// and touched by no other view, all zero when the launch starts.
    #[inline(always)]
    pub unsafe fn new(ptr: *mut u32, len: usize) -> Self {
        Flags { ptr, len }
    }
    /// Makes this warp's earlier global stores visible GPU-wide, then raises flag `i`.
    #[inline(always)]
    pub fn publish(&self, i: usize) {
        if i < self.len {
            // SAFETY: in bounds.
            unsafe { hw::publish(self.ptr.add(i), lane() == 0) }
        }
    }
    /// Spins until flag `i` is raised; later loads of this thread see what its producer stored.
    #[inline(always)]
    pub fn wait(&self, i: usize) {
        if i >= self.len {
            return;
        }
        // SAFETY: in bounds.
        while unsafe { hw::load_acquire(self.ptr.add(i)) } == 0 {
            hw::pause();
        }
    }
    /// Lowers flag `i` for the next launch on the stream (launches on one stream run in order).
    /// Call [`warp_sync`] first: a lane still spinning in `wait` must not see the flag drop.
    #[inline(always)]
    pub fn clear(&self, i: usize) {
        if i < self.len && lane() == 0 {
            // SAFETY: in bounds.
            unsafe { hw::store_relaxed(self.ptr.add(i), 0) }
        }
    }
}

// -------------------------------------------------------------------------------------- tiles
/// A shared-memory tile of `N` floats (N a power of two: indices wrap instead of overflowing, so
/// no index can leave the tile and no bounds check is needed).
#[derive(Clone, Copy)]
pub struct Tile<const N: usize> {
    ptr: *mut f32,
}

impl<const N: usize> Tile<N> {
    const POW2: () = assert!(N.is_power_of_two());

    /// Wraps the generic address of a `.shared` array declared by [`shared_tile!`].
    ///
    /// # Safety
    /// `ptr` is the 16-byte aligned start of a block-shared array of `N` floats that lives for the
    /// whole launch.
    #[inline(always)]
    pub unsafe fn from_generic(ptr: *mut f32) -> Self {
        let () = Self::POW2;
        Tile { ptr }
    }
    #[inline(always)]
    pub fn get(&self, i: usize) -> f32 {
        // SAFETY: the mask keeps i below N.
        unsafe { *self.ptr.add(i & (N - 1)) }
    }
    #[inline(always)]
    pub fn set(&self, i: usize, v: f32) {
        // SAFETY: as above; which threads write which element is the kernel's barrier discipline.
        unsafe { *self.ptr.add(i & (N - 1)) = v }
    }
    /// Elements `i .. i + 4` (i a multiple of 4: the mask keeps the 16-byte alignment).
    #[inline(always)]
    pub fn get4(&self, i: usize) -> [f32; 4] {
        // SAFETY: the array is 16-byte aligned and i & (N - 4) is a multiple of 4 below N.
        unsafe { (*(self.ptr.add(i & (N - 4)) as *const F4)).0 }
    }
    #[inline(always)]
    pub fn set4(&self, i: usize, v: [f32; 4]) {
        // SAFETY: as get4.
        unsafe { *(self.ptr.add(i & (N - 4)) as *mut F4) = F4(v) }
    }
}

impl<const N: usize> Tile<N> {
    /// A window of `span` floats from `base` (rounded down to a multiple of 4, and moved back to
    /// fit if it would run past the tile). Reads through it at constant offsets compile to one
    /// base register plus immediate offsets: the check `off + 4 <= span` folds away.
    #[inline(always)]
    pub fn view(&self, base: usize, span: usize) -> TileView {
        let span = span.min(N) & !3;
        let base = base & !3;
        let base = if base + span <= N { base } else { N - span };
        // SAFETY: base + span <= N, so the window lies inside the tile.
        TileView { ptr: unsafe { self.ptr.add(base) }, span }
    }
}

/// A window into a [`Tile`]; see [`Tile::view`].
#[derive(Clone, Copy)]
pub struct TileView {
    ptr: *mut f32,
    span: usize,
}

impl TileView {
    /// Elements `off .. off + 4` of the window (off rounded down to a multiple of 4); zeros if
    /// they are not all inside it.
    #[inline(always)]
    pub fn get4(&self, off: usize) -> [f32; 4] {
        let off = off & !3;
        // SAFETY: inside the window, 16-byte aligned (tile, base and off are multiples of 4 floats).
        if off + 4 <= self.span { unsafe { (*(self.ptr.add(off) as *const F4)).0 } } else { [0.0; 4] }
    }
}

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
