//! A CPU stand-in for the GPU, for tests only: a launch runs its blocks one after another, each
//! as one OS thread per GPU thread, with a real barrier for `bar.sync`, a per-warp barrier for
//! shuffles and warp syncs, and a per-block map of shared arrays. Slow, but the same kernel code
//! runs, so indexing, masking and barrier mistakes show up in `rustc --test`, not on the GPU.
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Barrier, Mutex};

use crate::gpu::F4;

struct Block {
    barrier: Barrier,
    warps: Vec<Barrier>,
    lanes: Vec<AtomicU32>, // shuffle slots, one per thread (the bits of an f32)
    frags: Vec<AtomicU32>, // warp-collective slots (an mma's fragments), GATHER per thread
    shared: Mutex<HashMap<&'static str, Vec<F4>>>,
}

#[derive(Clone)]
struct Ctx {
    block: Arc<Block>,
    tid: (u32, u32),
    bid: (u32, u32, u32),
    dim: (u32, u32),
}

thread_local! {
    static CTX: RefCell<Option<Ctx>> = const { RefCell::new(None) };
}

fn ctx() -> Ctx {
    CTX.with(|c| c.borrow().clone().expect("gpu:: called outside emulate::launch"))
}

fn linear(c: &Ctx) -> usize {
    (c.tid.1 * c.dim.0 + c.tid.0) as usize
}

/// Runs `kernel` on every thread of a grid of `grid` blocks of `block` threads (block.2 must be 1).
pub fn launch(grid: (u32, u32, u32), block: (u32, u32, u32), kernel: impl Fn() + Sync) {
    assert_eq!(block.2, 1, "the emulator takes 2-D blocks");
    let n = (block.0 * block.1) as usize;
    for bz in 0..grid.2 {
        for by in 0..grid.1 {
            for bx in 0..grid.0 {
                let warps = (0..n.div_ceil(32)).map(|w| Barrier::new((n - 32 * w).min(32))).collect();
                let b = Arc::new(Block {
                    barrier: Barrier::new(n),
                    warps,
                    lanes: (0..n).map(|_| AtomicU32::new(0)).collect(),
                    frags: (0..n * GATHER).map(|_| AtomicU32::new(0)).collect(),
                    shared: Mutex::new(HashMap::new()),
                });
                std::thread::scope(|s| {
                    for t in 0..n as u32 {
                        let c = Ctx {
                            block: b.clone(),
                            tid: (t % block.0, t / block.0),
                            bid: (bx, by, bz),
                            dim: (block.0, block.1),
                        };
                        let kernel = &kernel;
                        std::thread::Builder::new()
                            .stack_size(256 << 10)
                            .spawn_scoped(s, move || {
                                CTX.with(|x| *x.borrow_mut() = Some(c));
                                kernel();
                            })
                            .expect("spawn");
                    }
                });
            }
        }
    }
}

pub fn thread_idx() -> (u32, u32) {
    ctx().tid
}
pub fn block_idx() -> (u32, u32, u32) {
    ctx().bid
}
pub fn block_dim_x() -> u32 {
    ctx().dim.0
}
pub fn barrier() {
    ctx().block.barrier.wait();
}
fn warp_barrier(c: &Ctx) {
    c.block.warps[linear(c) / 32].wait();
}
pub fn warp_sync() {
    warp_barrier(&ctx());
}
pub fn fence() {
    std::sync::atomic::fence(Ordering::SeqCst);
}
pub fn shfl_xor(v: f32, mask: u32) -> f32 {
    let c = ctx();
    let me = linear(&c);
    c.block.lanes[me].store(v.to_bits(), Ordering::SeqCst);
    warp_barrier(&c);
    let other = (me & !31) | ((me & 31) ^ mask as usize);
    let got = f32::from_bits(c.block.lanes[other].load(Ordering::SeqCst));
    warp_barrier(&c); // nobody overwrites a slot before every lane has read
    got
}
/// Values per lane that [`warp_gather`] exchanges.
pub const GATHER: usize = 6;

/// Every lane of this warp gets every lane's `v` (indexed by lane): what a warp-collective
/// instruction such as `mma.sync` sees. All lanes of the warp call it together.
pub fn warp_gather(v: [f32; GATHER]) -> [[f32; GATHER]; 32] {
    let c = ctx();
    let me = linear(&c);
    for (q, x) in v.iter().enumerate() {
        c.block.frags[me * GATHER + q].store(x.to_bits(), Ordering::SeqCst);
    }
    warp_barrier(&c);
    let mut all = [[0.0f32; GATHER]; 32];
    let first = me & !31;
    for (l, row) in all.iter_mut().enumerate() {
        for (q, x) in row.iter_mut().enumerate() {
            if let Some(slot) = c.block.frags.get((first + l) * GATHER + q) {
                *x = f32::from_bits(slot.load(Ordering::SeqCst));
            }
        }
    }
    warp_barrier(&c); // nobody overwrites a slot before every lane has read
    all
}
pub fn fma(a: f32, b: f32, c: f32) -> f32 {
    a.mul_add(b, c)
}
pub fn sqrt(x: f32) -> f32 {
    x.sqrt()
}
pub fn rcp(x: f32) -> f32 {
    1.0 / x
}
pub fn ex2(x: f32) -> f32 {
    x.exp2()
}
pub fn rint(x: f32) -> f32 {
    x.round_ties_even()
}
pub fn to_i32(x: f32) -> i32 {
    x as i32
}
/// # Safety
/// `flag` points to a live u32.
pub unsafe fn publish(flag: *mut u32, lane0: bool) {
    std::sync::atomic::fence(Ordering::SeqCst);
    warp_barrier(&ctx());
    if lane0 {
        unsafe { (*(flag as *const AtomicU32)).store(1, Ordering::Release) };
    }
}
/// # Safety
/// `flag` points to a live u32.
pub unsafe fn load_acquire(flag: *const u32) -> u32 {
    unsafe { (*(flag as *const AtomicU32)).load(Ordering::Acquire) }
}
pub fn pause() {
    std::thread::yield_now();
}
/// # Safety
/// `flag` points to a live u32.
pub unsafe fn store_relaxed(flag: *mut u32, v: u32) {
    unsafe { (*(flag as *const AtomicU32)).store(v, Ordering::Relaxed) };
}
/// This block's shared array `name` of `n` floats (zeroed on first use, 16-byte aligned).
pub fn shared(name: &'static str, n: usize) -> *mut f32 {
    let c = ctx();
    let mut map = c.block.shared.lock().unwrap();
    let v = map.entry(name).or_insert_with(|| vec![F4([0.0; 4]); n.div_ceil(4)]);
    v.as_mut_ptr() as *mut f32
}
