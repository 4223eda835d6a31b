//! LayerNorm over the last dimension, one block of 256 threads per row. A row of up to
//! 256 * 4 * VEC = 4096 floats stays in registers (one read of x, exact two-pass mean and variance);
//! longer rows are re-read for the second and third pass. One body for every storage type (`Store`):
//! f32, and bf16 (u16) loaded widened to f32, the statistics and the affine map in f32, the output
//! rounded to bf16 at the store.
use crate::bf16::Store;
use crate::gpu::{self, In, Out, barrier, fma, sqrt, warp_sum};
use crate::{shared_tile, unroll};

pub const THREADS: usize = 256;
const VEC: usize = 4; // float4s a thread keeps: rows up to 4096 floats stay in registers
// the literal unroll counts below: VEC float4s a thread, THREADS / 32 warps a block
const _: () = assert!(VEC == 4 && THREADS / 32 == 8);

shared_tile!(partials, LAYERNORM_RED, 16);

/// Sum over the block; every thread gets the same total (fixed order: warps, then warp 0).
#[inline(always)]
fn block_sum(v: f32) -> f32 {
    let red = partials();
    let tid = gpu::thread().x as usize;
    let s = warp_sum(v);
    if tid % 32 == 0 {
        red.set(tid / 32, s);
    }
    barrier();
    let mut total = 0.0;
    unroll!(w in 8 => { // THREADS / 32 warps
        total += red.get(w);
    });
    barrier(); // everyone has read before the next call overwrites
    total
}

// <kernel>
/// Grid (R); x, y are [R, C]; gamma, beta are [C]; S the storage type (f32 or bf16 bits).
#[inline(always)]
pub fn layernorm<S: Store>(x: *const S, gamma: *const S, beta: *const S, y: *mut S, r: u32, c: u32, eps: f32) {
    let (r, c) = (r as usize, c as usize);
    // SAFETY: the host checked each pointer against this kernel's table `lengths` (the same sizes).
    let (x, gamma, beta, y) = unsafe { (In::new(x, r * c), In::new(gamma, c), In::new(beta, c), Out::new(y, r * c)) };
    let row = gpu::block().x as usize;
    let tid = gpu::thread().x as usize;
    if row >= r {
        return;
    }
    let base = row * c;
    let inv_c = 1.0 / c as f32;
    if c <= THREADS * 4 * VEC {
        // thread tid holds columns (tid + THREADS * j) * 4 .. + 4, j < VEC
        let mut v = [[0.0f32; 4]; VEC];
        // all VEC loads are issued before any is used: summing inside this loop made each 16-byte load
        // wait for the one before it (one load in flight a thread; 60% of copy bandwidth measured)
        unroll!(j in 4 => {
            let cols = (tid + THREADS * j) * 4;
            if cols < c {
                v[j] = if cols + 4 <= c { S::load4(&x, base + cols) } else { S::load4_masked(&x, base + cols, c - cols) };
            }
        });
        let mut sum = 0.0;
        unroll!(j in 4 => { // columns past C hold zeros
            sum += (v[j][0] + v[j][1]) + (v[j][2] + v[j][3]);
        });
        let mean = block_sum(sum) * inv_c;
        let mut sq = 0.0;
        unroll!(j in 4 => {
            let cols = (tid + THREADS * j) * 4;
            unroll!(q in 4 => {
                if cols + q < c {
                    let d = v[j][q] - mean;
                    sq = fma(d, d, sq);
                }
            });
        });
        let rstd = 1.0 / sqrt(block_sum(sq) * inv_c + eps);
        unroll!(j in 4 => {
            let cols = (tid + THREADS * j) * 4;
            if cols < c {
                let (g, bt) = (S::load4(&gamma, cols), S::load4(&beta, cols));
                let mut o = [0.0f32; 4];
                unroll!(q in 4 => {
                    o[q] = fma((v[j][q] - mean) * rstd, g[q], bt[q]);
                });
                S::store4(&y, base + cols, o, c - cols);
            }
        });
    } else {
        // long rows: three passes over x (the row is re-read from L1/L2, not DRAM)
        let mut sum = 0.0;
        let mut col = tid;
        while col < c {
            sum += S::load(&x, base + col);
            col += THREADS;
        }
        let mean = block_sum(sum) * inv_c;
        let mut sq = 0.0;
        col = tid;
        while col < c {
            let d = S::load(&x, base + col) - mean;
            sq = fma(d, d, sq);
            col += THREADS;
        }
        let rstd = 1.0 / sqrt(block_sum(sq) * inv_c + eps);
        col = tid;
        while col < c {
            let v = fma((S::load(&x, base + col) - mean) * rstd, S::load(&gamma, col), S::load(&beta, col));
            S::store(&y, base + col, v);
            col += THREADS;
        }
    }
}
// </kernel>

#[cfg(test)]
mod tests {
    use crate::testing::*;

    #[test]
    fn layernorm_both_paths() {
        let mut rng = Rng(3);
        for &(r, c) in &[(1, 1), (3, 4099), (5, 1000), (4, 37), (2, 4096), (1, 9000)] {
            let x: Vec<f32> = rng.vec(r * c).iter().map(|v| v + 0.5).collect();
            let (g, bt) = (rng.vec(c), rng.vec(c));
            let mut y = vec![f32::NAN; r * c];
            let (px, pg, pb, py) = (p!(x), p!(g), p!(bt), y.as_mut_ptr() as usize);
            run(launch::layernorm(r as u32).unwrap(), move || {
                super::layernorm(
                    px as *const f32,
                    pg as *const f32,
                    pb as *const f32,
                    py as *mut f32,
                    r as u32,
                    c as u32,
                    1e-5,
                )
            });
            let mut want = vec![0.0; r * c];
            for i in 0..r {
                let row = &x[i * c..(i + 1) * c];
                let mean = row.iter().map(|&v| v as f64).sum::<f64>() / c as f64;
                let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / c as f64;
                for j in 0..c {
                    want[i * c + j] = (row[j] as f64 - mean) / (var + 1e-5).sqrt() * g[j] as f64 + bt[j] as f64;
                }
            }
            let e = rel(&y, &want);
            assert!(e < 1e-5, "layernorm {r}x{c}: rel error {e:e}");
        }
    }

    /// bf16 storage: the f32 kernel on the widened inputs, rounded once, is what the bf16 kernel stores
    /// (same statistics, same order), for both paths; an offset row so the mean matters.
    #[test]
    fn layernorm_bf16_is_the_f32_kernel_rounded() {
        let mut rng = Rng(13);
        for &(r, c) in &[(1, 1), (3, 4099), (4, 37), (2, 4096), (2, 5000), (3, 6)] {
            let xb = bf16s(&rng.vec(r * c).iter().map(|v| v * 4.0 + 3.0).collect::<Vec<_>>());
            let (gb, bb) = (bf16s(&rng.vec(c)), bf16s(&rng.vec(c)));
            let (xf, gf, bf) = (widened(&xb), widened(&gb), widened(&bb));
            let mut yf = vec![f32::NAN; r * c];
            let mut yb = vec![0x7fc0u16; r * c];
            let (pf, pb) = (
                [p!(xf), p!(gf), p!(bf), yf.as_mut_ptr() as usize],
                [p!(xb), p!(gb), p!(bb), yb.as_mut_ptr() as usize],
            );
            run(launch::layernorm(r as u32).unwrap(), move || {
                super::layernorm(
                    pf[0] as *const f32,
                    pf[1] as *const f32,
                    pf[2] as *const f32,
                    pf[3] as *mut f32,
                    r as u32,
                    c as u32,
                    1e-5,
                )
            });
            run(launch::layernorm(r as u32).unwrap(), move || {
                super::layernorm(
                    pb[0] as *const u16,
                    pb[1] as *const u16,
                    pb[2] as *const u16,
                    pb[3] as *mut u16,
                    r as u32,
                    c as u32,
                    1e-5,
                )
            });
            assert_eq!(yb, bf16s(&yf), "layernorm bf16 {r}x{c}");
        }
    }
}
