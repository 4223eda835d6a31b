//! C = A B in FP32, two versions. `matmul_scalar` (markers `<kernel-scalar>`): one thread, one
//! output, the loop a newcomer writes. `matmul` (markers `<kernel>`): a 128 x 128 tile per block,
//! BLOCK_K = 8 slices of A and B staged through double-buffered shared memory, an 8 x 8 register
//! block per thread, 16-byte loads.
use crate::gpu::{self, In, Out, barrier, fma};
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
const BLOCK_K: usize = 8;
const TILE: usize = BLOCK_K * BLOCK_M; // one buffer of one operand: 1024 floats
// The literal unroll counts below: 8 k steps a slice, 8 x 8 outputs a thread of a 16 x 16 thread grid
// (two 4-row halves 64 apart), 4 floats a staged load.
const _: () = assert!(BLOCK_K == 8 && BLOCK_M == 16 * 8 && BLOCK_N == 16 * 8 && BLOCK_M / 2 == 64);
// the shared tiles hold two buffers of each operand
const _: () = assert!(2 * TILE == 2048 && BLOCK_K * BLOCK_N == TILE);

shared_tile!(a_tiles, MATMUL_A, 2048);
shared_tile!(b_tiles, MATMUL_B, 2048);

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

/// 256 threads; thread (tx, ty) = (tid % 16, tid / 16) owns rows ty*4 + {0..4} and 64 + ty*4 + {0..4}
/// and the same pattern of columns, so a warp's 16-byte shared loads touch consecutive addresses.
#[inline(always)]
pub fn matmul(a: *const f32, b: *const f32, c: *mut f32, m: u32, k: u32, n: u32) {
    let (m, k, n) = (m as usize, k as usize, n as usize);
    // SAFETY: the host checked each pointer against this kernel's table `lengths` (the same sizes).
    let (a, b, c) = unsafe { (In::new(a, m * k), In::new(b, k * n), Out::new(c, m * n)) };
    let (a_tiles, b_tiles) = (a_tiles(), b_tiles());
    let tid = gpu::thread().x as usize;
    let blk = gpu::block();
    let (row0, col0) = (blk.y as usize * BLOCK_M, blk.x as usize * BLOCK_N);
    let (tx, ty) = (tid % 16, tid / 16);
    // which 4 floats of the A slice (row a_r, k a_k..a_k+4) and B slice (k b_k, cols b_c..) this thread stages
    let (a_r, a_k) = (tid / 2, (tid % 2) * 4);
    let (b_k, b_c) = (tid / 32, (tid % 32) * 4);

    let load_a = |k0: usize| -> [f32; 4] {
        let (row, cols) = (row0 + a_r, k0 + a_k);
        if row >= m {
            return [0.0; 4];
        }
        if cols + 4 <= k { a.get4(row * k + cols) } else { a.get4_masked(row * k + cols, k - cols.min(k)) }
    };
    let load_b = |k0: usize| -> [f32; 4] {
        let (kk, cols) = (k0 + b_k, col0 + b_c);
        if kk >= k {
            return [0.0; 4];
        }
        if cols + 4 <= n { b.get4(kk * n + cols) } else { b.get4_masked(kk * n + cols, n - cols.min(n)) }
    };
    let store = |buf: usize, av: [f32; 4], bv: [f32; 4]| {
        // A is stored transposed, k-major, so the compute loop reads 4 consecutive rows at once
        unroll!(q in 4 => {
            a_tiles.set(buf * TILE + (a_k + q) * BLOCK_M + a_r, av[q]);
        });
        b_tiles.set4(buf * TILE + b_k * BLOCK_N + b_c, bv);
    };

    let mut acc = [[0.0f32; 8]; 8];
    let k_tiles = k.div_ceil(BLOCK_K);
    store(0, load_a(0), load_b(0));
    barrier();
    let mut kt = 0;
    while kt < k_tiles {
        let buf = kt & 1;
        let next = kt + 1 < k_tiles;
        // the next slices' global loads are in flight while this slice is multiplied
        let (na, nb) =
            if next { (load_a((kt + 1) * BLOCK_K), load_b((kt + 1) * BLOCK_K)) } else { ([0.0; 4], [0.0; 4]) };
        // windows on this slice: the thread's first rows (columns), the others at constant offsets
        let (a_view, b_view) =
            (a_tiles.view(buf * TILE + ty * 4, TILE - 60), b_tiles.view(buf * TILE + tx * 4, TILE - 60));
        unroll!(kk in 8 => {
            let (a0, a1) = (a_view.get4(kk * BLOCK_M), a_view.get4(kk * BLOCK_M + 64));
            let (b0, b1) = (b_view.get4(kk * BLOCK_N), b_view.get4(kk * BLOCK_N + 64));
            outer8x8(&mut acc, a0, a1, b0, b1);
        });
        if next {
            store(buf ^ 1, na, nb);
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

#[cfg(test)]
mod tests {
    use crate::testing::*;

    #[test]
    fn matmul_both_versions() {
        let mut rng = Rng(1);
        for &(m, k, n) in &[(1, 1, 1), (17, 33, 29), (130, 7, 65), (67, 200, 3), (128, 16, 128), (5, 12, 8), (3, 0, 4)]
        {
            let (a, b) = (rng.vec(m * k), rng.vec(k * n));
            let want = matmul_ref(&a, &b, m, k, n);
            for tiled in [false, true] {
                let mut c = vec![f32::NAN; m * n];
                let (pa, pb, pc) = (p!(a), p!(b), c.as_mut_ptr() as usize);
                let (mu, ku, nu) = (m as u32, k as u32, n as u32);
                run(launch::matmul(mu, nu, tiled).unwrap(), move || {
                    let (a, b, c) = (pa as *const f32, pb as *const f32, pc as *mut f32);
                    if tiled { super::matmul(a, b, c, mu, ku, nu) } else { super::matmul_scalar(a, b, c, mu, ku, nu) }
                });
                let e = rel(&c, &want);
                assert!(e < 1e-5, "matmul tiled={tiled} {m}x{k}x{n}: rel error {e:e}");
            }
        }
    }
}
