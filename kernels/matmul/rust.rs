//! C = A B in FP32, three versions. `matmul_scalar` (markers `<kernel-scalar>`): one thread, one
//! output, the loop a newcomer writes. `matmul` (markers `<kernel>`): a 128 x 128 tile per block,
//! BLOCK_K = 8 slices of A and B staged through double-buffered shared memory, an 8 x 8 register
//! block per thread, 16-byte loads (`matmul_k16`: the same with BLOCK_K = 16). `matmul_fp32x3` (markers `<kernel-fp32x3>`): the same tile on
//! the tensor cores, each FP32 operand split into TF32 high and low parts and three TF32 products
//! per step (`mma.sync` through inline PTX), so FP32 accuracy at a third of the TF32 rate.
use crate::gpu::{self, In, Out, Tile, barrier, fma};
use crate::mma::{mma_tf32, split, split_bits};
use crate::{shared_tile, unroll};

// <kernel-scalar>
/// One thread per output: C[row, col] = sum_k A[row, k] B[k, col]. Block 16 x 16.
#[inline(always)]
pub fn matmul_scalar(a: *const f32, b: *const f32, c: *mut f32, m: u32, k: u32, n: u32) {
    let (m, k, n) = (m as usize, k as usize, n as usize);
    // SAFETY: the host checked each pointer against this kernel's table `lengths` (the same sizes).
    let (a, b, c) = unsafe { (In::new(a, m * k), In::new(b, k * n), Out::new(c, m * n)) };
    let (t, blk) = (gpu::thread(), gpu::block());
    let row = blk.y as usize * 16 + t.y as usize;
    let col = blk.x as usize * 16 + t.x as usize;
    if row >= m || col >= n {
        return;
    }
    let mut acc = 0.0f32;
    for kk in 0..k {
        acc = fma(a.get(row * k + kk), b.get(kk * n + col), acc);
    }
    c.set(row * n + col, acc);
}
// </kernel-scalar>

const BLOCK_M: usize = 128;
const BLOCK_N: usize = 128;
// The literal unroll counts below: 8 k steps per unrolled run (one or two runs a slice), 8 x 8 outputs
// a thread of a 16 x 16 thread grid (two 4-row halves 64 apart), 4 floats a staged load.
const _: () = assert!(BLOCK_M == 16 * 8 && BLOCK_N == 16 * 8 && BLOCK_M / 2 == 64);

// two buffers of each operand: 8-deep slices (`matmul`), 16-deep slices (`matmul_k16`)
shared_tile!(a_tiles, MATMUL_A, 2048);
shared_tile!(b_tiles, MATMUL_B, 2048);
shared_tile!(a16_tiles, MATMUL_A16, 4096);
shared_tile!(b16_tiles, MATMUL_B16, 4096);

// <kernel>
/// One k step of a thread's 8 x 8 register block: 8 values of A's column times 8 of B's row, 64
/// multiply-adds for 16 loaded floats (the triangle's kernel uses the same step per channel).
#[inline(always)]
pub(crate) fn outer8x8(acc: &mut [[f32; 8]; 8], a0: [f32; 4], a1: [f32; 4], b0: [f32; 4], b1: [f32; 4]) {
    let av = [a0[0], a0[1], a0[2], a0[3], a1[0], a1[1], a1[2], a1[3]];
    let bv = [b0[0], b0[1], b0[2], b0[3], b1[0], b1[1], b1[2], b1[3]];
    unroll!(i in 8 => {
        unroll!(j in 8 => {
            acc[i][j] = fma(av[i], bv[j], acc[i][j]);
        });
    });
}

/// BLOCK_K = 8 slices (the first tiled version).
#[inline(always)]
pub fn matmul(a: *const f32, b: *const f32, c: *mut f32, m: u32, k: u32, n: u32) {
    tiled::<8, 2048>(a_tiles(), b_tiles(), a, b, c, m, k, n)
}

/// BLOCK_K = 16 slices: half the barriers a K, and twice the bytes in flight while a slice is
/// multiplied (two 16-byte loads of each operand a thread instead of one).
#[inline(always)]
pub fn matmul_k16(a: *const f32, b: *const f32, c: *mut f32, m: u32, k: u32, n: u32) {
    tiled::<16, 4096>(a16_tiles(), b16_tiles(), a, b, c, m, k, n)
}

/// 256 threads; thread (tx, ty) = (tid % 16, tid / 16) owns rows ty*4 + {0..4} and 64 + ty*4 + {0..4}
/// and the same pattern of columns, so a warp's 16-byte shared loads touch consecutive addresses.
/// BK: the slice depth (8 or 16); N: both buffers of one operand, 2 * BK * 128 floats.
#[inline(always)]
fn tiled<const BK: usize, const N: usize>(
    a_tiles: Tile<N>,
    b_tiles: Tile<N>,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    m: u32,
    k: u32,
    n: u32,
) {
    const { assert!((BK == 8 || BK == 16) && N == 2 * BK * BLOCK_M && BK * BLOCK_N == BK * BLOCK_M) };
    let tile = BK * BLOCK_M; // one buffer of one operand
    let per = BK / 8; // 16-byte staged loads of each operand a thread
    let (m, k, n) = (m as usize, k as usize, n as usize);
    // SAFETY: the host checked each pointer against this kernel's table `lengths` (the same sizes).
    let (a, b, c) = unsafe { (In::new(a, m * k), In::new(b, k * n), Out::new(c, m * n)) };
    let tid = gpu::thread().x as usize;
    let blk = gpu::block();
    let (row0, col0) = (blk.y as usize * BLOCK_M, blk.x as usize * BLOCK_N);
    let (tx, ty) = (tid % 16, tid / 16);
    // which 4 floats of the A slice (row a_r, k a_k..a_k+4) and B slice (k b_k, cols b_c..) this
    // thread stages, for its h-th load (h < per)
    let a_at = |h: usize| ((tid + 256 * h) / (BK / 4), ((tid + 256 * h) % (BK / 4)) * 4);
    let b_at = |h: usize| ((tid + 256 * h) / 32, ((tid + 256 * h) % 32) * 4);

    let load_a = |k0: usize, h: usize| -> [f32; 4] {
        let (a_r, a_k) = a_at(h);
        let (row, cols) = (row0 + a_r, k0 + a_k);
        if h >= per || row >= m {
            return [0.0; 4];
        }
        if cols + 4 <= k { a.get4(row * k + cols) } else { a.get4_masked(row * k + cols, k - cols.min(k)) }
    };
    let load_b = |k0: usize, h: usize| -> [f32; 4] {
        let (b_k, b_c) = b_at(h);
        let (kk, cols) = (k0 + b_k, col0 + b_c);
        if h >= per || kk >= k {
            return [0.0; 4];
        }
        if cols + 4 <= n { b.get4(kk * n + cols) } else { b.get4_masked(kk * n + cols, n - cols.min(n)) }
    };
    let loads = |k0: usize| ([load_a(k0, 0), load_a(k0, 1)], [load_b(k0, 0), load_b(k0, 1)]);
    let store = |buf: usize, (av, bv): ([[f32; 4]; 2], [[f32; 4]; 2])| {
        unroll!(h in 2 => {
            if h < per {
                let ((a_r, a_k), (b_k, b_c)) = (a_at(h), b_at(h));
                // A is stored transposed, k-major, so the compute loop reads 4 consecutive rows at once
                unroll!(q in 4 => {
                    a_tiles.set(buf * tile + (a_k + q) * BLOCK_M + a_r, av[h][q]);
                });
                b_tiles.set4(buf * tile + b_k * BLOCK_N + b_c, bv[h]);
            }
        });
    };

    let mut acc = [[0.0f32; 8]; 8];
    let k_tiles = k.div_ceil(BK);
    store(0, loads(0));
    barrier();
    let mut kt = 0;
    while kt < k_tiles {
        let buf = kt & 1;
        let next = kt + 1 < k_tiles;
        // the next slices' global loads are in flight while this slice is multiplied
        let staged = if next { loads((kt + 1) * BK) } else { ([[0.0; 4]; 2], [[0.0; 4]; 2]) };
        // windows on this slice: the thread's first rows (columns), the others at constant offsets
        let (a_view, b_view) =
            (a_tiles.view(buf * tile + ty * 4, tile - 60), b_tiles.view(buf * tile + tx * 4, tile - 60));
        unroll!(run in 2 => {
            if run < per {
                unroll!(kk in 8 => {
                    let at = (run * 8 + kk) * BLOCK_M;
                    let (a0, a1) = (a_view.get4(at), a_view.get4(at + 64));
                    let (b0, b1) = (b_view.get4(at), b_view.get4(at + 64));
                    outer8x8(&mut acc, a0, a1, b0, b1);
                });
            }
        });
        if next {
            store(buf ^ 1, staged);
        }
        barrier();
        kt += 1;
    }

    unroll!(i in 8 => {
        let row = row0 + (i / 4) * 64 + ty * 4 + i % 4;
        unroll!(h in 2 => {
            let cols = col0 + h * 64 + tx * 4;
            if row < m && cols < n {
                let v = [acc[i][h * 4], acc[i][h * 4 + 1], acc[i][h * 4 + 2], acc[i][h * 4 + 3]];
                c.set4(row * n + cols, v, n - cols);
            }
        });
    });
}
// </kernel>

// <kernel-fp32x3>
const TC_BM: usize = 128;
const TC_BN: usize = 128;
const TC_BK: usize = 16; // two k8 mma steps per stage; two stages of both operands fill 32 KB
const TC_STAGE: usize = 2048; // one stage of one operand
const GROUP_M: usize = 8; // tile rows a wave walks before moving right: its B panels stay in L2
const _: () = assert!(TC_BM * TC_BK == TC_STAGE && TC_BK * TC_BN == TC_STAGE && TC_BK == 16);

shared_tile!(tc_a_tiles, MATMUL_TC_A, 4096);
shared_tile!(tc_b_tiles, MATMUL_TC_B, 4096);

/// Where A's 4-float chunk `chunk` of tile row `m` sits in a stage: rows of 16 floats, the chunk
/// index XORed with bits 1-2 of the row, so the 8 rows a fragment load touches (two per 16-bank
/// half) land on 8 different groups of 4 banks. An XOR of whole chunks keeps 16-byte stores.
#[inline(always)]
fn a_slot(m: usize, chunk: usize) -> usize {
    m * TC_BK + ((chunk ^ ((m >> 1) & 3)) << 2)
}

/// Where B's element (k, n) of a stage sits: rows of 128 floats, n's bits 3-4 XORed with bits 2-3
/// of k, so the four k rows 4t + c that one fragment load reads fall on four different groups of
/// 8 banks.
#[inline(always)]
fn b_slot(k: usize, n: usize) -> usize {
    k * TC_BN + (n ^ (((k >> 2) & 3) << 3))
}

/// (tile row, tile column) of this block in grouped order: GROUP_M tile rows, column by column.
#[inline(always)]
fn grouped_tile(m: usize, n: usize) -> (usize, usize) {
    let blk = gpu::block();
    let (tiles_m, tiles_n) = (m.div_ceil(TC_BM), n.div_ceil(TC_BN));
    let pid = blk.y as usize * tiles_n + blk.x as usize;
    // max(1): a launch has m, n > 0, but the compiler would keep a division-by-zero panic path
    let width = (GROUP_M * tiles_n).max(1);
    let first = (pid / width) * GROUP_M;
    let rows = tiles_m.saturating_sub(first).clamp(1, GROUP_M);
    (first + (pid % width) % rows, (pid % width) / rows)
}

/// 256 threads as 8 warps in a 2 x 4 grid, each warp a 64 x 32 output tile = 4 x 4 mma tiles of
/// 16 x 8. Within a 16-deep stage, the k index is permuted (the sum does not care, A and B agree):
/// k8 step j takes physical k = 4t + 2j for the fragment's column t and 4t + 2j + 1 for t + 4, so
/// a lane's A values for both steps are one 16-byte load. `CVT`: split with `cvt.rna.tf32.f32`
/// (true) or with integer operations (false, [`split_bits`]): the same products, and a measurement
/// says which issues faster. Each stage is summed on the tensor cores from zero and added to the
/// running sum with FP32 adds (why: in the stage loop).
#[inline(always)]
pub fn matmul_fp32x3<const CVT: bool>(a: *const f32, b: *const f32, c: *mut f32, m: u32, k: u32, n: u32) {
    let halves = |x: f32| if CVT { split(x) } else { split_bits(x) };
    let (m, k, n) = (m as usize, k as usize, n as usize);
    // SAFETY: the host checked each pointer against this kernel's table `lengths` (the same sizes).
    let (a, b, c) = unsafe { (In::new(a, m * k), In::new(b, k * n), Out::new(c, m * n)) };
    let (a_tiles, b_tiles) = (tc_a_tiles(), tc_b_tiles());
    let tid = gpu::thread().x as usize;
    let (tile_m, tile_n) = grouped_tile(m, n);
    let (row0, col0) = (tile_m * TC_BM, tile_n * TC_BN);
    let (warp, lane) = (tid / 32, tid % 32);
    let (g, t) = (lane / 4, lane % 4);
    let (wm, wn) = (warp / 4, warp % 4);
    // staging: A rows tid/4 and 64 + tid/4 (chunk tid%4), B k rows tid/32 and 8 + tid/32 (chunk tid%32)
    let (sa_m, sa_c, sb_k, sb_c) = (tid / 4, tid % 4, tid / 32, tid % 32);
    let load_a = |k0: usize, h: usize| -> [f32; 4] {
        let (row, col) = (row0 + sa_m + 64 * h, k0 + 4 * sa_c);
        if row >= m {
            return [0.0; 4];
        }
        if col + 4 <= k { a.get4(row * k + col) } else { a.get4_masked(row * k + col, k - col.min(k)) }
    };
    let load_b = |k0: usize, h: usize| -> [f32; 4] {
        let (kk, col) = (k0 + sb_k + 8 * h, col0 + 4 * sb_c);
        if kk >= k {
            return [0.0; 4];
        }
        if col + 4 <= n { b.get4(kk * n + col) } else { b.get4_masked(kk * n + col, n - col.min(n)) }
    };
    let loads = |k0: usize| ([load_a(k0, 0), load_a(k0, 1)], [load_b(k0, 0), load_b(k0, 1)]);
    let store = |buf: usize, (av, bv): ([[f32; 4]; 2], [[f32; 4]; 2])| {
        unroll!(h in 2 => {
            a_tiles.set4(buf * TC_STAGE + a_slot(sa_m + 64 * h, sa_c), av[h]);
            b_tiles.set4(buf * TC_STAGE + b_slot(sb_k + 8 * h, 4 * sb_c), bv[h]);
        });
    };
    // a lane's fragment reads: the swizzle of rows g + 16 i and g + 8 + 16 i is g's, and B's of
    // rows 4t + c is t's, so every read is a per-thread base plus a constant
    let a_base = (wm * 64 + g) * TC_BK + ((t ^ (g >> 1)) << 2);
    let b_base = [0, 1, 2, 3].map(|nt| 4 * t * TC_BN + wn * 32 + ((nt ^ t) << 3) + g);

    // the running sums over K, [m tile][n tile][fragment element]: changed by IEEE adds only
    let mut acc = [[[0.0f32; 4]; 4]; 4];
    let k_tiles = k.div_ceil(TC_BK);
    store(0, loads(0));
    barrier();
    let mut kt = 0;
    while kt < k_tiles {
        let buf = kt & 1;
        let next = kt + 1 < k_tiles;
        // the next stage's global loads are in flight while this one is multiplied
        let staged = if next { loads((kt + 1) * TC_BK) } else { ([[0.0; 4]; 2], [[0.0; 4]; 2]) };
        let av = a_tiles.view(buf * TC_STAGE + a_base, 3 * 16 * TC_BK + 8 * TC_BK + 4);
        // B's fragments of both k8 steps, split once for the four m tiles: [step j][n tile][h]
        let (mut bh, mut bl) = ([[[0.0f32; 2]; 4]; 2], [[[0.0f32; 2]; 4]; 2]);
        unroll!(j in 2 => {
            unroll!(nt in 4 => {
                let w = b_tiles.window(buf * TC_STAGE + b_base[nt], 3 * TC_BN + 1);
                unroll!(h in 2 => {
                    (bh[j][nt][h], bl[j][nt][h]) = halves(w.get((2 * j + h) * TC_BN));
                });
            });
        });
        unroll!(mt in 4 => {
            let ra = [av.get4(mt * 16 * TC_BK), av.get4(mt * 16 * TC_BK + 8 * TC_BK)];
            // step j's a0..a3: rows g, g + 8 at logical column t, then the same rows at t + 4
            let (mut ah, mut al) = ([[0.0f32; 4]; 2], [[0.0f32; 4]; 2]);
            unroll!(j in 2 => {
                let x = [ra[0][2 * j], ra[1][2 * j], ra[0][2 * j + 1], ra[1][2 * j + 1]];
                unroll!(r in 4 => {
                    (ah[j][r], al[j][r]) = halves(x[r]);
                });
            });
            // The stage's products go into a zeroed accumulator, never into the running sum: the
            // tensor core's accumulate truncates toward zero, so a sum fed back as C through all
            // of K drifts low by up to an ulp an mma (on the H200, 5.7e-5 at K = 8192; the model
            // in mma.rs reproduces it). A stage's sum is small and its truncations fall either
            // way across stages; `add.f32` (round to nearest) then adds it to the running sum.
            // The four small products first, then the two large, so the small ones are added at
            // their own scale. Each product over the four n tiles in turn: consecutive mma are
            // independent, and a fragment's next product waits three instructions.
            let mut part = [[0.0f32; 4]; 4];
            unroll!(j in 2 => {
                unroll!(nt in 4 => {
                    mma_tf32(&mut part[nt], al[j], bh[j][nt]);
                });
                unroll!(nt in 4 => {
                    mma_tf32(&mut part[nt], ah[j], bl[j][nt]);
                });
            });
            unroll!(j in 2 => {
                unroll!(nt in 4 => {
                    mma_tf32(&mut part[nt], ah[j], bh[j][nt]);
                });
            });
            unroll!(nt in 4 => {
                unroll!(r in 4 => {
                    acc[mt][nt][r] += part[nt][r];
                });
            });
        });
        if next {
            store(buf ^ 1, staged);
        }
        barrier();
        kt += 1;
    }

    // accumulator element r sits at row g + 8 (r / 2), column 2t + r % 2: pairs of columns
    unroll!(mt in 4 => {
        unroll!(nt in 4 => {
            unroll!(h in 2 => {
                let row = row0 + wm * 64 + mt * 16 + g + 8 * h;
                let col = col0 + wn * 32 + nt * 8 + 2 * t;
                if row < m && col < n {
                    c.set2(row * n + col, [acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]], n - col);
                }
            });
        });
    });
}
// </kernel-fp32x3>

#[cfg(test)]
mod tests {
    use crate::testing::*;

    #[test]
    fn matmul_fma_versions() {
        let mut rng = Rng(1);
        for &(m, k, n) in &[
            (1, 1, 1),
            (17, 33, 29),
            (130, 7, 65),
            (67, 200, 3),
            (128, 16, 128),
            (5, 12, 8),
            (3, 0, 4),
            (129, 40, 130),
        ] {
            let (a, b) = (rng.vec(m * k), rng.vec(k * n));
            let want = matmul_ref(&a, &b, m, k, n);
            for version in 0..3 {
                let mut c = vec![f32::NAN; m * n];
                let (pa, pb, pc) = (p!(a), p!(b), c.as_mut_ptr() as usize);
                let (mu, ku, nu) = (m as u32, k as u32, n as u32);
                run(launch::matmul(mu, nu, version > 0).unwrap(), move || {
                    let (a, b, c) = (pa as *const f32, pb as *const f32, pc as *mut f32);
                    match version {
                        0 => super::matmul_scalar(a, b, c, mu, ku, nu),
                        1 => super::matmul(a, b, c, mu, ku, nu),
                        _ => super::matmul_k16(a, b, c, mu, ku, nu),
                    }
                });
                let e = rel(&c, &want);
                assert!(e < 1e-5, "matmul version {version} {m}x{k}x{n}: rel error {e:e}");
            }
        }
    }

    /// The tensor-core kernel on the emulator's model of mma.sync: ragged edges in every dimension,
    /// K not a multiple of 4 (unaligned rows), more than one tile row and column (the grouped
    /// order), values over twelve decades (the split must keep FP32's bits at every scale).
    #[test]
    fn matmul_fp32x3_at_fp32_accuracy() {
        let mut rng = Rng(5);
        for &(m, k, n) in &[(1, 1, 1), (130, 37, 131), (17, 48, 9), (3, 0, 4), (64, 5, 260)] {
            let scale = |r: &mut Rng| 10f32.powi(r.below(13) as i32 - 6);
            let a: Vec<f32> = (0..m * k).map(|_| rng.f() * scale(&mut rng)).collect();
            let b = rng.vec(k * n);
            let want = matmul_ref(&a, &b, m, k, n);
            let mut c = vec![f32::NAN; m * n];
            let (pa, pb) = (p!(a), p!(b));
            let (mu, ku, nu) = (m as u32, k as u32, n as u32);
            for cvt in [true, false] {
                c.fill(f32::NAN);
                let pc = c.as_mut_ptr() as usize;
                run(launch::matmul(mu, nu, true).unwrap(), move || {
                    let (a, b, c) = (pa as *const f32, pb as *const f32, pc as *mut f32);
                    if cvt {
                        super::matmul_fp32x3::<true>(a, b, c, mu, ku, nu)
                    } else {
                        super::matmul_fp32x3::<false>(a, b, c, mu, ku, nu)
                    }
                });
                let e = rel(&c, &want);
                assert!(e < 2e-6, "matmul_fp32x3 cvt={cvt} {m}x{k}x{n}: rel error {e:e}");
            }
        }
    }

    /// The same at a long K, where the tensor core's truncating accumulate (modelled in mma.rs)
    /// would show if any product reached the running sums other than through a zeroed stage: a
    /// running sum fed back as C gives 8.4e-6 here on the model (the H200: 7.2e-6 at K = 1023).
    #[test]
    fn matmul_fp32x3_at_long_k_on_the_truncating_model() {
        let (m, k, n) = (24, 1024, 20);
        let mut rng = Rng(9);
        let (a, b) = (rng.vec(m * k), rng.vec(k * n));
        let want = matmul_ref(&a, &b, m, k, n);
        let mut c = vec![f32::NAN; m * n];
        let (pa, pb, pc) = (p!(a), p!(b), c.as_mut_ptr() as usize);
        let (mu, ku, nu) = (m as u32, k as u32, n as u32);
        run(launch::matmul(mu, nu, true).unwrap(), move || {
            let (a, b, c) = (pa as *const f32, pb as *const f32, pc as *mut f32);
            super::matmul_fp32x3::<false>(a, b, c, mu, ku, nu)
        });
        let e = rel(&c, &want);
        assert!(e < 1e-6, "matmul_fp32x3 {m}x{k}x{n}: rel error {e:e}");
    }

    #[test]
    fn fp32x3_swizzles_are_permutations_without_bank_conflicts() {
        use super::{a_slot, b_slot};
        let mut seen = [false; 2048];
        for m in 0..128 {
            for ch in 0..4 {
                for q in 0..4 {
                    let s = a_slot(m, ch) + q;
                    assert!(!seen[s]);
                    seen[s] = true;
                }
            }
        }
        let mut seen = [false; 2048];
        for kk in 0..16 {
            for nn in 0..128 {
                assert!(!seen[b_slot(kk, nn)]);
                seen[b_slot(kk, nn)] = true;
            }
        }
        // one B fragment read (a warp: k = 4t + c, n = base + g) hits 32 different banks
        for c in 0..4 {
            for base in [0, 8, 40, 96] {
                let mut banks: Vec<usize> = (0..32).map(|l| b_slot(4 * (l % 4) + c, base + l / 4) % 32).collect();
                banks.sort();
                banks.dedup();
                assert_eq!(banks.len(), 32);
            }
        }
        // one quarter-warp of a 16-byte A read (rows 2p, 2p + 1, chunks 0..3) covers 32 banks
        for m0 in (0..128).step_by(2) {
            let mut banks: Vec<usize> =
                (0..8).flat_map(|l| (0..4).map(move |q| (a_slot(m0 + l / 4, l % 4) + q) % 32)).collect();
            banks.sort();
            banks.dedup();
            assert_eq!(banks.len(), 32);
        }
    }
}
