//! The device's erf, erfc, exp and GELU, compiled for the host, against f64 references.
//! Bounds (relative to the true value, f32 has an ulp of 6e-8 to 1.2e-7):
//!   erf on [-6, 6]: 3e-7;  erfc on [-6, 9]: 1e-6 (the tail keeps its relative accuracy);
//!   gelu on [-13, 13]: 1.5e-6 where |gelu| > 1e-30;  exp_neg on [-87, 0]: 3e-7.
// Reference values to full f64 precision, as published.
#![allow(clippy::excessive_precision, clippy::approx_constant)]
use crate::device_math::{erf, erfc, exp_neg, gelu};

const SQRT_PI: f64 = 1.772_453_850_905_516;

/// erf by its Taylor series (|x| < 2.5; cancellation costs at most two digits there).
fn erf_series(x: f64) -> f64 {
    let (mut term, mut sum, x2) = (x, x, x * x);
    for n in 1..200 {
        term *= -x2 / n as f64;
        sum += term / (2 * n + 1) as f64;
    }
    2.0 / SQRT_PI * sum
}

/// erfc by its continued fraction (x >= 2.5), evaluated from the tail.
fn erfc_cf(x: f64) -> f64 {
    let mut t = x;
    for n in (1..=600).rev() {
        t = x + (n as f64 / 2.0) / t;
    }
    (-x * x).exp() / (SQRT_PI * t)
}

fn erfc64(x: f64) -> f64 {
    if x < 0.0 {
        2.0 - erfc64(-x)
    } else if x < 2.5 {
        1.0 - erf_series(x)
    } else {
        erfc_cf(x)
    }
}

fn erf64(x: f64) -> f64 {
    if x.abs() < 2.5 { erf_series(x) } else { x.signum() * (1.0 - erfc_cf(x.abs())) }
}

fn grid(lo: f64, hi: f64, n: usize) -> impl Iterator<Item = f32> {
    (0..=n).map(move |i| (lo + (hi - lo) * i as f64 / n as f64) as f32)
}

fn rel(got: f32, want: f64) -> f64 {
    ((got as f64 - want) / want).abs()
}

#[test]
fn reference_matches_known_values() {
    assert!((erf64(1.0) - 0.842_700_792_949_714_9).abs() < 1e-15);
    assert!((erf64(0.5) - 0.520_499_877_813_046_5).abs() < 1e-15);
    assert!((erfc64(2.0) / 0.004_677_734_981_047_266 - 1.0).abs() < 1e-12);
    assert!((erfc64(3.0) / 2.209_049_699_858_544e-5 - 1.0).abs() < 1e-12);
    assert!((erfc64(5.0) / 1.537_459_794_428_035e-12 - 1.0).abs() < 1e-12);
}

#[test]
fn erf_within_3e7() {
    let worst =
        grid(-6.0, 6.0, 240_000).filter(|&x| x != 0.0).map(|x| rel(erf(x), erf64(x as f64))).fold(0.0, f64::max);
    println!("erf: max relative error {worst:.3e}");
    assert!(worst < 3e-7, "erf max relative error {worst:.3e}");
    assert_eq!(erf(0.0), 0.0);
}

#[test]
fn erfc_within_1e6_into_the_tail() {
    let worst = grid(-6.0, 9.0, 300_000).map(|x| rel(erfc(x), erfc64(x as f64))).fold(0.0, f64::max);
    println!("erfc: max relative error {worst:.3e}");
    assert!(worst < 1e-6, "erfc max relative error {worst:.3e}");
}

#[test]
fn gelu_within_1_5e6() {
    let mut worst = 0.0f64;
    for z in grid(-13.0, 13.0, 520_000) {
        let zd = z as f64;
        let want = 0.5 * zd * erfc64(-zd / std::f64::consts::SQRT_2);
        if want.abs() > 1e-30 {
            worst = worst.max(rel(gelu(z), want));
        }
    }
    println!("gelu: max relative error {worst:.3e}");
    assert!(worst < 1.5e-6, "gelu max relative error {worst:.3e}");
    assert_eq!(gelu(0.0), 0.0);
}

#[test]
fn exp_neg_within_3e7() {
    let worst = grid(-87.0, 0.0, 200_000).map(|x| rel(exp_neg(x, 0.0), (x as f64).exp())).fold(0.0, f64::max);
    println!("exp_neg: max relative error {worst:.3e}");
    assert!(worst < 3e-7, "exp_neg max relative error {worst:.3e}");
}
