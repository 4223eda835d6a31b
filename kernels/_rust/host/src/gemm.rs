//! The model blocks' GEMMs on a device's cuBLAS handle (cublas.rs loads the library and makes the
//! handle): a Linear layer's product and a bias broadcast over rows, on FP32 or bf16 operands.
use crate::Error;
use crate::cublas::{COMPUTE_32F, CUDA_R_16BF, GEMM_DEFAULT, Gemms, OP_N, OP_T};
use crate::driver::DevPtr;
use std::ffi::{c_int, c_void};

/// Column-major leading dimensions must be at least 1, even for an empty operand.
fn ld(v: u32) -> c_int {
    v.max(1) as c_int
}

impl Gemms<'_> {
    /// Column-major C[m, n] = alpha op(A) op(B) + beta C: cublasSgemm on FP32, cublasGemmEx on bf16.
    #[allow(clippy::too_many_arguments)] // cuBLAS's own parameter list
    fn gemm(
        &self,
        (ta, tb): (c_int, c_int),
        (m, n, k): (c_int, c_int, c_int),
        (a, lda): (DevPtr, c_int),
        (b, ldb): (DevPtr, c_int),
        beta: f32,
        (c, ldc): (DevPtr, c_int),
        what: &str,
    ) -> Result<(), Error> {
        let one = 1.0f32;
        let h = self.dev.handle;
        // SAFETY: the block checked every buffer's length against these sizes; alpha and beta are
        // f32 as both calls take them (CUBLAS_COMPUTE_32F scales in FP32).
        let st = unsafe {
            if self.bf16 {
                let t = CUDA_R_16BF;
                (self.c.gemm_ex)(
                    h,
                    ta,
                    tb,
                    m,
                    n,
                    k,
                    &one,
                    a as *const c_void,
                    t,
                    lda,
                    b as *const c_void,
                    t,
                    ldb,
                    &beta,
                    c as *mut c_void,
                    t,
                    ldc,
                    COMPUTE_32F,
                    GEMM_DEFAULT,
                )
            } else {
                (self.c.sgemm)(
                    h,
                    ta,
                    tb,
                    m,
                    n,
                    k,
                    &one,
                    a as *const f32,
                    lda,
                    b as *const f32,
                    ldb,
                    &beta,
                    c as *mut f32,
                    ldc,
                )
            }
        };
        self.c.check(st, what)
    }

    /// Row-major `C[m, n] (+)= A[m, k] B^T` where B is [n, k] (a Linear layer's weight): cuBLAS sees
    /// C^T = B A^T in column-major, i.e. transa = T on B's buffer, transb = N on A's. `accumulate`
    /// adds into C (beta = 1). Nothing runs when C is empty. `(m, n, k)` travel together: they are one
    /// shape, and apart they are easy to pass in the wrong order.
    pub fn linear(
        &self,
        a: DevPtr,
        b: DevPtr,
        c: DevPtr,
        (m, n, k): (u32, u32, u32),
        accumulate: bool,
    ) -> Result<(), Error> {
        if m == 0 || n == 0 {
            return Ok(());
        }
        let beta = if accumulate { 1.0f32 } else { 0.0 };
        let what = if self.bf16 { "cublasGemmEx (bf16)" } else { "cublasSgemm" };
        self.gemm((OP_T, OP_N), (n as c_int, m as c_int, k as c_int), (b, ld(k)), (a, ld(k)), beta, (c, ld(n)), what)
    }

    /// Row-major `C[m, n] += ones[m] bias[n]^T`: a bias broadcast over the rows as a GEMM of depth 1
    /// (cuBLAS has no broadcast add; `ones` holds m ones).
    pub fn add_bias(&self, ones: DevPtr, bias: DevPtr, c: DevPtr, m: u32, n: u32) -> Result<(), Error> {
        if m == 0 || n == 0 {
            return Ok(());
        }
        // column-major C^T[n, m] += bias[n, 1] ones[1, m]
        let what = if self.bf16 { "cublasGemmEx (bf16 bias)" } else { "cublasSgemm (bias)" };
        self.gemm((OP_N, OP_N), (n as c_int, m as c_int, 1), (bias, ld(n)), (ones, 1), 1.0, (c, ld(n)), what)
    }
}
