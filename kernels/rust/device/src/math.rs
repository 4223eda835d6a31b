//! Float math that `core` lacks on nvptx: exp on the negative axis, erf, erfc and exact GELU.
//! Plain Rust with no intrinsics beyond fma, so `cargo test` compiles the same code for the host
//! and measures its error against f64 (bounds in `host/tests/math.rs`).

#[cfg(target_arch = "nvptx64")]
use crate::gpu::{fma, rcp};

#[cfg(not(target_arch = "nvptx64"))]
#[inline(always)]
fn fma(a: f32, b: f32, c: f32) -> f32 {
    a.mul_add(b, c)
}

// The device uses rcp.approx.f32 (within 1 ulp); the host's exact division stands in for it.
#[cfg(not(target_arch = "nvptx64"))]
#[inline(always)]
fn rcp(x: f32) -> f32 {
    1.0 / x
}

#[inline(always)]
fn horner<const N: usize>(x: f32, c: &[f32; N]) -> f32 {
    let mut acc = c[0];
    let mut i = 1;
    while i < N {
        acc = fma(acc, x, c[i]);
        i += 1;
    }
    acc
}

const LOG2E: f32 = core::f32::consts::LOG2_E;
// ln 2 split so that n * LN2_HI is exact for |n| < 2^8 (LN2_HI has 16 significant bits)
const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;

/// e^(hi + lo) for hi + lo in [-87, 0], lo a small correction of hi (|lo| << |hi|): the
/// argument is reduced as hi + lo = n ln2 + r, |r| <= ln2 / 2, and e^r is a degree-7 Taylor
/// polynomial (truncation below 6e-9). Carrying lo keeps the rounding of a large argument (like
/// -a*a in erfc) out of the result.
#[inline(always)]
pub fn exp_neg(hi: f32, lo: f32) -> f32 {
    let x = hi + lo;
    if x < -87.0 {
        return 0.0;
    }
    let n = (x * LOG2E + 0.5).floor_nofail();
    let r = fma(-n, LN2_HI, hi);
    let r = fma(-n, LN2_LO, r) + lo;
    const C: [f32; 8] = [1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0];
    let p = horner(r, &C);
    // 2^n for n in [-126, 0] built from its exponent bits
    let scale = f32::from_bits((((n as i32) + 127) as u32) << 23);
    p * scale
}

/// floor without `core::f32::floor` (not in core on nvptx): exact for |x| < 2^22.
trait FloorNoFail {
    fn floor_nofail(self) -> f32;
}

impl FloorNoFail for f32 {
    #[inline(always)]
    fn floor_nofail(self) -> f32 {
        let t = self as i32 as f32; // rounds toward zero; `as` saturates, never panics
        if t > self { t - 1.0 } else { t }
    }
}

// erf(x) / x = P(x^2) on |x| <= 1 (fitted in f64 on Chebyshev nodes, relative error 4e-8)
const ERF_P: [f32; 6] = [
    -5.625_396e-4, 4.916_023_4e-3, -2.670_995e-2, 1.128_013e-1, -3.761_232e-1, 1.128_379_1,
];
// erfc(a) = t exp(-a^2 + Q(t)), t = 1 / (1 + a/2), on 1 <= a <= 9.2 (relative error 4e-9 in f64)
const ERFC_Q: [f32; 9] = [
    -2.428_108e-1, 6.517_546e-1, -4.594_534_5e-1, -5.962_586_6e-2, -7.520_12e-2, 7.211_291e-2,
    3.777_918e-1, 9.996_813e-1, -1.265_497_8,
];

/// erfc(a) for a >= 0 with a^2 = sq_hi + sq_lo given split (so the exponent is not rounded).
/// Past a = 9.2 erfc is below the smallest normal float and 0 is returned.
#[inline(always)]
fn erfc_pos(a: f32, sq_hi: f32, sq_lo: f32) -> f32 {
    if a < 1.0 {
        1.0 - a * horner(sq_hi + sq_lo, &ERF_P)
    } else if a < 9.2 {
        let t = rcp(fma(0.5, a, 1.0));
        t * exp_neg(-sq_hi, horner(t, &ERFC_Q) - sq_lo)
    } else {
        0.0
    }
}

/// a * a as hi + lo with hi exact: a's high 12 significand bits squared fit a float.
#[inline(always)]
fn square_split(a: f32) -> (f32, f32) {
    let ah = f32::from_bits(a.to_bits() & 0xffff_f000);
    let al = a - ah;
    (ah * ah, al * (a + ah))
}

#[inline(always)]
fn abs(x: f32) -> f32 {
    f32::from_bits(x.to_bits() & 0x7fff_ffff)
}

/// erf(x): x P(x^2) near zero (full relative accuracy), 1 - erfc(|x|) beyond.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let a = abs(x);
    if a < 1.0 {
        return x * horner(x * x, &ERF_P);
    }
    let (hi, lo) = square_split(a);
    let e = 1.0 - erfc_pos(a, hi, lo);
    if x < 0.0 { -e } else { e }
}

/// erfc(x) for any x, accurate relative to erfc itself (also deep in the tail).
#[inline(always)]
pub fn erfc(x: f32) -> f32 {
    let a = abs(x);
    let (hi, lo) = square_split(a);
    let e = erfc_pos(a, hi, lo);
    if x < 0.0 { 2.0 - e } else { e }
}

/// Exact GELU, z (1 + erf(z / sqrt 2)) / 2, written as z erfc(-z / sqrt 2) / 2 so the negative
/// side (where 1 + erf cancels) keeps its relative accuracy. (z / sqrt 2)^2 = z^2 / 2 is formed
/// from z's split square, so dividing by sqrt 2 adds no rounding to the exponent.
#[inline(always)]
pub fn gelu(z: f32) -> f32 {
    const FRAC_1_SQRT_2: f32 = core::f32::consts::FRAC_1_SQRT_2;
    let a = abs(z) * FRAC_1_SQRT_2;
    let (hi, lo) = square_split(abs(z));
    let e = erfc_pos(a, 0.5 * hi, 0.5 * lo);
    0.5 * z * if z < 0.0 { e } else { 2.0 - e }
}
