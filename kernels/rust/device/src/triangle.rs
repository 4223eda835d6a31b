//! O[i, j, c] = sum_k A[i, k, c] B[j, k, c]: C independent matmuls A_c B_c^T read in place from
//! [N, N, C]. A block takes a 64 x 64 (i, j) tile of BLOCK_C = 8 neighbouring channels (8 floats:
//! one 32-byte sector of every (i, k) row) and steps over k in slices of BLOCK_K = 4; each of its
//! 512 threads owns an 8 x 8 register block of one channel, as in the tiled matmul.
use crate::gpu::{self, barrier, fma, In, Out};
use crate::{shared_tile, unroll};

const BLOCK_I: usize = 64;
const BLOCK_C: usize = 8;
const BLOCK_K: usize = 4;
const TILE: usize = BLOCK_K * BLOCK_C * BLOCK_I; // 2048 floats per buffer, laid out [k][c][i]
shared_tile!(a_tiles, TRIANGLE_A, 4096);
shared_tile!(b_tiles, TRIANGLE_B, 4096);

/// Where (k, channel, row) of a staged slice lives. The row is XOR-ed with the channel so the 8
/// channels a warp reads at once fall in 8 different groups of shared-memory banks.
#[inline(always)]
fn slot(buf: usize, k: usize, ch: usize, row: usize) -> usize {
    buf * TILE + (k * BLOCK_C + ch) * BLOCK_I + (row ^ (ch << 2))
}

// <kernel>
/// Grid (ceil(N / 64) j-tiles, ceil(N / 64) i-tiles, ceil(C / 8) channel groups), 512 threads.
#[unsafe(no_mangle)]
pub extern "ptx-kernel" fn triangle(a: *const f32, b: *const f32, o: *mut f32, n: u32, c: u32) {
    let (n, c) = (n as usize, c as usize);
    let len = n * n * c;
    let (a, b, o) = (In::new(a, len), In::new(b, len), Out::new(o, len));
    let (a_tiles, b_tiles) = (a_tiles(), b_tiles());
    let tid = gpu::thread().x as usize;
    let blk = gpu::block();
    let (i0, j0, c0) = (blk.y as usize * BLOCK_I, blk.x as usize * BLOCK_I, blk.z as usize * BLOCK_C);
    // compute role: channel fastest within a warp, so the output stores of a warp fill whole sectors
    let ch = tid % BLOCK_C;
    let (tx, ty) = ((tid / BLOCK_C) % 8, tid / (BLOCK_C * 8));
    // staging role: row s_r of the tile, k s_k, channels s_c .. s_c + 4
    let (s_r, s_k, s_c) = (tid / 8, (tid / 2) % 4, (tid % 2) * 4);

    let load = |x: &In<f32>, r0: usize, k0: usize| -> [f32; 4] {
        let (row, kk, chan) = (r0 + s_r, k0 + s_k, c0 + s_c);
        if row >= n || kk >= n || chan >= c {
            return [0.0; 4];
        }
        let at = (row * n + kk) * c + chan;
        if chan + 4 <= c { x.get4(at) } else { tail4(x, at, c - chan) }
    };
    let store = |buf: usize, av: [f32; 4], bv: [f32; 4]| {
        unroll!(q in 4 => {
            let at = slot(buf, s_k, s_c + q, s_r);
            a_tiles.set(at, av[q]);
            b_tiles.set(at, bv[q]);
        });
    };

    let mut acc = [[0.0f32; 8]; 8];
    let k_tiles = n.div_ceil(BLOCK_K);
    store(0, load(&a, i0, 0), load(&b, j0, 0));
    barrier();
    let mut kt = 0;
    while kt < k_tiles {
        let buf = kt & 1;
        let next = kt + 1 < k_tiles;
        let k1 = (kt + 1) * BLOCK_K;
        let (na, nb) = if next { (load(&a, i0, k1), load(&b, j0, k1)) } else { ([0.0; 4], [0.0; 4]) };
        unroll!(kk in 4 => {
            let (a0, a1) = (a_tiles.get4(slot(buf, kk, ch, ty * 4)), a_tiles.get4(slot(buf, kk, ch, 32 + ty * 4)));
            let (b0, b1) = (b_tiles.get4(slot(buf, kk, ch, tx * 4)), b_tiles.get4(slot(buf, kk, ch, 32 + tx * 4)));
            let av = [a0[0], a0[1], a0[2], a0[3], a1[0], a1[1], a1[2], a1[3]];
            let bv = [b0[0], b0[1], b0[2], b0[3], b1[0], b1[1], b1[2], b1[3]];
            unroll!(i in 8 => {
                unroll!(j in 8 => {
                    acc[i][j] = fma(av[i], bv[j], acc[i][j]);
                });
            });
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
            let j = j0 + (jj / 4) * 32 + tx * 4 + jj % 4;
            if i < n && j < n {
                o.set((i * n + j) * c + chan, acc[ii][jj]);
            }
        });
    });
}
// </kernel>

#[inline(always)]
fn tail4(x: &In<f32>, i: usize, valid: usize) -> [f32; 4] {
    let mut v = [0.0f32; 4];
    unroll!(q in 4 => {
        if q < valid {
            v[q] = x.get(i + q);
        }
    });
    v
}
