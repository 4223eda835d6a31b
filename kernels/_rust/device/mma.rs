//! Tensor cores from Rust: one warp-wide `mma.sync.aligned.m16n8k8` with TF32 inputs and FP32
//! accumulators through inline PTX, and the split of an FP32 value into a TF32 high part and a TF32
//! remainder (`cvt.rna.tf32.f32`), so three TF32 products give FP32 accuracy (fp32x3).
//!
//! Fragment layout of m16n8k8 .tf32 (PTX ISA, "Matrix Fragments for mma.m16n8k8"), lane l of the
//! warp, g = l / 4 (the group), t = l % 4 (the thread in the group):
//!   A (16 x 8, row-major): a[r] is A[g + 8 * (r % 2)][t + 4 * (r / 2)]
//!   B (8 x 8, column-major): b[r] is B[t + 4 * r][g]
//!   C and D (16 x 8): c[r] is C[g + 8 * (r / 2)][2 * t + r % 2]
//! `frag_a`, `frag_b` and `frag_c` below are these maps; under the host emulator `mma_tf32` is a
//! plain-Rust model of the instruction built on them, so the kernels' index arithmetic is tested
//! against a plain matmul on the CPU. The model's arithmetic is the tensor core's, not IEEE's
//! ([`tc_sum`]): the accumulate truncates, which is what decides how a kernel may accumulate.

/// (row, column) of element `r` of lane `lane`'s A fragment (16 x 8).
#[inline(always)]
pub const fn frag_a(lane: usize, r: usize) -> (usize, usize) {
    (lane / 4 + 8 * (r % 2), lane % 4 + 4 * (r / 2))
}

/// (row k, column n) of element `r` of lane `lane`'s B fragment (8 x 8).
#[inline(always)]
pub const fn frag_b(lane: usize, r: usize) -> (usize, usize) {
    (lane % 4 + 4 * r, lane / 4)
}

/// (row, column) of element `r` of lane `lane`'s accumulator fragment (16 x 8).
#[inline(always)]
pub const fn frag_c(lane: usize, r: usize) -> (usize, usize) {
    (lane / 4 + 8 * (r / 2), 2 * (lane % 4) + r % 2)
}

/// `x` rounded to TF32 (10 mantissa bits), to nearest with ties away from zero, as an f32.
#[inline(always)]
pub fn to_tf32(x: f32) -> f32 {
    hw::to_tf32(x)
}

/// (hi, lo): hi = x rounded to TF32, lo = the rest rounded to TF32. x - hi is exact in FP32, so
/// hi + lo carries about 21 of x's 24 significant bits; hi*hi + hi*lo + lo*hi then misses only
/// lo*lo and the rounding of lo, each about 2^-22 of the product, below FP32's own 2^-24 per
/// add once accumulated over K.
#[inline(always)]
pub fn split(x: f32) -> (f32, f32) {
    let hi = to_tf32(x);
    (hi, to_tf32(x - hi))
}

/// The same split in integer arithmetic, for a kernel whose conversions would queue: hi's rounding
/// is two integer operations (add half of the dropped unit to the magnitude bits, clear the 13
/// bits: for finite x the value cvt.rna gives), and lo keeps its low bits plus that half unit,
/// which the mma ignores (it reads the top 19 bits), so lo is read rounded to nearest as well.
/// `mma_tf32` gives the same products for either split; only the register contents differ.
#[inline(always)]
pub fn split_bits(x: f32) -> (f32, f32) {
    let hi = f32::from_bits((x.to_bits().wrapping_add(0x1000)) & 0xFFFF_E000);
    (hi, f32::from_bits((x - hi).to_bits().wrapping_add(0x1000)))
}

/// d += A B for the warp's 16 x 8 x 8 tile, each lane holding its fragments (layout above).
/// All 32 lanes call it together, from warp-uniform control flow.
#[inline(always)]
pub fn mma_tf32(d: &mut [f32; 4], a: [f32; 4], b: [f32; 2]) {
    hw::mma_tf32(d, a, b)
}

#[cfg(target_arch = "nvptx64")]
mod hw {
    use core::arch::asm;

    #[inline(always)]
    pub fn to_tf32(x: f32) -> f32 {
        let out: u32;
        // SAFETY: arithmetic only; the result is a .b32 holding the TF32 value in FP32 layout.
        unsafe {
            asm!("cvt.rna.tf32.f32 {o}, {x};", o = out(reg32) out, x = in(reg32) x, options(pure, nomem, nostack))
        };
        f32::from_bits(out)
    }

    #[inline(always)]
    pub fn mma_tf32(d: &mut [f32; 4], a: [f32; 4], b: [f32; 2]) {
        let (a0, a1, a2, a3) = (a[0].to_bits(), a[1].to_bits(), a[2].to_bits(), a[3].to_bits());
        let (b0, b1) = (b[0].to_bits(), b[1].to_bits());
        // SAFETY: registers only; every lane of the warp executes it (the caller's contract).
        unsafe {
            asm!(
                "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {{{d0}, {d1}, {d2}, {d3}}}, \
                 {{{a0}, {a1}, {a2}, {a3}}}, {{{b0}, {b1}}}, {{{d0}, {d1}, {d2}, {d3}}};",
                d0 = inout(reg32) d[0], d1 = inout(reg32) d[1], d2 = inout(reg32) d[2], d3 = inout(reg32) d[3],
                a0 = in(reg32) a0, a1 = in(reg32) a1, a2 = in(reg32) a2, a3 = in(reg32) a3,
                b0 = in(reg32) b0, b1 = in(reg32) b1,
                options(pure, nomem, nostack)
            )
        };
    }
}

#[cfg(not(target_arch = "nvptx64"))]
mod hw {
    /// cvt.rna.tf32.f32: adding half of the dropped 13 bits' unit to the magnitude bits rounds half
    /// away from zero (sign and magnitude are separate in IEEE bits); NaN and infinity pass.
    pub fn to_tf32(x: f32) -> f32 {
        if !x.is_finite() {
            return x;
        }
        f32::from_bits((x.to_bits() + 0x1000) & 0xFFFF_E000)
    }

    /// The instruction as the model below reads it: inputs read as TF32 (the low 13 bits ignored),
    /// exact products (11 x 11 significant bits fit an f64), each output's 8 products and its C
    /// summed by [`tc_sum`](super::tc_sum).
    pub fn mma_tf32(d: &mut [f32; 4], a: [f32; 4], b: [f32; 2]) {
        let tf = |x: f32| f32::from_bits(x.to_bits() & 0xFFFF_E000) as f64;
        let all = crate::emulate::warp_gather([a[0], a[1], a[2], a[3], b[0], b[1]]);
        let (mut am, mut bm) = ([[0.0f64; 8]; 16], [[0.0f64; 8]; 8]);
        for (lane, got) in all.iter().enumerate() {
            for (r, x) in got.iter().enumerate() {
                if r < 4 {
                    let (i, k) = super::frag_a(lane, r);
                    am[i][k] = tf(*x);
                } else {
                    let (k, j) = super::frag_b(lane, r - 4);
                    bm[k][j] = tf(*x);
                }
            }
        }
        let lane = crate::gpu::lane() as usize;
        for (r, dr) in d.iter_mut().enumerate() {
            let (i, j) = super::frag_c(lane, r);
            *dr = super::tc_sum(*dr, core::array::from_fn(|k| am[i][k] * bm[k][j]));
        }
    }
}

/// Products the tensor core adds to C in one fused step: all 8 of an m16n8k8 TF32 mma, one
/// truncation per instruction. (Of the variants tried, 8 products with 3 extra bits reproduces the
/// H200's measured drift of the running-sum kernel: 7.8e-6, 3.2e-5, 6.9e-5 at K = 1024, 4096, 8192
/// against the GPU's 7.2e-6, 2.9e-5, 5.7e-5; steps of 4 doubled it, no extra bits hid it.)
#[cfg(not(target_arch = "nvptx64"))]
pub const TC_STEP: usize = 8;
/// Bits kept below the leading bit of a step's largest term when the terms are aligned to it.
#[cfg(not(target_arch = "nvptx64"))]
pub const TC_BITS: i32 = 24 + 3;

/// One output of the mma as the tensor core computes it, in the model of published measurements of
/// its arithmetic (Fasi, Higham, Mikaitis and Pranesh 2021, for Volta to Ampere; Hopper's TF32 path
/// measured alike): per step of [`TC_STEP`] exact products and the running C, every term is cut to
/// the grid of the largest one's leading bit minus [`TC_BITS`] (bits shifted out are dropped, not
/// rounded), the cut terms are added exactly, and the sum is normalized to FP32 by truncation toward
/// zero. So each mma can lose up to about an ulp of its result, always toward zero: a running sum
/// fed back as C over all of K drifts by a bias that grows with K, where `add.f32` (round to
/// nearest) errs by as much up as down. IEEE rounding (f64 sum, one rounding) would hide this.
#[cfg(not(target_arch = "nvptx64"))]
pub fn tc_sum(c: f32, products: [f64; 8]) -> f32 {
    let mut acc = c;
    for step in products.chunks(TC_STEP) {
        let big = step.iter().fold((acc as f64).abs(), |m, p| m.max(p.abs()));
        if big == 0.0 || !big.is_finite() {
            acc = (acc as f64 + step.iter().sum::<f64>()) as f32;
            continue;
        }
        // the grid: TC_BITS bits below big's leading bit (a power of two, so the cuts are exact)
        let lead = ((big.to_bits() >> 52) & 0x7FF) as i32 - 1023; // big >= 2^-149: a normal f64
        let grid = 2f64.powi(lead + 1 - TC_BITS);
        let cut = |x: f64| (x / grid).trunc() * grid;
        let sum = step.iter().fold(cut(acc as f64), |s, p| s + cut(*p));
        acc = trunc_f32(sum);
    }
    acc
}

/// `x` to FP32 toward zero (the exact f64 sum above has at most TC_BITS + 3 significant bits).
#[cfg(not(target_arch = "nvptx64"))]
pub fn trunc_f32(x: f64) -> f32 {
    let f = x as f32;
    if f.is_finite() && (f as f64).abs() > x.abs() { f32::from_bits(f.to_bits() - 1) } else { f }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::*;

    #[test]
    fn fragment_maps_cover_each_element_once() {
        let (mut a, mut b, mut c) = ([[0; 8]; 16], [[0; 8]; 8], [[0; 8]; 16]);
        for lane in 0..32 {
            for r in 0..4 {
                let (i, k) = frag_a(lane, r);
                a[i][k] += 1;
                let (i, j) = frag_c(lane, r);
                c[i][j] += 1;
            }
            for r in 0..2 {
                let (k, j) = frag_b(lane, r);
                b[k][j] += 1;
            }
        }
        assert!(a.iter().chain(c.iter()).flatten().all(|&x| x == 1) && b.iter().flatten().all(|&x| x == 1));
    }

    #[test]
    fn split_keeps_fp32_bits() {
        let mut rng = Rng(7);
        for _ in 0..10000 {
            let x = rng.f() * 10f32.powi(rng.below(20) as i32 - 10);
            let (hi, lo) = split(x);
            // TF32: the low 13 bits are zero; hi + lo within 2^-21 of x (relative)
            assert_eq!(hi.to_bits() & 0x1FFF, 0);
            assert_eq!(lo.to_bits() & 0x1FFF, 0);
            let err = ((hi as f64 + lo as f64) - x as f64).abs();
            assert!(err <= x.abs() as f64 * 2f64.powi(-21), "{x:e}: {hi:e} + {lo:e}");
        }
        for _ in 0..10000 {
            // the integer split: the same hi, and lo as the mma reads it (top 19 bits) the same
            let x = rng.f() * 10f32.powi(rng.below(20) as i32 - 10);
            let ((hi, lo), (bh, bl)) = (split(x), split_bits(x));
            assert_eq!((hi.to_bits(), lo.to_bits()), (bh.to_bits(), bl.to_bits() & 0xFFFF_E000), "{x:e}");
        }
        assert_eq!(to_tf32(1.0 + 2f32.powi(-11)), 1.0 + 2f32.powi(-10)); // a tie goes away from zero
        assert_eq!(to_tf32(-(1.0 + 2f32.powi(-11))), -(1.0 + 2f32.powi(-10)));
    }

    /// One warp: fragments loaded by the maps from a 16 x 8 and an 8 x 8 matrix of TF32 values,
    /// three products of split FP32 inputs, against the f64 product.
    #[test]
    fn one_mma_against_a_plain_matmul() {
        let mut rng = Rng(3);
        let (a, b) = (rng.vec(16 * 8), rng.vec(8 * 8));
        let want = matmul_ref(&a, &b, 16, 8, 8);
        let mut c = vec![f32::NAN; 16 * 8];
        let (pa, pb, pc) = (p!(a), p!(b), c.as_mut_ptr() as usize);
        crate::emulate::launch((1, 1, 1), (32, 1, 1), move || {
            let lane = crate::gpu::lane() as usize;
            let (a, b, c) = (pa as *const f32, pb as *const f32, pc as *mut f32);
            // SAFETY: the test's vectors, 16 x 8, 8 x 8 and 16 x 8; each lane writes its own 4 outputs.
            let (fa, fb) = unsafe {
                (
                    [0, 1, 2, 3].map(|r| *a.add(frag_a(lane, r).0 * 8 + frag_a(lane, r).1)),
                    [0, 1].map(|r| *b.add(frag_b(lane, r).0 * 8 + frag_b(lane, r).1)),
                )
            };
            let (ah, al) = (fa.map(|x| split(x).0), fa.map(|x| split(x).1));
            let (bh, bl) = (fb.map(|x| split(x).0), fb.map(|x| split(x).1));
            let mut d = [0.0f32; 4];
            mma_tf32(&mut d, al, bh);
            mma_tf32(&mut d, ah, bl);
            mma_tf32(&mut d, ah, bh);
            for (r, v) in d.iter().enumerate() {
                let (i, j) = frag_c(lane, r);
                unsafe { *c.add(i * 8 + j) = *v };
            }
        });
        let e = rel(&c, &want);
        assert!(e < 1e-6, "three TF32 products: rel error {e:e}");
        // one TF32 product alone is only TF32-accurate: the split is what buys the bits
        let tf: Vec<f32> = a.iter().map(|&x| to_tf32(x)).collect();
        let one = matmul_ref(&tf, &b.iter().map(|&x| to_tf32(x)).collect::<Vec<_>>(), 16, 8, 8);
        assert!(rel(&one.iter().map(|&x| x as f32).collect::<Vec<_>>(), &want) > 1e-5);
    }

    /// One output element's sum over `k` (a multiple of 16) the kernel's two ways, under [`tc_sum`]:
    /// `fresh` false: the running sum is C of every mma (three per k8 step: lo*hi, hi*lo, hi*hi);
    /// true: each 16-deep stage into a zeroed C (the four small products first, then the two large),
    /// the stage added to the running sum by an IEEE FP32 add.
    fn dot_schemes(a: &[f32], b: &[f32], fresh: bool) -> f32 {
        let prod = |x: &[f32], y: &[f32]| -> [f64; 8] {
            core::array::from_fn(|q| to_tf32(x[q]) as f64 * to_tf32(y[q]) as f64)
        };
        let (mut run, mut step) = (0.0f32, 0.0f32);
        for (s16a, s16b) in a.chunks(16).zip(b.chunks(16)) {
            let halves = |v: &[f32]| -> (Vec<f32>, Vec<f32>) { v.iter().map(|&x| split(x)).unzip() };
            let ((ah, al), (bh, bl)) = (halves(s16a), halves(s16b));
            let acc = if fresh { &mut step } else { &mut run };
            if fresh {
                *acc = 0.0;
                for j in [0, 8] {
                    *acc = tc_sum(*acc, prod(&al[j..], &bh[j..]));
                    *acc = tc_sum(*acc, prod(&ah[j..], &bl[j..]));
                }
                for j in [0, 8] {
                    *acc = tc_sum(*acc, prod(&ah[j..], &bh[j..]));
                }
                run += step;
            } else {
                for j in [0, 8] {
                    *acc = tc_sum(*acc, prod(&al[j..], &bh[j..]));
                    *acc = tc_sum(*acc, prod(&ah[j..], &bl[j..]));
                    *acc = tc_sum(*acc, prod(&ah[j..], &bh[j..]));
                }
            }
        }
        run
    }

    /// The model's arithmetic on single mma: one ulp's worth of products below 1.0 is dropped, not
    /// rounded up (IEEE would give 1 + 2^-23), on either sign, and a sum is cut toward zero.
    #[test]
    fn tc_sum_truncates_toward_zero() {
        let tiny = [0.75 * 2f64.powi(-23), 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        assert_eq!((1.0f64 + tiny[0]) as f32, 1.0 + f32::EPSILON);
        assert_eq!(tc_sum(1.0, tiny), 1.0);
        assert_eq!(tc_sum(-1.0, tiny.map(|p| -p)), -1.0);
        // exact sums stay exact: 8 products of 0.5 onto 1
        assert_eq!(tc_sum(1.0, [0.5; 8]), 5.0);
        // three extra bits: four products of 2^-26 onto 1 reach 2^-24, still short of an ulp
        let q = 2f64.powi(-26);
        assert_eq!(tc_sum(1.0, [q, q, q, q, 0.0, 0.0, 0.0, 0.0]), 1.0);
        assert_eq!(trunc_f32(-(1.0 + 0.9 * 2f64.powi(-23))), -1.0);
    }

    /// What the H200 showed, on the model: a running sum fed back as C of every mma drifts with K
    /// (the sum's error at K = 8192 far past FP32's), and the same products summed per 16-deep stage
    /// from zero, stages added by IEEE adds, stay at FP32's own error. The matmul kernel does the latter.
    #[test]
    fn running_sum_drifts_with_k_fresh_stages_do_not() {
        let mut rng = Rng(11);
        let k = 8192;
        let (mut old, mut new, mut want) = (vec![], vec![], vec![]);
        for _ in 0..48 {
            let (a, b) = (rng.vec(k), rng.vec(k));
            want.push(a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum::<f64>());
            old.push(dot_schemes(&a, &b, false));
            new.push(dot_schemes(&a, &b, true));
        }
        let (eo, en) = (rel(&old, &want), rel(&new, &want));
        assert!(eo > 1e-5, "the running sum should drift on the model: {eo:e}");
        assert!(en < 1e-6, "fresh stages: {en:e} (the running sum: {eo:e})");
    }
}
