//! A model block's steps (blocks.rs has its arguments and checks), after the LayerNorm (and for
//! mp_block the aggregation before it), all on the caller's stream:
//!   z = LN W1^T            cuBLAS GEMM: FP32 SGEMM (default math: IEEE FP32 FMA, never TF32), or at
//!                          bf16 cublasGemmEx on bf16 A, B, C with CUBLAS_COMPUTE_32F
//!   g = gelu(z + b1)       the bias_gelu kernel (into a buffer of its own: its input must stay unwritten)
//!   y = x                  a device-to-device copy (the residual)
//!   y += ones b2^T         cuBLAS, depth 1: the bias broadcast over rows (cuBLAS has no broadcast add)
//!   y += g W2^T            cuBLAS with beta = 1
//! At bf16 each kernel is its op's bf16 entry (the same body on u16 storage, f32 math), and every
//! intermediate is stored in bf16, as the Triton bf16 block stores them; y = x + b2 is rounded to bf16
//! once before the last GEMM adds into it (as the Triton block's cuBLAS road does).
use crate::blocks::{PRECISIONS, check_args, elem_bytes, is_bf16, kind, layout, name, params, parts};
use crate::cublas::gemms;
use crate::driver::{CUstream, DevPtr, check, driver};
use crate::{Error, kernel_index, launch_packed, module};

/// The table index of `op`'s kernel at the block's precision: the op's own name at FP32, the op's
/// name with the precision's suffix otherwise (its table's bf16 entry).
fn kernel_of(op: &str, block: usize) -> Result<usize, Error> {
    if is_bf16(block) { kernel_index(&format!("{op}_{}", PRECISIONS[1])) } else { kernel_index(op) }
}

/// The 32-bit pattern that fills the ones vector: 1.0f32, or two bf16 ones (0x3f80) side by side, so
/// one cuMemsetD32Async of ceil(rows / 2) words writes rows bf16 ones (the part holds rows floats).
fn ones_pattern(block: usize) -> (u32, u64) {
    if is_bf16(block) { (0x3f80_3f80, 2) } else { (1.0f32.to_bits(), 1) }
}

/// Runs `block` on `stream` of `device` with its packed arguments (checked first; nothing runs when
/// they fail). The intermediates are in the scratch buffer.
#[allow(clippy::not_unsafe_ptr_arg_deref)] // the stream is an opaque driver handle
pub fn run(block: usize, device: i32, stream: CUstream, a: &[u64]) -> Result<(), Error> {
    let c = check_args(block, a)?;
    if c.rows == 0 {
        return Ok(());
    }
    let name = name(block);
    let mp = kind(block) == 1;
    let v = |n: &str| a[params(block).iter().position(|x| *x == n).expect("a parameter")];
    let (r, w, hd) = (c.rows as u64, c.width as u64, c.hidden as u64);
    let (offs, _) = layout(&parts(block, r, w, hd));
    let at = |i: usize| c.scratch + 4 * offs[i];
    let base = usize::from(mp);
    let (ln, z, g, ones) = (at(base), at(base + 1), at(base + 2), at(base + 3));
    let x = if mp { v("h") } else { v("x") };
    let named = |e: Error| (e.0, format!("{name}: {}", e.1));
    module(device).map_err(named)?;
    let d = driver()?;
    // the aggregation: its kernel's own argument order (kernels/neighbor_agg/rust_table.py)
    let ln_in: DevPtr = if mp {
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
        launch_packed(device, stream, kernel_of("neighbor_agg", block)?, &agg).map_err(named)?;
        m
    } else {
        x
    };
    let ln_args = [ln_in, v("gamma"), v("beta"), ln, r, w, c.eps.to_bits() as u64];
    launch_packed(device, stream, kernel_of("layernorm", block)?, &ln_args).map_err(named)?;
    let gm = gemms(name, device, stream, is_bf16(block))?;
    gm.linear(ln, v("W1"), z, (c.rows, c.hidden, c.width), false).map_err(named)?;
    launch_packed(device, stream, kernel_of("bias_gelu", block)?, &[z, v("b1"), g, r, hd]).map_err(named)?;
    let y = v("y");
    let (pattern, per_word) = ones_pattern(block);
    // SAFETY: y and x hold rows * width elements and the ones part rows floats (checked above), which
    // hold ceil(rows / per_word) words; stream-ordered.
    unsafe {
        check(
            (d.memcpy_dtod_async)(y, x, (elem_bytes(block) * r * w) as usize, stream),
            "cuMemcpyDtoDAsync (residual)",
        )
        .map_err(named)?;
        check((d.memset_d32_async)(ones, pattern, r.div_ceil(per_word) as usize, stream), "cuMemsetD32Async (ones)")
            .map_err(named)?;
    }
    gm.add_bias(ones, v("b2"), y, c.rows, c.width).map_err(named)?;
    gm.linear(g, v("W2"), y, (c.rows, c.width, c.hidden), true).map_err(named)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::block_index;

    #[test]
    fn each_precision_launches_its_own_kernels() {
        let (f, b) = (block_index("mp_block").unwrap(), block_index("mp_block.bf16").unwrap());
        for op in ["neighbor_agg", "layernorm", "bias_gelu"] {
            let (kf, kb) = (kernel_of(op, f).unwrap(), kernel_of(op, b).unwrap());
            assert_ne!(kf, kb, "{op}");
            assert_eq!(crate::KERNELS[kf].op, crate::KERNELS[kb].op);
            // the bf16 entry takes u16 storage where the FP32 one takes f32, and nothing else differs
            for (pf, pb) in crate::KERNELS[kf].params.iter().zip(crate::KERNELS[kb].params) {
                assert_eq!(pf.0, pb.0);
                assert!(pf.1 == pb.1 || pf.1.replace("f32", "u16") == pb.1, "{op}: {pf:?} {pb:?}");
            }
        }
    }

    #[test]
    fn bf16_ones_are_two_per_word() {
        assert_eq!(ones_pattern(block_index("mlp_block.bf16").unwrap()), (0x3f80_3f80, 2));
        assert_eq!(f32::from_bits(0x3f80 << 16), 1.0);
        assert_eq!(ones_pattern(0), (1.0f32.to_bits(), 1));
    }
}
