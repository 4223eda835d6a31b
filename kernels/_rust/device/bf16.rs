//! bf16 storage: activations and weights held as the top 16 bits of an f32 (a `u16` in memory), the
//! math done in f32. Widening is exact (a shift); narrowing rounds to nearest, ties to even, in integer
//! arithmetic (the same instructions on the device and on the host emulator, so the emulator tests the
//! device's rounding bit for bit). NaN stays NaN (quieted, sign kept); values past bf16's largest
//! finite round to infinity as IEEE rounding says; subnormals round like any other value (bf16 has
//! f32's exponent range, so the integer trick needs no special case for them).
//!
//! [`Store`] is what a kernel generic over its storage type asks of it: f32 is the identity (the FP32
//! kernels' code unchanged), u16 widens on load and narrows on store.
use crate::gpu::{In, Out};

/// bf16 bits -> f32 (exact).
#[inline(always)]
pub fn widen(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// f32 -> bf16 bits, round to nearest with ties to even; NaN kept (quiet bit set).
#[inline(always)]
pub fn narrow(v: f32) -> u16 {
    let b = v.to_bits();
    if b & 0x7fff_ffff > 0x7f80_0000 {
        return ((b >> 16) | 0x0040) as u16; // a NaN whose payload sat in the low half must not become inf
    }
    // adding 0x7fff plus the kept part's lowest bit carries into the kept bits exactly when the dropped
    // half is above one half, or equal to it with an odd kept part: round to nearest, ties to even
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

/// A storage type of the kernels' activations: loads widen to f32, stores narrow from it.
pub trait Store: Copy + Default {
    /// Elements `i .. i + 4` (zero past the end), one vector load when aligned.
    fn load4(v: &In<Self>, i: usize) -> [f32; 4];
    /// The first `valid` of elements `i .. i + 4`, zeros after (no vector load).
    fn load4_masked(v: &In<Self>, i: usize, valid: usize) -> [f32; 4];
    fn load2(v: &In<Self>, i: usize) -> [f32; 2];
    fn load(v: &In<Self>, i: usize) -> f32;
    /// Stores the first `n` of `x` at `i ..` (n >= 4: one vector store when aligned).
    fn store4(o: &Out<Self>, i: usize, x: [f32; 4], n: usize);
    fn store2(o: &Out<Self>, i: usize, x: [f32; 2], n: usize);
    fn store(o: &Out<Self>, i: usize, x: f32);
}

impl Store for f32 {
    #[inline(always)]
    fn load4(v: &In<f32>, i: usize) -> [f32; 4] {
        v.get4(i)
    }
    #[inline(always)]
    fn load4_masked(v: &In<f32>, i: usize, valid: usize) -> [f32; 4] {
        v.get4_masked(i, valid)
    }
    #[inline(always)]
    fn load2(v: &In<f32>, i: usize) -> [f32; 2] {
        v.get2(i)
    }
    #[inline(always)]
    fn load(v: &In<f32>, i: usize) -> f32 {
        v.get(i)
    }
    #[inline(always)]
    fn store4(o: &Out<f32>, i: usize, x: [f32; 4], n: usize) {
        o.set4(i, x, n)
    }
    #[inline(always)]
    fn store2(o: &Out<f32>, i: usize, x: [f32; 2], n: usize) {
        o.set2(i, x, n)
    }
    #[inline(always)]
    fn store(o: &Out<f32>, i: usize, x: f32) {
        o.set(i, x)
    }
}

impl Store for u16 {
    #[inline(always)]
    fn load4(v: &In<u16>, i: usize) -> [f32; 4] {
        let b = v.get4_bits(i);
        [widen(b[0]), widen(b[1]), widen(b[2]), widen(b[3])]
    }
    #[inline(always)]
    fn load4_masked(v: &In<u16>, i: usize, valid: usize) -> [f32; 4] {
        let mut out = [0.0f32; 4];
        crate::unroll!(q in 4 => {
            if q < valid {
                out[q] = widen(v.get(i + q));
            }
        });
        out
    }
    #[inline(always)]
    fn load2(v: &In<u16>, i: usize) -> [f32; 2] {
        let b = v.get2_bits(i);
        [widen(b[0]), widen(b[1])]
    }
    #[inline(always)]
    fn load(v: &In<u16>, i: usize) -> f32 {
        widen(v.get(i))
    }
    #[inline(always)]
    fn store4(o: &Out<u16>, i: usize, x: [f32; 4], n: usize) {
        o.set4_bits(i, [narrow(x[0]), narrow(x[1]), narrow(x[2]), narrow(x[3])], n)
    }
    #[inline(always)]
    fn store2(o: &Out<u16>, i: usize, x: [f32; 2], n: usize) {
        o.set2_bits(i, [narrow(x[0]), narrow(x[1])], n)
    }
    #[inline(always)]
    fn store(o: &Out<u16>, i: usize, x: f32) {
        o.set(i, narrow(x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Round to nearest even by value, in f64 (an independent route: the two bf16 neighbours of v).
    fn by_value(v: f32) -> u16 {
        let b = v.to_bits();
        let lo = (b >> 16) as u16;
        let hi = lo.wrapping_add(1);
        let (dl, dh) = ((v as f64 - widen(lo) as f64).abs(), (widen(hi) as f64 - v as f64).abs());
        // the upper neighbour of the largest finite is infinity: IEEE rounds there as if the exponent
        // went on, so the distance to 2^128 decides
        let dh = if widen(hi).is_infinite() { (2f64.powi(128) - (v as f64).abs()).abs() } else { dh };
        if dl < dh || (dl == dh && lo & 1 == 0) { lo } else { hi }
    }

    #[test]
    fn narrow_rounds_to_nearest_even_at_every_high_half() {
        for hi in 0..=0xffffu32 {
            for lo in [0u32, 1, 0x7fff, 0x8000, 0x8001, 0xffff, 0x4000, 0xc000] {
                let v = f32::from_bits(hi << 16 | lo);
                if !v.is_finite() {
                    continue; // NaN and infinity: their own test below
                }
                assert_eq!(narrow(v), by_value(v), "{:#010x}", v.to_bits());
            }
        }
    }

    #[test]
    fn ties_nan_inf_and_subnormals() {
        assert_eq!(narrow(f32::from_bits(0x3f80_8000)), 0x3f80); // tie, even kept
        assert_eq!(narrow(f32::from_bits(0x3f81_8000)), 0x3f82); // tie, odd rounds up
        assert_eq!(narrow(f32::from_bits(0x3f80_8001)), 0x3f81); // just past the tie
        assert_eq!(narrow(f32::INFINITY), 0x7f80);
        assert_eq!(narrow(f32::NEG_INFINITY), 0xff80);
        assert_eq!(narrow(f32::MAX), 0x7f80); // past bf16's largest finite: infinity
        assert_eq!(narrow(f32::from_bits(0x7f7f_7fff)), 0x7f7f); // below the halfway point: finite
        for nan in [0x7fc0_0000u32, 0x7f80_0001, 0xff80_0001, 0x7fff_ffff] {
            let b = narrow(f32::from_bits(nan));
            assert!(widen(b).is_nan(), "{nan:#x} -> {b:#x}");
            assert_eq!(b & 0x8000, ((nan >> 16) & 0x8000) as u16, "sign kept");
        }
        assert_eq!(narrow(f32::from_bits(0x0000_8000)), 0x0000); // smallest subnormal tie: to even 0
        assert_eq!(narrow(f32::from_bits(0x0001_8000)), 0x0002);
        assert_eq!(narrow(f32::from_bits(0x007f_ffff)), 0x0080); // largest subnormal up to the normals
        assert_eq!(narrow(-0.0), 0x8000);
        for b in 0..=0xffffu16 {
            let v = widen(b);
            if !v.is_nan() {
                assert_eq!(narrow(v), b, "a bf16 value is its own rounding");
            }
        }
    }
}
