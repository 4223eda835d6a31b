//! Float math that `core` lacks on nvptx: exp on the negative axis, erf, erfc and exact GELU.
//! Plain Rust; on the device fma, rcp, ex2, rint and the float-to-int conversion are single PTX
//! instructions, on the host exact stand-ins, so the host tests measure the formulas' error against
//! f64 (bounds in `host/src/math_tests.rs`) but not the device's approximate rcp and ex2 (~1-2 ulp).

#[cfg(target_arch = "nvptx64")]
use crate::gpu::{ex2, fma, rcp, rint, to_i32};

#[cfg(not(target_arch = "nvptx64"))]
#[inline(always)]
fn fma(a: f32, b: f32, c: f32) -> f32 {
    a.mul_add(b, c)
}

// The device uses rcp.approx.f32 (within 1 ulp) and ex2.approx.ftz.f32 (about 2 ulp on |x| <= 1/2);
// the host's exact division and exp2 stand in for them.
#[cfg(not(target_arch = "nvptx64"))]
#[inline(always)]
fn rcp(x: f32) -> f32 {
    1.0 / x
}
#[cfg(not(target_arch = "nvptx64"))]
#[inline(always)]
fn ex2(x: f32) -> f32 {
    x.exp2()
}
#[cfg(not(target_arch = "nvptx64"))]
#[inline(always)]
fn rint(x: f32) -> f32 {
    x.round_ties_even()
}
#[cfg(not(target_arch = "nvptx64"))]
#[inline(always)]
fn to_i32(x: f32) -> i32 {
    x as i32
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
/// argument is reduced as hi + lo = n ln2 + r, |r| <= ln2 / 2, and e^r = 2^(r log2 e) is one
/// `ex2` of an argument below 1/2. Carrying lo keeps the rounding of a large argument (like -a*a in
/// erfc) out of the result. (A degree-7 polynomial for e^r cost a dozen more instructions an element,
/// which GELU at copy bandwidth cannot afford.)
#[inline(always)]
pub fn exp_neg(hi: f32, lo: f32) -> f32 {
    let x = hi + lo;
    let n = rint(x * LOG2E).max(-126.0);
    let r = fma(-n, LN2_HI, hi);
    let r = fma(-n, LN2_LO, r) + lo;
    // 2^n for n in [-126, 0] built from its exponent bits; below e^-87 the product is 0 or subnormal
    // (flushed), which is what erfc's tail needs
    let scale = f32::from_bits(((to_i32(n) + 127) as u32) << 23);
    ex2(r * LOG2E) * scale
}

// The coefficients as fitted in f64: the f32 literal rounds them, as the fit's error bound assumes.
#[allow(clippy::excessive_precision, clippy::approx_constant)]
// erf(x) / x = P(x^2) on |x| <= 1 (fitted in f64 on Chebyshev nodes, relative error 4e-8)
const ERF_P: [f32; 6] = [-5.625_396e-4, 4.916_023_4e-3, -2.670_995e-2, 1.128_013e-1, -3.761_232e-1, 1.128_379_1];
// erfc(a) = t exp(-a^2 + Q(t)), t = 1 / (1 + a/2), on the whole of 0 <= a <= 9.2 (degree 9, fitted
// in f64 on Chebyshev nodes in t by iteratively reweighted least squares: |error of Q| 4e-8, which
// is the relative error of erfc; 2.6e-7 with f32 coefficients and Horner in f32). One formula for the
// whole range keeps a warp from running two polynomials when its lanes fall on both sides of a = 1.
#[allow(clippy::excessive_precision)] // as fitted, like ERF_P
const ERFC_Q: [f32; 10] = [
    1.353_550_3e-1,
    -6.283_515_7e-1,
    1.032_427_8,
    -5.296_569e-1,
    -2.190_732_7e-1,
    7.557_116e-2,
    9.125_953_5e-3,
    3.920_176_3e-1,
    9.980_007_4e-1,
    -1.265_416_5,
];

/// erfc(a) for a >= 0 with a^2 = sq_hi + sq_lo given split (so the exponent is not rounded).
/// Past a = 9.2 erfc is below the smallest normal float and 0 is returned (a select, not a branch).
#[inline(always)]
fn erfc_pos(a: f32, sq_hi: f32, sq_lo: f32) -> f32 {
    let t = rcp(fma(0.5, a, 1.0));
    let e = t * exp_neg(-sq_hi, horner(t, &ERFC_Q) - sq_lo);
    if a < 9.2 { e } else { 0.0 }
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
