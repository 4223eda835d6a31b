//! Shared-memory tiles: a power-of-two array whose indices wrap, so none can leave it. Part of `gpu`.
use super::*;

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

impl<const N: usize> Tile<N> {
    /// A window of `span` floats from `base` for scalar reads (no rounding of `base`; moved back to
    /// fit if it would run past the tile), so `get(off)` at constant offsets is one base register
    /// plus immediates, as with [`Tile::view`].
    #[inline(always)]
    pub fn window(&self, base: usize, span: usize) -> TileWindow {
        let span = span.min(N);
        let base = if base + span <= N { base } else { N - span };
        // SAFETY: base + span <= N, so the window lies inside the tile.
        TileWindow { ptr: unsafe { self.ptr.add(base) }, span }
    }
}

/// A window into a [`Tile`] read one float at a time; see [`Tile::window`].
#[derive(Clone, Copy)]
pub struct TileWindow {
    ptr: *mut f32,
    span: usize,
}

impl TileWindow {
    /// Element `off` of the window; zero if it is outside.
    #[inline(always)]
    pub fn get(&self, off: usize) -> f32 {
        // SAFETY: inside the window, which lies inside the tile.
        if off < self.span { unsafe { *self.ptr.add(off) } } else { 0.0 }
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
