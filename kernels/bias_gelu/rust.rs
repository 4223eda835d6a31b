//! y = gelu(x + b) with the exact erf GELU. A block takes ROWS rows and a span of 4 * threads
//! columns; each thread loads 4 consecutive floats of each row (one 16-byte load when aligned). One body
//! for every storage type (`Store`): bf16 (u16) widened at the load, GELU in f32, rounded at the store.
use crate::bf16::Store;
use crate::gpu::{self, In, Out};
use crate::math::gelu;
use crate::unroll;

pub const ROWS: usize = 4;
const _: () = assert!(ROWS == 4); // the unroll counts over rows below

// <kernel>
/// Grid (ceil(R / ROWS), ceil(C / (4 * threads))); x, y are [R, C], b is [C]; S the storage type.
#[inline(always)]
pub fn bias_gelu<S: Store>(x: *const S, b: *const S, y: *mut S, r: u32, c: u32) {
    let (r, c) = (r as usize, c as usize);
    // SAFETY: the host checked each pointer against this kernel's table `lengths` (the same sizes).
    let (x, b, y) = unsafe { (In::new(x, r * c), In::new(b, c), Out::new(y, r * c)) };
    let (t, blk) = (gpu::thread(), gpu::block());
    let threads = gpu::block_dim_x() as usize;
    let cols = (blk.y as usize * threads + t.x as usize) * 4;
    if cols >= c {
        return;
    }
    let mask = c - cols; // how many of the 4 columns exist (>= 4: all)
    let bias = S::load4(&b, cols);
    let row0 = blk.x as usize * ROWS;
    let mut xs = [[0.0f32; 4]; ROWS];
    // all ROWS loads issued before any math: more bytes in flight per thread
    unroll!(i in 4 => {
        if row0 + i < r {
            xs[i] = S::load4(&x, (row0 + i) * c + cols);
        }
    });
    unroll!(i in 4 => {
        let row = row0 + i;
        if row < r {
            let v = [gelu(xs[i][0] + bias[0]), gelu(xs[i][1] + bias[1]), gelu(xs[i][2] + bias[2]),
                     gelu(xs[i][3] + bias[3])];
            S::store4(&y, row * c + cols, v, mask);
        }
    });
}
// </kernel>

#[cfg(test)]
mod tests {
    use crate::testing::*;

    #[test]
    fn bias_gelu_matches_f64() {
        let mut rng = Rng(2);
        for &(r, c) in &[(1, 1), (3, 4097), (37, 129), (9, 1024), (5, 8), (6, 3)] {
            let x: Vec<f32> = rng.vec(r * c).iter().map(|v| v * 6.0).collect();
            let b = rng.vec(c);
            let mut y = vec![f32::NAN; r * c];
            let (px, pb, py) = (p!(x), p!(b), y.as_mut_ptr() as usize);
            run(launch::bias_gelu(r as u32, c as u32).unwrap(), move || {
                super::bias_gelu(px as *const f32, pb as *const f32, py as *mut f32, r as u32, c as u32)
            });
            let want: Vec<f64> = (0..r * c)
                .map(|i| {
                    let z = x[i] as f64 + b[i % c] as f64;
                    0.5 * z * (1.0 + erf64(z / std::f64::consts::SQRT_2))
                })
                .collect();
            let e = rel(&y, &want);
            assert!(e < 2e-6, "bias_gelu {r}x{c}: rel error {e:e}");
        }
    }

    /// bf16 storage: the f32 kernel on the widened inputs, rounded once, is what the bf16 kernel stores.
    #[test]
    fn bias_gelu_bf16_is_the_f32_kernel_rounded() {
        let mut rng = Rng(12);
        for &(r, c) in &[(1, 1), (3, 4097), (37, 129), (5, 8), (6, 3), (2, 1030)] {
            let xb = bf16s(&rng.vec(r * c).iter().map(|v| v * 6.0).collect::<Vec<_>>());
            let bb = bf16s(&rng.vec(c));
            let (xf, bf) = (widened(&xb), widened(&bb));
            let mut yf = vec![f32::NAN; r * c];
            let mut yb = vec![0x7fc0u16; r * c];
            let pf = [p!(xf), p!(bf), yf.as_mut_ptr() as usize];
            let pb = [p!(xb), p!(bb), yb.as_mut_ptr() as usize];
            let g = || launch::bias_gelu(r as u32, c as u32).unwrap();
            run(g(), move || {
                super::bias_gelu(pf[0] as *const f32, pf[1] as *const f32, pf[2] as *mut f32, r as u32, c as u32)
            });
            run(g(), move || {
                super::bias_gelu(pb[0] as *const u16, pb[1] as *const u16, pb[2] as *mut u16, r as u32, c as u32)
            });
            assert_eq!(yb, bf16s(&yf), "bias_gelu bf16 {r}x{c}");
        }
    }

    /// erf to ~1e-15 for the references here (series near zero, continued fraction beyond).
    fn erf64(x: f64) -> f64 {
        let a = x.abs();
        let v = if a < 2.5 {
            let (mut term, mut sum) = (a, a);
            for n in 1..120 {
                term *= -a * a / n as f64;
                sum += term / (2 * n + 1) as f64;
            }
            2.0 / std::f64::consts::PI.sqrt() * sum
        } else {
            let mut t = a;
            for n in (1..=400).rev() {
                t = a + (n as f64 / 2.0) / t;
            }
            1.0 - (-a * a).exp() / (std::f64::consts::PI.sqrt() * t)
        };
        v.copysign(x)
    }
}
