//! The kernels run on the host emulator at awkward sizes, against plain f64 loops; launch
//! geometry and the neighbor plan come from the host crate's own modules (the same code the
//! launches use).
#[path = "../host/src/launch.rs"]
#[allow(dead_code)]
mod launch;
#[path = "../host/src/plan.rs"]
#[allow(dead_code)]
mod plan;

use crate::emulate;

struct Rng(u64);

impl Rng {
    fn f(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f()).collect()
    }
    fn below(&mut self, n: usize) -> usize {
        (((self.f() + 1.0) * 0.5) * n as f32) as usize % n.max(1)
    }
}

fn rel(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let num: f64 = got.iter().zip(want).map(|(g, w)| (*g as f64 - w).powi(2)).sum();
    let den: f64 = want.iter().map(|w| w * w).sum();
    if den == 0.0 { num.sqrt() } else { (num / den).sqrt() }
}

fn run(g: launch::Geometry, kernel: impl Fn() + Sync) {
    emulate::launch(g.grid, g.block, kernel);
}

macro_rules! p {
    ($v:expr) => {
        $v.as_ptr() as usize
    };
}

fn matmul_ref(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|kk| a[i * k + kk] as f64 * b[kk * n + j] as f64).sum();
        }
    }
    c
}

#[test]
fn matmul_both_versions() {
    let mut rng = Rng(1);
    for &(m, k, n) in &[(1, 1, 1), (17, 33, 29), (130, 7, 65), (67, 200, 3), (128, 16, 128), (5, 12, 8), (3, 0, 4)] {
        let (a, b) = (rng.vec(m * k), rng.vec(k * n));
        let want = matmul_ref(&a, &b, m, k, n);
        for tiled in [false, true] {
            let mut c = vec![f32::NAN; m * n];
            let (pa, pb, pc) = (p!(a), p!(b), c.as_mut_ptr() as usize);
            let (mu, ku, nu) = (m as u32, k as u32, n as u32);
            run(launch::matmul(mu, nu, tiled).unwrap(), move || {
                let (a, b, c) = (pa as *const f32, pb as *const f32, pc as *mut f32);
                if tiled { crate::matmul::matmul(a, b, c, mu, ku, nu) } else { crate::matmul::matmul_scalar(a, b, c, mu, ku, nu) }
            });
            let e = rel(&c, &want);
            assert!(e < 1e-5, "matmul tiled={tiled} {m}x{k}x{n}: rel error {e:e}");
        }
    }
}

#[test]
fn bias_gelu_matches_f64() {
    let mut rng = Rng(2);
    for &(r, c) in &[(1, 1), (3, 4097), (37, 129), (9, 1024), (5, 8), (6, 3)] {
        let x: Vec<f32> = rng.vec(r * c).iter().map(|v| v * 6.0).collect();
        let b = rng.vec(c);
        let mut y = vec![f32::NAN; r * c];
        let (px, pb, py) = (p!(x), p!(b), y.as_mut_ptr() as usize);
        run(launch::bias_gelu(r as u32, c as u32).unwrap(), move || {
            crate::bias_gelu::bias_gelu(px as *const f32, pb as *const f32, py as *mut f32, r as u32, c as u32)
        });
        let want: Vec<f64> = (0..r * c).map(|i| {
            let z = x[i] as f64 + b[i % c] as f64;
            0.5 * z * (1.0 + erf64(z / std::f64::consts::SQRT_2))
        }).collect();
        let e = rel(&y, &want);
        assert!(e < 2e-6, "bias_gelu {r}x{c}: rel error {e:e}");
    }
}

/// erf to ~1e-15 for the references here (series near zero, continued fraction beyond).
fn erf64(x: f64) -> f64 {
    let a = x.abs();
    let v = if a < 2.5 {
        let (mut term, mut sum) = (a, a);
        for n in 1..120 {
            term *= -a * a / n as f64;
            sum += term / (2 * n + 1) as f64;
        }
        2.0 / std::f64::consts::PI.sqrt() * sum
    } else {
        let mut t = a;
        for n in (1..=400).rev() {
            t = a + (n as f64 / 2.0) / t;
        }
        1.0 - (-a * a).exp() / (std::f64::consts::PI.sqrt() * t)
    };
    v.copysign(x)
}

#[test]
fn layernorm_both_paths() {
    let mut rng = Rng(3);
    for &(r, c) in &[(1, 1), (3, 4099), (5, 1000), (4, 37), (2, 4096), (1, 9000)] {
        let x: Vec<f32> = rng.vec(r * c).iter().map(|v| v + 0.5).collect();
        let (g, bt) = (rng.vec(c), rng.vec(c));
        let mut y = vec![f32::NAN; r * c];
        let (px, pg, pb, py) = (p!(x), p!(g), p!(bt), y.as_mut_ptr() as usize);
        run(launch::layernorm(r as u32).unwrap(), move || {
            crate::layernorm::layernorm(px as *const f32, pg as *const f32, pb as *const f32, py as *mut f32, r as u32,
                                        c as u32, 1e-5)
        });
        let mut want = vec![0.0; r * c];
        for i in 0..r {
            let row = &x[i * c..(i + 1) * c];
            let mean = row.iter().map(|&v| v as f64).sum::<f64>() / c as f64;
            let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / c as f64;
            for j in 0..c {
                want[i * c + j] = (row[j] as f64 - mean) / (var + 1e-5).sqrt() * g[j] as f64 + bt[j] as f64;
            }
        }
        let e = rel(&y, &want);
        assert!(e < 1e-5, "layernorm {r}x{c}: rel error {e:e}");
    }
}

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
                if wide { crate::triangle::triangle::<64>(a, b, o, n as u32, c as u32) } else {
                    crate::triangle::triangle::<32>(a, b, o, n as u32, c as u32)
                }
            });
            let e = rel(&o, &want);
            assert!(e < 1e-5, "triangle wide={wide} N={n} C={c}: rel error {e:e}");
        }
    }
}

#[test]
fn neighbor_agg_with_and_without_a_plan() {
    let mut rng = Rng(5);
    // degrees with a hub: row 2 has 40 edges, so split = 8 cuts it into 5 chunks
    for &(f, split) in &[(1, 8), (3, 8), (64, 8), (130, 8), (64, 1000), (5, 2), (64, 1)] {
        let degrees = [3usize, 0, 40, 1, 9, 0, 2];
        let n = degrees.len();
        let mut rowptr = vec![0i32];
        for d in degrees {
            rowptr.push(rowptr.last().unwrap() + d as i32);
        }
        let e = *rowptr.last().unwrap() as usize;
        let col: Vec<i32> = (0..e).map(|_| rng.below(n) as i32).collect();
        let w = rng.vec(e);
        let x = rng.vec(n * f);
        let pl = plan::build(&rowptr, split).unwrap();
        let ws = vec![0.0f32; pl.parts * f];
        let flags = vec![0u32; pl.parts];
        let mut y = vec![f32::NAN; n * f];
        let addr = [p!(rowptr), p!(col), p!(w), p!(x), y.as_mut_ptr() as usize,
                    if pl.entries.is_empty() { 0 } else { p!(pl.entries) }, p!(ws), p!(flags)];
        let (tasks, parts) = (pl.tasks as u32, pl.parts as u32);
        run(launch::neighbor_agg(pl.tasks as u64).unwrap(), move || {
            crate::neighbor_agg::neighbor_agg(addr[0] as *const i32, addr[1] as *const i32, addr[2] as *const f32,
                                              addr[3] as *const f32, addr[4] as *mut f32, addr[5] as *const i32,
                                              addr[6] as *mut f32, addr[7] as *mut u32, n as u32, n as u32, e as u32,
                                              f as u32, tasks, parts)
        });
        let mut want = vec![0.0f64; n * f];
        for r in 0..n {
            for ei in rowptr[r] as usize..rowptr[r + 1] as usize {
                for q in 0..f {
                    want[r * f + q] += w[ei] as f64 * x[col[ei] as usize * f + q] as f64;
                }
            }
        }
        let err = rel(&y, &want);
        assert!(err < 1e-5, "neighbor_agg F={f} split={split} ({} parts): rel error {err:e}", pl.parts);
        assert!(flags.iter().all(|&v| v == 0), "flags must be lowered for the next launch");
    }
}
