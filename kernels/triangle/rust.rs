//! O[i, j, c] = sum_k A[i, k, c] B[j, k, c]: C independent matmuls A_c B_c^T read in place from
//! [N, N, C]. A block takes a 64 x BLOCK_J (i, j) tile of BLOCK_C = 8 neighbouring channels (8
//! floats: one 32-byte sector of every (i, k) row) and steps over k in slices of BLOCK_K = 4; each
//! thread owns an 8 x 8 register block of one channel, as in the tiled matmul. Two shapes of the
//! same kernel: `triangle` (BLOCK_J = 64, 512 threads) and `triangle_256` (BLOCK_J = 32).
use crate::gpu::{self, In, Out, barrier};
use crate::matmul::outer8x8;
use crate::{shared_tile, unroll};

const BLOCK_I: usize = 64;
const BLOCK_C: usize = 8;
const BLOCK_K: usize = 4;
// the literal unroll counts below: BLOCK_K k steps a slice, 8 x 8 outputs a thread, at most 2 float4s
// of A staged a thread (64 * BLOCK_K * BLOCK_C / 4 over 256 or 512 threads), 4 floats a load
const _: () = assert!(BLOCK_K == 4 && BLOCK_C == 8 && BLOCK_I * BLOCK_K * BLOCK_C / 4 <= 2 * 256);
shared_tile!(a_tiles, TRIANGLE_A, 4096);
shared_tile!(b_tiles, TRIANGLE_B, 4096);

/// Where (k, channel, row) of a staged slice with `rows` rows lives. The row is XOR-ed with the
/// channel so the channels a warp reads at once fall in different groups of banks; the XOR only
/// touches bits below rows / 2, so "+ rows / 2" (a thread's second half) commutes with it.
#[inline(always)]
fn slot(buf: usize, rows: usize, k: usize, ch: usize, row: usize) -> usize {
    buf * BLOCK_K * BLOCK_C * rows + (k * BLOCK_C + ch) * rows + (row ^ ((ch << 2) & (rows / 2 - 1)))
}

// <kernel>
/// Grid (ceil(N / BLOCK_J) j-tiles, ceil(N / 64) i-tiles, ceil(C / 8) channel groups), 8 * BLOCK_J threads.
#[inline(always)]
pub fn triangle<const BLOCK_J: usize>(a: *const f32, b: *const f32, o: *mut f32, n: u32, c: u32) {
    let threads = 8 * BLOCK_J;
    let stage_a = BLOCK_I * BLOCK_K * BLOCK_C / 4 / threads; // float4s of A a thread stages: 1 or 2
    let (n, c) = (n as usize, c as usize);
    let len = n * n * c;
    // SAFETY: the host checked each pointer against this kernel's table `lengths` (the same sizes).
    let (a, b, o) = unsafe { (In::new(a, len), In::new(b, len), Out::new(o, len)) };
    let (a_tiles, b_tiles) = (a_tiles(), b_tiles());
    let tid = gpu::thread().x as usize;
    let blk = gpu::block();
    let (i0, j0, c0) = (blk.y as usize * BLOCK_I, blk.x as usize * BLOCK_J, blk.z as usize * BLOCK_C);
    // compute role: channel fastest within a warp, so the output stores of a warp fill whole sectors
    let ch = tid % BLOCK_C;
    let (tx, ty) = ((tid / BLOCK_C) % (BLOCK_J / 8), tid / BLOCK_J);

    // staging: float4 number `idx` of a slice is row idx / 8, k (idx / 2) % 4, channels (idx % 2) * 4 ..
    let load = |x: &In<f32>, r0: usize, k0: usize, idx: usize| -> [f32; 4] {
        let (row, kk, chan) = (r0 + idx / 8, k0 + (idx / 2) % 4, c0 + (idx % 2) * 4);
        if row >= n || kk >= n || chan >= c {
            return [0.0; 4];
        }
        let at = (row * n + kk) * c + chan;
        if chan + 4 <= c { x.get4(at) } else { x.get4_masked(at, c - chan) }
    };
    let put = |tile: &gpu::Tile<4096>, rows: usize, buf: usize, idx: usize, v: [f32; 4]| {
        unroll!(q in 4 => {
            tile.set(slot(buf, rows, (idx / 2) % 4, (idx % 2) * 4 + q, idx / 8), v[q]);
        });
    };
    let fetch = |k0: usize| -> ([[f32; 4]; 2], [f32; 4]) {
        let mut av = [[0.0f32; 4]; 2];
        unroll!(s in 2 => {
            if s < stage_a {
                av[s] = load(&a, i0, k0, tid + s * threads);
            }
        });
        (av, load(&b, j0, k0, tid))
    };
    let store = |buf: usize, av: [[f32; 4]; 2], bv: [f32; 4]| {
        unroll!(s in 2 => {
            if s < stage_a {
                put(&a_tiles, BLOCK_I, buf, tid + s * threads, av[s]);
            }
        });
        put(&b_tiles, BLOCK_J, buf, tid, bv);
    };

    let mut acc = [[0.0f32; 8]; 8];
    let k_tiles = n.div_ceil(BLOCK_K);
    let (av, bv) = fetch(0);
    store(0, av, bv);
    barrier();
    let mut kt = 0;
    while kt < k_tiles {
        let buf = kt & 1;
        let next = kt + 1 < k_tiles;
        let (na, nb) = if next { fetch((kt + 1) * BLOCK_K) } else { ([[0.0; 4]; 2], [0.0; 4]) };
        // windows from (k = 0, this channel, this thread's first row); other k and rows are
        // constant offsets (see `slot`)
        let span_a = (BLOCK_K - 1) * BLOCK_C * BLOCK_I + 36;
        let span_b = (BLOCK_K - 1) * BLOCK_C * BLOCK_J + BLOCK_J / 2 + 4;
        let a_view = a_tiles.view(slot(buf, BLOCK_I, 0, ch, ty * 4), span_a);
        let b_view = b_tiles.view(slot(buf, BLOCK_J, 0, ch, tx * 4), span_b);
        unroll!(kk in 4 => {
            let (a0, a1) = (a_view.get4(kk * BLOCK_C * BLOCK_I), a_view.get4(kk * BLOCK_C * BLOCK_I + 32));
            let (b0, b1) = (b_view.get4(kk * BLOCK_C * BLOCK_J), b_view.get4(kk * BLOCK_C * BLOCK_J + BLOCK_J / 2));
            outer8x8(&mut acc, a0, a1, b0, b1);
        });
        if next {
            store(buf ^ 1, na, nb);
        }
        barrier();
        kt += 1;
    }

    let chan = c0 + ch;
    if chan >= c {
        return;
    }
    unroll!(ii in 8 => {
        let i = i0 + (ii / 4) * 32 + ty * 4 + ii % 4;
        unroll!(jj in 8 => {
            let j = j0 + (jj / 4) * (BLOCK_J / 2) + tx * 4 + jj % 4;
            if i < n && j < n {
                o.set((i * n + j) * c + chan, acc[ii][jj]);
            }
        });
    });
}
// </kernel>

#[cfg(test)]
mod tests {
    use crate::testing::*;

    #[test]
    fn triangle_both_versions() {
        let mut rng = Rng(4);
        for &(n, c) in &[(1, 1), (5, 3), (17, 9), (70, 12), (33, 8)] {
            let (a, b) = (rng.vec(n * n * c), rng.vec(n * n * c));
            let mut want = vec![0.0; n * n * c];
            for i in 0..n {
                for j in 0..n {
                    for ch in 0..c {
                        want[(i * n + j) * c + ch] =
                            (0..n).map(|k| a[(i * n + k) * c + ch] as f64 * b[(j * n + k) * c + ch] as f64).sum();
                    }
                }
            }
            for wide in [true, false] {
                let mut o = vec![f32::NAN; n * n * c];
                let (pa, pb, po) = (p!(a), p!(b), o.as_mut_ptr() as usize);
                run(launch::triangle(n as u32, c as u32, wide).unwrap(), move || {
                    let (a, b, o) = (pa as *const f32, pb as *const f32, po as *mut f32);
                    if wide {
                        super::triangle::<64>(a, b, o, n as u32, c as u32)
                    } else {
                        super::triangle::<32>(a, b, o, n as u32, c as u32)
                    }
                });
                let e = rel(&o, &want);
                assert!(e < 1e-5, "triangle wide={wide} N={n} C={c}: rel error {e:e}");
            }
        }
    }
}
