//! The model blocks run from Rust: the operations' own PTX kernels and cuBLAS GEMMs, launched in order
//! on one stream, with every argument checked first (an error names the block and the argument).
//!
//! mlp_block   y = x + W2 gelu(W1 LN(x) + b1) + b2         x [T, d], W1 [H, d], W2 [d, H]
//! mp_block    y = h + W2 gelu(W1 LN(m) + b1) + b2,        m = neighbor_agg(graph, h), h [n, F]
//!
//! A block's arguments arrive packed one u64 each (addresses; sizes; eps as f32 bits) in the order of
//! its `*_PARAMS`. The intermediates live in one caller-given scratch buffer (`scratch_floats` long),
//! so the caller's allocator (PyTorch's, graph-safe) owns all memory. The steps, after the LayerNorm
//! (and for mp_block the aggregation before it):
//!   z = LN W1^T            cuBLAS SGEMM (default math: IEEE FP32 FMA, never TF32)
//!   g = gelu(z + b1)       the bias_gelu kernel (into a buffer of its own: its input must stay unwritten)
//!   y = x                  a device-to-device copy (the residual)
//!   y += ones b2^T         cuBLAS, depth 1: the bias broadcast over rows (cuBLAS has no broadcast add)
//!   y += g W2^T            cuBLAS SGEMM with beta = 1
use crate::cublas::gemms;
use crate::driver::{CUstream, DevPtr, check, driver};
use crate::launch::{dim, ptr};
use crate::{Error, MAGE_BAD_ARGUMENT, kernel_index, launch_packed, module};

pub const MLP_PARAMS: [&str; 14] =
    ["x", "gamma", "beta", "W1", "b1", "W2", "b2", "y", "scratch", "T", "d", "H", "scratch_len", "eps"];
pub const MP_PARAMS: [&str; 23] = [
    "rowptr",
    "col",
    "w",
    "h",
    "gamma",
    "beta",
    "W1",
    "b1",
    "W2",
    "b2",
    "y",
    "plan",
    "ws",
    "flags",
    "scratch",
    "n",
    "E",
    "F",
    "H",
    "tasks",
    "parts",
    "scratch_len",
    "eps",
];
pub const BLOCKS: [&str; 2] = ["mlp_block", "mp_block"];
/// Kernels per call with at least one row: LN, GEMM, bias + GELU, bias GEMM, GEMM (mp_block: and the
/// aggregation), each cuBLAS call counted as the one kernel it launches at the shapes measured. The
/// copy and the memset of the ones are copies, not kernels.
pub const LAUNCHES: [u32; 2] = [5, 6];
/// Scratch parts start on 256-byte boundaries (cuBLAS and the 16-byte vector loads want alignment).
const ALIGN: u64 = 64;

fn bad(block: &str, msg: String) -> Error {
    (MAGE_BAD_ARGUMENT, format!("{block}: {msg}"))
}

pub fn block_index(name: &str) -> Result<usize, Error> {
    BLOCKS
        .iter()
        .position(|b| *b == name)
        .ok_or_else(|| bad("block", format!("no block named {name:?} (have {BLOCKS:?})")))
}

fn params(block: usize) -> &'static [&'static str] {
    if block == 0 { &MLP_PARAMS } else { &MP_PARAMS }
}

fn up(v: u64) -> u64 {
    v.next_multiple_of(ALIGN)
}

/// Offsets (in floats) of the scratch parts and the total: rows x width parts, in order.
fn layout(parts: &[(u64, u64)]) -> (Vec<u64>, u64) {
    let mut at = 0;
    let offs = parts
        .iter()
        .map(|&(r, c)| {
            let o = at;
            at = up(at + r * c);
            o
        })
        .collect();
    (offs, at)
}

/// The checked arguments of either block (the MLP block has no graph: its fields stay 0).
#[derive(Debug, Clone, Copy, Default)]
pub struct Checked {
    pub rows: u32,  // T or n
    pub width: u32, // d or F
    pub hidden: u32,
    pub eps: f32,
    pub scratch: u64,
    pub scratch_len: u64,
}

/// Floats of scratch a block needs: LN output [rows, width], z and g [rows, hidden], ones [rows], and
/// for mp_block the aggregate m [rows, width] first.
pub fn scratch_floats(block: usize, rows: u64, width: u64, hidden: u64) -> u64 {
    layout(&parts(block, rows, width, hidden)).1
}

fn parts(block: usize, rows: u64, width: u64, hidden: u64) -> Vec<(u64, u64)> {
    let mut p = vec![(rows, width), (rows, hidden), (rows, hidden), (rows, 1)];
    if block == 1 {
        p.insert(0, (rows, width));
    }
    p
}

/// Every argument of `block` checked against the others: counts, sizes, null pointers, the scratch.
/// Reads no device memory (the graph's structure was validated when it was built).
pub fn check_args(block: usize, a: &[u64]) -> Result<Checked, Error> {
    let name = BLOCKS[block];
    let p = params(block);
    if a.len() != p.len() {
        return Err(bad(name, format!("takes {} packed arguments ({}), got {}", p.len(), p.join(", "), a.len())));
    }
    let v = |n: &str| a[p.iter().position(|x| *x == n).expect("a parameter of the block")];
    let size = |n: &str| dim(n, v(n) as i64).map(|x| x as u64).map_err(|e| bad(name, e));
    let (rows, width, hidden) =
        if block == 0 { (size("T")?, size("d")?, size("H")?) } else { (size("n")?, size("F")?, size("H")?) };
    let wname = if block == 0 { "d" } else { "F" };
    if width == 0 {
        return Err(bad(name, format!("{wname} = 0: LayerNorm needs at least one column")));
    }
    if block == 1 && hidden == 0 {
        return Err(bad(name, "H = 0: W1 must have at least one row".into()));
    }
    let xname = if block == 0 { "x" } else { "h" };
    let mut lengths = vec![
        (xname, rows * width),
        ("gamma", width),
        ("beta", width),
        ("W1", hidden * width),
        ("b1", hidden),
        ("W2", width * hidden),
        ("b2", width),
        ("y", rows * width),
    ];
    if block == 1 {
        let (e, tasks, parts) = (size("E")?, size("tasks")?, size("parts")?);
        lengths.extend([("rowptr", rows + 1), ("col", e), ("w", e), ("ws", parts * width), ("flags", parts)]);
        if v("plan") == 0 && tasks != rows {
            return Err(bad(name, format!("without a plan there is one task per node: tasks = {tasks}, n = {rows}")));
        }
        if v("plan") != 0 && parts == 0 {
            return Err(bad(name, "a plan with no partial sums (parts = 0): pass plan = 0".into()));
        }
    }
    for (n, len) in lengths {
        ptr(n, v(n), len).map_err(|e| bad(name, e))?;
    }
    let need = if rows == 0 { 0 } else { scratch_floats(block, rows, width, hidden) };
    let have = v("scratch_len");
    if have < need {
        return Err(bad(name, format!("scratch holds {have} floats, the block needs {need} at these sizes")));
    }
    ptr("scratch", v("scratch"), need).map_err(|e| bad(name, e))?;
    let eps = f32::from_bits(v("eps") as u32);
    if !(eps > 0.0 && eps.is_finite()) {
        return Err(bad(name, format!("eps = {eps} must be positive and finite")));
    }
    Ok(Checked {
        rows: rows as u32,
        width: width as u32,
        hidden: hidden as u32,
        eps,
        scratch: v("scratch"),
        scratch_len: have,
    })
}

/// The output's address and its bytes (rows x width floats), from checked arguments.
pub fn output(block: usize, a: &[u64]) -> Result<(u64, usize), Error> {
    let c = check_args(block, a)?;
    let y = params(block).iter().position(|x| *x == "y").expect("a parameter");
    Ok((a[y], 4 * c.rows as usize * c.width as usize))
}

/// Runs `block` on `stream` of `device` with its packed arguments (checked first; nothing runs when
/// they fail). The intermediates are in the scratch buffer.
#[allow(clippy::not_unsafe_ptr_arg_deref)] // the stream is an opaque driver handle
pub fn run(block: usize, device: i32, stream: CUstream, a: &[u64]) -> Result<(), Error> {
    let c = check_args(block, a)?;
    if c.rows == 0 {
        return Ok(());
    }
    let name = BLOCKS[block];
    let v = |n: &str| a[params(block).iter().position(|x| *x == n).expect("a parameter")];
    let (r, w, hd) = (c.rows as u64, c.width as u64, c.hidden as u64);
    let (offs, _) = layout(&parts(block, r, w, hd));
    let at = |i: usize| c.scratch + 4 * offs[i];
    let base = if block == 1 { 1 } else { 0 };
    let (ln, z, g, ones) = (at(base), at(base + 1), at(base + 2), at(base + 3));
    let (x, rows) = if block == 0 { (v("x"), c.rows) } else { (v("h"), c.rows) };
    let named = |e: Error| (e.0, format!("{name}: {}", e.1));
    module(device).map_err(named)?;
    let d = driver()?;
    // the aggregation: its kernel's own argument order (kernels/neighbor_agg/rust_table.py)
    let ln_in: DevPtr = if block == 1 {
        let m = at(0);
        let agg = [
            v("rowptr"),
            v("col"),
            v("w"),
            x,
            m,
            v("plan"),
            v("ws"),
            v("flags"),
            r,
            r,
            v("E"),
            w,
            v("tasks"),
            v("parts"),
        ];
        launch_packed(device, stream, kernel_index("neighbor_agg")?, &agg).map_err(named)?;
        m
    } else {
        x
    };
    let ln_args = [ln_in, v("gamma"), v("beta"), ln, r, w, c.eps.to_bits() as u64];
    launch_packed(device, stream, kernel_index("layernorm")?, &ln_args).map_err(named)?;
    let gm = gemms(name, device, stream)?;
    gm.linear(ln, v("W1"), z, (rows, c.hidden, c.width), false).map_err(named)?;
    launch_packed(device, stream, kernel_index("bias_gelu")?, &[z, v("b1"), g, r, hd]).map_err(named)?;
    let y = v("y");
    // SAFETY: y and x hold rows * width floats and ones holds rows (checked above); stream-ordered.
    unsafe {
        check((d.memcpy_dtod_async)(y, x, (4 * r * w) as usize, stream), "cuMemcpyDtoDAsync (residual)")
            .map_err(named)?;
        check((d.memset_d32_async)(ones, 1.0f32.to_bits(), r as usize, stream), "cuMemsetD32Async (ones)")
            .map_err(named)?;
    }
    gm.add_bias(ones, v("b2"), y, rows, c.width).map_err(named)?;
    gm.linear(g, v("W2"), y, (rows, c.width, c.hidden), true).map_err(named)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mlp(t: u64, d: u64, h: u64) -> Vec<u64> {
        let s = scratch_floats(0, t, d, h);
        let mut a = vec![0x1000u64; 9];
        a.extend([t, d, h, s, 1e-5f32.to_bits() as u64]);
        a
    }

    fn mp(n: u64, f: u64, h: u64) -> Vec<u64> {
        let mut a = vec![0x1000u64; 15];
        a[11] = 0; // no plan
        a.extend([n, 3 * n, f, h, n, 0, scratch_floats(1, n, f, h), 1e-5f32.to_bits() as u64]);
        a
    }

    #[test]
    fn good_arguments_pass_and_give_the_sizes() {
        let c = check_args(0, &mlp(5, 37, 19)).unwrap();
        assert_eq!((c.rows, c.width, c.hidden), (5, 37, 19));
        assert!(check_args(1, &mp(40, 3, 5)).is_ok());
        // no rows: nothing to check against the scratch
        let mut a = mlp(0, 8, 12);
        a[12] = 0;
        assert!(check_args(0, &a).is_ok());
    }

    #[test]
    fn errors_name_the_block_and_the_argument() {
        let mut a = mlp(5, 37, 19);
        a[3] = 0;
        assert_eq!(check_args(0, &a).unwrap_err().1, "mlp_block: W1 is a null pointer");
        let mut a = mlp(5, 37, 19);
        a[10] = 0;
        assert!(check_args(0, &a).unwrap_err().1.starts_with("mlp_block: d = 0"));
        let mut a = mlp(5, 37, 19);
        a[9] = (-3i64) as u64;
        assert_eq!(check_args(0, &a).unwrap_err().1, "mlp_block: T = -3 must not be negative");
        let mut a = mlp(5, 37, 19);
        a[12] -= 1;
        assert!(check_args(0, &a).unwrap_err().1.contains("mlp_block: scratch holds"));
        let mut a = mlp(5, 37, 19);
        a[13] = 0;
        assert!(check_args(0, &a).unwrap_err().1.contains("eps = 0"));
        assert!(check_args(0, &mlp(5, 37, 19)[..13]).unwrap_err().1.contains("takes 14 packed arguments"));
        let mut a = mp(40, 3, 5);
        a[1] = 0;
        assert_eq!(check_args(1, &a).unwrap_err().1, "mp_block: col is a null pointer");
        let mut a = mp(40, 3, 5);
        a[19] = 7;
        assert!(check_args(1, &a).unwrap_err().1.contains("mp_block: without a plan"));
        let mut a = mp(40, 3, 5);
        a[18] = 0;
        assert!(check_args(1, &a).unwrap_err().1.starts_with("mp_block: H = 0"));
        assert!(block_index("trimul_block").unwrap_err().1.contains("no block named"));
    }

    #[test]
    fn scratch_parts_are_aligned_and_disjoint() {
        let (offs, total) = layout(&parts(1, 37, 33, 17));
        assert_eq!(offs.len(), 5);
        for (i, o) in offs.iter().enumerate() {
            assert_eq!(o % ALIGN, 0);
            let len = parts(1, 37, 33, 17)[i].0 * parts(1, 37, 33, 17)[i].1;
            assert!(o + len <= offs.get(i + 1).copied().unwrap_or(total));
        }
        assert_eq!(scratch_floats(0, 1, 1, 1), 4 * ALIGN);
    }
}
