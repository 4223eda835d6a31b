//! y_i = sum_{j in N(i)} w_ij x_j over a CSR graph: one warp per task, a task being a row or, for
//! a hub, one chunk of a row's edges (the host's plan). A lane sums features lane*2, lane*2 + 1
//! over the task's edges in edge order. No atomics: a chunk's warp stores its partial sum and
//! raises a flag; the row's last chunk waits for the flags and adds the partials in chunk order,
//! so every output is the same fixed-order sum on every run. One body for every storage type of the
//! features (`Store`): bf16 (u16) features widened at the gather, the sums and the partials in f32, the
//! output rounded at the store; the edge weights stay f32.
use crate::bf16::Store;
use crate::gpu::{self, Flags, In, Out, fma};
// (A version that loaded 32 columns at once and shared them by shuffles, with eight gathers in flight,
// measured 2x slower at 128 registers a thread; kernels/NOTES.md has the numbers.)

pub const THREADS: usize = 256;
const WARPS: usize = THREADS / 32;
/// Fields of one plan entry: row, first edge, end edge, first partial slot, part, parts.
pub const PLAN_FIELDS: usize = 6;

// <kernel>
/// Grid ceil(tasks / 8), 256 threads. plan null: task t is row t. rowptr/col/w: CSR [n+1], [E];
/// x [n_src, F]; y [n, F]; plan [tasks, 6]; ws [parts, F] partial sums; flags [parts] (all zero
/// between launches).
#[inline(always)]
pub fn neighbor_agg<S: Store>(
    rowptr: *const i32,
    col: *const i32,
    w: *const f32,
    x: *const S,
    y: *mut S,
    plan: *const i32,
    ws: *mut f32,
    flags: *mut u32,
    n: u32,
    n_src: u32,
    e: u32,
    f: u32,
    tasks: u32,
    parts: u32,
) {
    let (n, e, f, tasks, parts) = (n as usize, e as usize, f as usize, tasks as usize, parts as usize);
    // SAFETY: the host checked each pointer against this kernel's table `lengths`, the plan against
    // its tasks; ws is written by each chunk's warp (its own slot) and read by the row's combining
    // warp only after that chunk's flag is raised, and the flags are zero between launches.
    let (rowptr, col, w, x, y, plan, partial_out, partial_in, flags) = unsafe {
        (
            In::new(rowptr, n + 1),
            In::new(col, e),
            In::new(w, e),
            In::new(x, n_src as usize * f),
            Out::new(y, n * f),
            In::new(plan, tasks * PLAN_FIELDS),
            Out::new(ws, parts * f),
            In::new(ws as *const f32, parts * f),
            Flags::new(flags, parts),
        )
    };

    let task = gpu::block().x as usize * WARPS + gpu::thread().x as usize / 32;
    if task >= tasks {
        return; // a whole warp leaves together
    }
    let (row, lo, hi, slot0, part, nparts) = if plan.is_null() {
        (task, rowptr.get(task) as usize, rowptr.get(task + 1) as usize, 0, 0, 1)
    } else {
        let p = task * PLAN_FIELDS;
        let field = |q: usize| plan.get(p + q) as usize;
        (field(0), field(1), field(2), field(3), field(4), field(5))
    };
    let combiner = nparts > 1 && part + 1 == nparts;
    let lane = gpu::lane() as usize;
    if combiner {
        // wait for every other chunk once, the lanes sharing the flags (a hub has up to
        // thousands: one at a time, each a round trip to L2, would take milliseconds)
        let mut p = lane;
        while p + 1 < nparts {
            flags.wait(slot0 + p);
            p += 32;
        }
        gpu::warp_sync();
        gpu::fence(); // what one lane acquired, all lanes now see
    }
    let mut f0 = 0;
    while f0 < f {
        let feats = f0 + lane * 2;
        let mask = f.saturating_sub(feats); // features of this lane that exist (>= 2: both)
        let mut acc = [0.0f32; 2];
        let mut edge = lo;
        // four gathers in flight per lane before their multiply-adds
        while edge + 4 <= hi {
            let j = [col.get(edge), col.get(edge + 1), col.get(edge + 2), col.get(edge + 3)];
            let wv = [w.get(edge), w.get(edge + 1), w.get(edge + 2), w.get(edge + 3)];
            let mut xs = [[0.0f32; 2]; 4];
            for q in 0..4 {
                xs[q] = S::load2(&x, j[q] as usize * f + feats);
            }
            for q in 0..4 {
                acc[0] = fma(wv[q], xs[q][0], acc[0]);
                acc[1] = fma(wv[q], xs[q][1], acc[1]);
            }
            edge += 4;
        }
        while edge < hi {
            let xj = S::load2(&x, col.get(edge) as usize * f + feats);
            let wj = w.get(edge);
            acc[0] = fma(wj, xj[0], acc[0]);
            acc[1] = fma(wj, xj[1], acc[1]);
            edge += 1;
        }
        if nparts == 1 {
            if mask > 0 {
                S::store2(&y, row * f + feats, acc, mask);
            }
        } else if !combiner {
            if mask > 0 {
                partial_out.set2((slot0 + part) * f + feats, acc, mask);
            }
        } else {
            // the partials of chunks p = 0, 2, 4, .. and p = 1, 3, .. in two running sums (two
            // loads in flight), added at the end: a fixed order, so the same bits every run
            let (mut even, mut odd) = ([0.0f32; 2], [0.0f32; 2]);
            let mut p = 0;
            while p + 1 < nparts {
                let v = partial_in.get2((slot0 + p) * f + feats);
                let u = if p + 2 < nparts { partial_in.get2((slot0 + p + 1) * f + feats) } else { [0.0; 2] };
                even = [even[0] + v[0], even[1] + v[1]];
                odd = [odd[0] + u[0], odd[1] + u[1]];
                p += 2;
            }
            let total = [even[0] + odd[0], even[1] + odd[1]];
            if mask > 0 {
                S::store2(&y, row * f + feats, [total[0] + acc[0], total[1] + acc[1]], mask);
            }
        }
        f0 += 64;
    }
    if nparts > 1 {
        if combiner {
            gpu::warp_sync(); // every lane is past its waits before the flags drop
            for p in 0..nparts - 1 {
                flags.clear(slot0 + p);
            }
        } else {
            flags.publish(slot0 + part);
        }
    }
}
// </kernel>

#[cfg(test)]
mod tests {
    use crate::testing::*;

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
            let addr = [
                p!(rowptr),
                p!(col),
                p!(w),
                p!(x),
                y.as_mut_ptr() as usize,
                if pl.entries.is_empty() { 0 } else { p!(pl.entries) },
                p!(ws),
                p!(flags),
            ];
            let (tasks, parts) = (pl.tasks as u32, pl.parts as u32);
            run(launch::neighbor_agg(pl.tasks as u64).unwrap(), move || {
                super::neighbor_agg(
                    addr[0] as *const i32,
                    addr[1] as *const i32,
                    addr[2] as *const f32,
                    addr[3] as *const f32,
                    addr[4] as *mut f32,
                    addr[5] as *const i32,
                    addr[6] as *mut f32,
                    addr[7] as *mut u32,
                    n as u32,
                    n as u32,
                    e as u32,
                    f as u32,
                    tasks,
                    parts,
                )
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

    /// One launch of the kernel at storage type S on the emulator: y [n, f] from x.
    fn agg<S: crate::bf16::Store>(
        rowptr: &[i32],
        col: &[i32],
        w: &[f32],
        x: &[S],
        f: usize,
        split: usize,
        y: &mut [S],
    ) {
        let n = rowptr.len() - 1;
        let pl = plan::build(rowptr, split).unwrap();
        let (ws, flags) = (vec![0.0f32; pl.parts * f], vec![0u32; pl.parts]);
        let ent = if pl.entries.is_empty() { 0 } else { p!(pl.entries) };
        let a = [p!(rowptr), p!(col), p!(w), p!(x), y.as_mut_ptr() as usize, ent, p!(ws), p!(flags)];
        let (e, tasks, parts) = (col.len() as u32, pl.tasks as u32, pl.parts as u32);
        run(launch::neighbor_agg(pl.tasks as u64).unwrap(), move || {
            super::neighbor_agg(
                a[0] as *const i32,
                a[1] as *const i32,
                a[2] as *const f32,
                a[3] as *const S,
                a[4] as *mut S,
                a[5] as *const i32,
                a[6] as *mut f32,
                a[7] as *mut u32,
                n as u32,
                n as u32,
                e,
                f as u32,
                tasks,
                parts,
            )
        });
        assert!(flags.iter().all(|&v| v == 0));
    }

    /// bf16 features: the f32 kernel on the widened features, rounded once, is what the bf16 kernel
    /// stores (the same f32 sums in the same order), with and without a split hub.
    #[test]
    fn neighbor_agg_bf16_is_the_f32_kernel_rounded() {
        let mut rng = Rng(15);
        let degrees = [3usize, 0, 40, 1, 9, 0, 2];
        let mut rowptr = vec![0i32];
        for d in degrees {
            rowptr.push(rowptr.last().unwrap() + d as i32);
        }
        let n = degrees.len();
        let e = *rowptr.last().unwrap() as usize;
        let col: Vec<i32> = (0..e).map(|_| rng.below(n) as i32).collect();
        let w = rng.vec(e);
        for &(f, split) in &[(1, 8), (3, 8), (64, 1000), (130, 8), (5, 2)] {
            let xb = bf16s(&rng.vec(n * f));
            let xf = widened(&xb);
            let (mut yf, mut yb) = (vec![f32::NAN; n * f], vec![0x7fc0u16; n * f]);
            agg(&rowptr, &col, &w, &xf, f, split, &mut yf);
            agg(&rowptr, &col, &w, &xb, f, split, &mut yb);
            assert_eq!(yb, bf16s(&yf), "neighbor_agg bf16 F={f} split={split}");
        }
    }
}
