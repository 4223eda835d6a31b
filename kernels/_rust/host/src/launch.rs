//! Launch geometry and argument checks for each kernel: plain functions of the sizes, so they are
//! tested on the host (`cargo test` / build/host_tests) and shared by the C ABI and the benchmark.

/// Grid and block of one launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
}

impl Geometry {
    pub fn threads_per_block(&self) -> u32 {
        self.block.0 * self.block.1 * self.block.2
    }
}

pub type Checked<T> = Result<T, String>;

const GRID_X: u64 = (1 << 31) - 1;
const GRID_YZ: u64 = 65535;

/// A size argument: not negative, below 2^31 (the kernels index rows and columns with u32).
pub fn dim(name: &str, v: i64) -> Checked<u32> {
    if v < 0 {
        return Err(format!("{name} = {v} must not be negative"));
    }
    if v >= 1 << 31 {
        return Err(format!("{name} = {v} is too large (the kernels take sizes below 2^31)"));
    }
    Ok(v as u32)
}

/// A device pointer that the kernel will read or write: must not be null when there are elements.
pub fn ptr(name: &str, p: u64, elements: u64) -> Checked<()> {
    if elements > 0 && p == 0 {
        return Err(format!("{name} is a null pointer"));
    }
    Ok(())
}

fn blocks(n: u64, per: u64) -> u64 {
    n.div_ceil(per)
}

fn grid(x: u64, y: u64, z: u64) -> Checked<(u32, u32, u32)> {
    if x > GRID_X || y > GRID_YZ || z > GRID_YZ {
        return Err(format!("grid ({x}, {y}, {z}) exceeds the CUDA limits ({GRID_X}, {GRID_YZ}, {GRID_YZ})"));
    }
    Ok((x.max(1) as u32, y.max(1) as u32, z.max(1) as u32))
}

pub fn matmul(m: u32, n: u32, tiled: bool) -> Checked<Geometry> {
    let (m, n) = (m as u64, n as u64);
    if tiled {
        Ok(Geometry { grid: grid(blocks(n, 128), blocks(m, 128), 1)?, block: (256, 1, 1) })
    } else {
        Ok(Geometry { grid: grid(blocks(n, 16), blocks(m, 16), 1)?, block: (16, 16, 1) })
    }
}

/// Threads per block for bias_gelu: each thread takes 4 columns, so a block spans 4 * threads
/// columns; narrow rows get narrower blocks (a warp at least) instead of idle threads.
pub fn bias_gelu_threads(c: u32) -> u32 {
    let want = (c as u64).div_ceil(4).div_ceil(32) * 32;
    want.clamp(32, 256) as u32
}

pub const BIAS_GELU_ROWS: u64 = 4;

pub fn bias_gelu(r: u32, c: u32) -> Checked<Geometry> {
    let t = bias_gelu_threads(c);
    Ok(Geometry { grid: grid(blocks(r as u64, BIAS_GELU_ROWS), blocks(c as u64, 4 * t as u64), 1)?, block: (t, 1, 1) })
}

pub fn layernorm(r: u32) -> Checked<Geometry> {
    Ok(Geometry { grid: grid(r as u64, 1, 1)?, block: (256, 1, 1) })
}

/// `wide`: 64 x 64 (i, j) tiles of 512 threads; else 64 x 32 tiles of 256 threads.
pub fn triangle(n: u32, c: u32, wide: bool) -> Checked<Geometry> {
    let block_j = if wide { 64 } else { 32 };
    let g = grid(blocks(n as u64, block_j), blocks(n as u64, 64), blocks(c as u64, 8))?;
    Ok(Geometry { grid: g, block: (8 * block_j as u32, 1, 1) })
}

/// One warp per task, 8 warps per block.
pub fn neighbor_agg(tasks: u64) -> Checked<Geometry> {
    Ok(Geometry { grid: grid(blocks(tasks, 8), 1, 1)?, block: (256, 1, 1) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiled_matmul_covers_every_output_once() {
        let g = matmul(4096, 4096, true).unwrap();
        assert_eq!(g, Geometry { grid: (32, 32, 1), block: (256, 1, 1) });
        // 256 threads x 64 outputs = one 128 x 128 tile
        assert_eq!(g.threads_per_block() * 64, 128 * 128);
        let g = matmul(130, 7, true).unwrap();
        assert_eq!(g.grid, (1, 2, 1));
    }

    #[test]
    fn scalar_matmul_is_one_thread_per_output() {
        let g = matmul(17, 33, false).unwrap();
        assert_eq!(g, Geometry { grid: (3, 2, 1), block: (16, 16, 1) });
        assert!(g.grid.0 * 16 >= 33 && g.grid.1 * 16 >= 17);
    }

    #[test]
    fn bias_gelu_blocks_follow_the_row_width() {
        assert_eq!(bias_gelu_threads(1), 32);
        assert_eq!(bias_gelu_threads(512), 128);
        assert_eq!(bias_gelu_threads(8192), 256);
        let g = bias_gelu(16384, 8192).unwrap();
        assert_eq!(g, Geometry { grid: (4096, 8, 1), block: (256, 1, 1) });
        // awkward: 3 rows of 4097 columns still covered
        let g = bias_gelu(3, 4097).unwrap();
        assert!(g.grid.0 as u64 * BIAS_GELU_ROWS >= 3 && g.grid.1 * 4 * g.block.0 >= 4097);
    }

    #[test]
    fn triangle_and_neighbor_grids() {
        assert_eq!(triangle(384, 128, true).unwrap().grid, (6, 6, 16));
        assert_eq!(triangle(384, 128, false).unwrap(), Geometry { grid: (12, 6, 16), block: (256, 1, 1) });
        assert_eq!(triangle(17, 33, true).unwrap().grid, (1, 1, 5));
        assert_eq!(neighbor_agg(8192).unwrap().grid, (1024, 1, 1));
        assert_eq!(neighbor_agg(9).unwrap().grid, (2, 1, 1));
        assert_eq!(layernorm(32768).unwrap().grid, (32768, 1, 1));
    }

    #[test]
    fn argument_checks_name_the_argument() {
        assert!(dim("M", -1).unwrap_err().contains("M = -1"));
        assert!(dim("K", 1 << 31).unwrap_err().contains("too large"));
        assert_eq!(dim("N", 7), Ok(7));
        assert!(ptr("A", 0, 10).unwrap_err().contains("A is a null pointer"));
        assert!(ptr("A", 0, 0).is_ok()); // an empty tensor may have no storage
        assert!(grid(1, 70000, 1).is_err());
    }
}
