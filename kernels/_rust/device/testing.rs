//! What the kernels' tests share (each op's tests are in its rust.rs): the kernels run on the host
//! emulator at awkward sizes, against plain f64 loops; launch geometry and the neighbor plan come
//! from the host crate's own modules (the same code the launches use).
#[path = "../host/src/launch.rs"]
#[allow(dead_code)] // the host's geometry; the tests use part of it
pub mod launch;
#[path = "../host/src/plan.rs"]
#[allow(dead_code)] // the host's neighbour plan; the tests use part of it
pub mod plan;

use crate::emulate;
pub use crate::p;

pub struct Rng(pub u64);

impl Rng {
    pub fn f(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    pub fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f()).collect()
    }
    pub fn below(&mut self, n: usize) -> usize {
        (((self.f() + 1.0) * 0.5) * n as f32) as usize % n.max(1)
    }
}

pub fn rel(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let num: f64 = got.iter().zip(want).map(|(g, w)| (*g as f64 - w).powi(2)).sum();
    let den: f64 = want.iter().map(|w| w * w).sum();
    if den == 0.0 { num.sqrt() } else { (num / den).sqrt() }
}

pub fn run(g: launch::Geometry, kernel: impl Fn() + Sync) {
    emulate::launch(g.grid, g.block, kernel);
}

#[macro_export]
macro_rules! p {
    ($v:expr) => {
        $v.as_ptr() as usize
    };
}

pub fn matmul_ref(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|kk| a[i * k + kk] as f64 * b[kk * n + j] as f64).sum();
        }
    }
    c
}

/// f32 values rounded to bf16 bits (the kernels' own rounding).
pub fn bf16s(v: &[f32]) -> Vec<u16> {
    v.iter().map(|&x| crate::bf16::narrow(x)).collect()
}

/// bf16 bits widened to f32.
pub fn widened(v: &[u16]) -> Vec<f32> {
    v.iter().map(|&b| crate::bf16::widen(b)).collect()
}
