//! The model blocks run from Rust: the operations' own PTX kernels and cuBLAS GEMMs, launched in order
//! on one stream, with every argument checked first (an error names the block and the argument).
//!
//! mlp_block   y = x + W2 gelu(W1 LN(x) + b1) + b2         x [T, d], W1 [H, d], W2 [d, H]
//! mp_block    y = h + W2 gelu(W1 LN(m) + b1) + b2,        m = neighbor_agg(graph, h), h [n, F]
//!
//! Each at two precisions: FP32, and bf16 storage with FP32 math (named `mlp_block.bf16`: every
//! activation and weight, the intermediates and the output in bf16; the graph's edge weights and the
//! aggregation's partial sums stay f32). A block's arguments arrive packed one u64 each (addresses;
//! sizes; eps as f32 bits) in the order of its `*_PARAMS`, the same at both precisions. The
//! intermediates live in one caller-given scratch buffer (`scratch_floats` floats long, whatever the
//! precision), so the caller's allocator (PyTorch's, graph-safe) owns all memory. The steps are in
//! `block_run.rs`. This file: names, arguments and their checks, the scratch layout.
use crate::launch::{dim, ptr};
use crate::{Error, MAGE_BAD_ARGUMENT};

pub use crate::block_run::run;

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
/// The precisions, by the suffix of a block's name (none: FP32). A block's id is its index in
/// `BLOCKS` plus `BLOCKS.len()` times the precision's index here.
pub const PRECISIONS: [&str; 2] = ["fp32", "bf16"];
/// Kernels per call with at least one row, at both precisions: LN, GEMM, bias + GELU, bias GEMM, GEMM
/// (mp_block: and the aggregation), each cuBLAS call counted as the one kernel it launches at the
/// shapes measured. The copy and the memset of the ones are copies, not kernels.
pub const LAUNCHES: [u32; 2] = [5, 6];
/// Scratch parts start on 256-byte boundaries (cuBLAS and the 16-byte vector loads want alignment).
const ALIGN: u64 = 64;

fn bad(block: &str, msg: String) -> Error {
    (MAGE_BAD_ARGUMENT, format!("{block}: {msg}"))
}

/// The id of block `name`: "mlp_block" (FP32) or "mlp_block.bf16" (bf16 storage, FP32 math).
pub fn block_index(name: &str) -> Result<usize, Error> {
    // no suffix: FP32; a suffix names one of the other precisions ("mlp_block.fp32" is not a name)
    let (base, p) = match name.split_once('.') {
        None => (name, Some(0)),
        Some((base, prec)) => (base, PRECISIONS.iter().skip(1).position(|p| *p == prec).map(|i| i + 1)),
    };
    match (BLOCKS.iter().position(|b| *b == base), p) {
        (Some(b), Some(p)) => Ok(b + BLOCKS.len() * p),
        _ => Err(bad(
            "block",
            format!("no block named {name:?} (have {BLOCKS:?}, each also as NAME.bf16 for bf16 storage)"),
        )),
    }
}

/// Which block (0: mlp_block, 1: mp_block), whatever the precision.
pub fn kind(block: usize) -> usize {
    block % BLOCKS.len()
}

/// The block's name as errors say it (without the precision).
pub fn name(block: usize) -> &'static str {
    BLOCKS[kind(block)]
}

/// Whether the block stores bf16 (else FP32).
pub fn is_bf16(block: usize) -> bool {
    block >= BLOCKS.len()
}

/// Bytes of one stored element of the block's activations and weights.
pub fn elem_bytes(block: usize) -> u64 {
    if is_bf16(block) { 2 } else { 4 }
}

/// Kernels one call launches with at least one row.
pub fn launches(block: usize) -> u32 {
    LAUNCHES[kind(block)]
}

pub(crate) fn params(block: usize) -> &'static [&'static str] {
    if kind(block) == 0 { &MLP_PARAMS } else { &MP_PARAMS }
}

fn up(v: u64) -> u64 {
    v.next_multiple_of(ALIGN)
}

/// Offsets (in floats) of the scratch parts and the total: rows x width parts, in order. At bf16 each
/// part holds its elements in the first half of its floats (a layout for both precisions; the
/// second half is unused).
pub(crate) fn layout(parts: &[(u64, u64)]) -> (Vec<u64>, u64) {
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

pub(crate) fn parts(block: usize, rows: u64, width: u64, hidden: u64) -> Vec<(u64, u64)> {
    let mut p = vec![(rows, width), (rows, hidden), (rows, hidden), (rows, 1)];
    if kind(block) == 1 {
        p.insert(0, (rows, width));
    }
    p
}

/// Every argument of `block` checked against the others: counts, sizes, null pointers, the scratch.
/// Reads no device memory (the graph's structure was validated when it was built).
pub fn check_args(block: usize, a: &[u64]) -> Result<Checked, Error> {
    let name = name(block);
    let p = params(block);
    if a.len() != p.len() {
        return Err(bad(name, format!("takes {} packed arguments ({}), got {}", p.len(), p.join(", "), a.len())));
    }
    let v = |n: &str| a[p.iter().position(|x| *x == n).expect("a parameter of the block")];
    let size = |n: &str| dim(n, v(n) as i64).map(|x| x as u64).map_err(|e| bad(name, e));
    let mlp = kind(block) == 0;
    let (rows, width, hidden) =
        if mlp { (size("T")?, size("d")?, size("H")?) } else { (size("n")?, size("F")?, size("H")?) };
    let wname = if mlp { "d" } else { "F" };
    if width == 0 {
        return Err(bad(name, format!("{wname} = 0: LayerNorm needs at least one column")));
    }
    if !mlp && hidden == 0 {
        return Err(bad(name, "H = 0: W1 must have at least one row".into()));
    }
    let xname = if mlp { "x" } else { "h" };
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
    if !mlp {
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

/// The output's address and its bytes (rows x width elements), from checked arguments.
pub fn output(block: usize, a: &[u64]) -> Result<(u64, usize), Error> {
    let c = check_args(block, a)?;
    let y = params(block).iter().position(|x| *x == "y").expect("a parameter");
    Ok((a[y], (elem_bytes(block) * c.rows as u64 * c.width as u64) as usize))
}

#[cfg(test)]
#[path = "blocks_tests.rs"]
mod tests;
