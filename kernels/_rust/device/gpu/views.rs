//! Views of global memory: 16- and 8-byte vectors, read-only and writable arrays with their bounds
//! in the type (a read outside gives zero, a store outside is dropped), and the ready flags of the
//! neighbour kernel. Part of `gpu`: every `unsafe` that touches global memory is here.
use super::*;

/// Four floats that load and store as one 16-byte access (`ld.v4.f32`).
#[derive(Clone, Copy)]
#[repr(C, align(16))]
pub struct F4(pub [f32; 4]);

/// Two floats as one 8-byte access.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub struct F2(pub [f32; 2]);

/// Four bf16 (as u16) that load and store as one 8-byte access.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub struct H4(pub [u16; 4]);

/// Two bf16 as one 4-byte access.
#[derive(Clone, Copy)]
#[repr(C, align(4))]
pub struct H2(pub [u16; 2]);

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

impl In<u16> {
    /// Elements `i .. i + 4` (bf16 bits) as one 8-byte load when aligned, else one by one.
    #[inline(always)]
    pub fn get4_bits(&self, i: usize) -> [u16; 4] {
        if i + 4 <= self.len && (self.ptr as usize + 2 * i) % 8 == 0 {
            // SAFETY: in bounds and 8-byte aligned, checked just above.
            unsafe { (*(self.ptr.add(i) as *const H4)).0 }
        } else {
            [self.get(i), self.get(i + 1), self.get(i + 2), self.get(i + 3)]
        }
    }
    #[inline(always)]
    pub fn get2_bits(&self, i: usize) -> [u16; 2] {
        if i + 2 <= self.len && (self.ptr as usize + 2 * i) % 4 == 0 {
            // SAFETY: in bounds and 4-byte aligned.
            unsafe { (*(self.ptr.add(i) as *const H2)).0 }
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

impl Out<u16> {
    /// Stores `v[q]` (bf16 bits) at `i + q` for the `q < n` (n >= 4: one 8-byte store when aligned).
    #[inline(always)]
    pub fn set4_bits(&self, i: usize, v: [u16; 4], n: usize) {
        if n >= 4 && i + 4 <= self.len && (self.ptr as usize + 2 * i) % 8 == 0 {
            // SAFETY: in bounds and aligned.
            unsafe { *(self.ptr.add(i) as *mut H4) = H4(v) }
        } else {
            crate::unroll!(q in 4 => {
                if q < n {
                    self.set(i + q, v[q]);
                }
            });
        }
    }
    #[inline(always)]
    pub fn set2_bits(&self, i: usize, v: [u16; 2], n: usize) {
        if n >= 2 && i + 2 <= self.len && (self.ptr as usize + 2 * i) % 4 == 0 {
            // SAFETY: in bounds and aligned.
            unsafe { *(self.ptr.add(i) as *mut H2) = H2(v) }
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
