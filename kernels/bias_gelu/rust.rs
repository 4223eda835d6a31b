//! y = gelu(x + b) with the exact erf GELU. A block takes ROWS rows and a span of 4 * threads
//! columns; each thread loads 4 consecutive floats of each row (one 16-byte load when aligned).
use crate::gpu::{self, In, Out};
use crate::math::gelu;
use crate::unroll;

pub const ROWS: usize = 4;
const _: () = assert!(ROWS == 4); // the unroll counts over rows below

// <kernel>
/// Grid (ceil(R / ROWS), ceil(C / (4 * threads))); x, y are [R, C], b is [C].
#[inline(always)]
pub fn bias_gelu(x: *const f32, b: *const f32, y: *mut f32, r: u32, c: u32) {
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
    let bias = b.get4(cols);
    let row0 = blk.x as usize * ROWS;
    let mut xs = [[0.0f32; 4]; ROWS];
    // all ROWS loads issued before any math: more bytes in flight per thread
    unroll!(i in 4 => {
        if row0 + i < r {
            xs[i] = x.get4((row0 + i) * c + cols);
        }
    });
    unroll!(i in 4 => {
        let row = row0 + i;
        if row < r {
            let v = [gelu(xs[i][0] + bias[0]), gelu(xs[i][1] + bias[1]), gelu(xs[i][2] + bias[2]),
                     gelu(xs[i][3] + bias[3])];
            y.set4(row * c + cols, v, mask);
        }
    });
}
// </kernel>

