//! y_i = sum_{j in N(i)} w_ij x_j over a CSR graph: one warp per task, a task being a row or, for
//! a hub, one chunk of a row's edges (the host's plan). A lane sums features lane*2, lane*2 + 1
//! over the task's edges in edge order. No atomics: a chunk's warp stores its partial sum and
//! raises a flag; the row's last chunk waits for the flags and adds the partials in chunk order,
//! so every output is the same fixed-order sum on every run.
use crate::gpu::{self, fma, Flags, In, Out};
use crate::unroll;

pub const THREADS: usize = 256;
const WARPS: usize = THREADS / 32;
// rows of x in flight per lane (the `unroll!` counts below). Eight gathers and a four-way combine take
// 111 registers: 2 blocks (16 warps) an SM; at 80 or 64 registers ptxas spills.
const GATHERS: usize = 8;
/// Fields of one plan entry: row, first edge, end edge, first partial slot, part, parts.
pub const PLAN_FIELDS: usize = 6;

// <kernel>
/// sum over edges lo..hi of w[e] * x[col[e]] for this lane's two features (`gather(j)` reads them
/// from row j), in edge order.
#[inline(always)]
fn edge_sum(col: &In<i32>, w: &In<f32>, lo: usize, hi: usize, lane: usize, gather: impl Fn(usize) -> [f32; 2]) -> [f32; 2] {
    let mut acc = [0.0f32; 2];
    let mut edge = lo;
    while edge < hi {
        // lane l loads edge (edge + l)'s column and weight: one coalesced load for 32 edges,
        // handed to the other lanes by shuffles (a load per edge per lane made every gather
        // wait for its column: latency, not bandwidth, set the pace)
        let mine = edge + lane;
        let (cj, wj) = if mine < hi { (col.get(mine) as u32, w.get(mine).to_bits()) } else { (0, 0) };
        let count = (hi - edge).min(32);
        let mut q0 = 0;
        while q0 < count {
            // GATHERS rows of x in flight per lane before their multiply-adds
            let mut xs = [[0.0f32; 2]; GATHERS];
            let mut ws = [0.0f32; GATHERS];
            unroll!(q in 8 => {
                let j = gpu::shfl_idx(cj, (q0 + q) as u32) as usize;
                ws[q] = f32::from_bits(gpu::shfl_idx(wj, (q0 + q) as u32));
                if q0 + q < count {
                    xs[q] = gather(j);
                }
            });
            unroll!(q in 8 => {
                if q0 + q < count {
                    acc[0] = fma(ws[q], xs[q][0], acc[0]);
                    acc[1] = fma(ws[q], xs[q][1], acc[1]);
                }
            });
            q0 += GATHERS;
        }
        edge += 32;
    }
    acc
}

/// Grid ceil(tasks / 8), 256 threads. plan null: task t is row t. rowptr/col/w: CSR [n+1], [E];
/// x [n_src, F]; y [n, F]; plan [tasks, 6]; ws [parts, F] partial sums; flags [parts] (all zero
/// between launches).
#[inline(always)]
pub fn neighbor_agg(
    rowptr: *const i32, col: *const i32, w: *const f32, x: *const f32, y: *mut f32,
    plan: *const i32, ws: *mut f32, flags: *mut u32,
    n: u32, n_src: u32, e: u32, f: u32, tasks: u32, parts: u32,
) {
    let (n, e, f, tasks, parts) = (n as usize, e as usize, f as usize, tasks as usize, parts as usize);
    let (rowptr, col, w) = (In::new(rowptr, n + 1), In::new(col, e), In::new(w, e));
    let (x, y) = (In::new(x, n_src as usize * f), Out::new(y, n * f));
    let plan = In::new(plan, tasks * PLAN_FIELDS);
    let (partial_out, partial_in) = (Out::new(ws, parts * f), In::new(ws as *const f32, parts * f));
    let flags = Flags::new(flags, parts);

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
        // even F on an aligned x: every lane's pair is one aligned 8-byte load, tested once here;
        // the general gather (two loads when it must) has its own copy of the loop, so neither
        // carries the other's registers (one loop with both paths needed 128 a thread)
        let acc = match x.pairs() {
            Some(xp) if f % 2 == 0 => edge_sum(&col, &w, lo, hi, lane, |j| xp.get((j * f + feats) / 2)),
            _ => edge_sum(&col, &w, lo, hi, lane, |j| x.get2(j * f + feats)),
        };
        if nparts == 1 {
            if mask > 0 {
                y.set2(row * f + feats, acc, mask);
            }
        } else if !combiner {
            if mask > 0 {
                partial_out.set2((slot0 + part) * f + feats, acc, mask);
            }
        } else {
            // the partials of chunks p = 0..nparts-1 (the last is this warp's own acc) in four
            // running sums by p mod 4 (four loads in flight), added in a fixed order at the
            // end: the same bits every run
            let mut sums = [[0.0f32; 2]; 4];
            let mut p = 0;
            while p + 1 < nparts {
                let mut v = [[0.0f32; 2]; 4];
                unroll!(q in 4 => {
                    if p + q + 1 < nparts {
                        v[q] = partial_in.get2((slot0 + p + q) * f + feats);
                    }
                });
                unroll!(q in 4 => {
                    sums[q] = [sums[q][0] + v[q][0], sums[q][1] + v[q][1]];
                });
                p += 4;
            }
            let mut total = [0.0f32; 2];
            unroll!(q in 4 => {
                total = [total[0] + sums[q][0], total[1] + sums[q][1]];
            });
            if mask > 0 {
                y.set2(row * f + feats, [total[0] + acc[0], total[1] + acc[1]], mask);
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

#[cfg(target_arch = "nvptx64")]
mod entry {
    #[unsafe(no_mangle)]
    pub extern "ptx-kernel" fn neighbor_agg(
        rowptr: *const i32, col: *const i32, w: *const f32, x: *const f32, y: *mut f32,
        plan: *const i32, ws: *mut f32, flags: *mut u32,
        n: u32, n_src: u32, e: u32, f: u32, tasks: u32, parts: u32,
    ) {
        super::neighbor_agg(rowptr, col, w, x, y, plan, ws, flags, n, n_src, e, f, tasks, parts)
    }
}
