//! rust_native: the Rust launch path with no Python at all. Allocates seeded inputs with the
//! driver API, launches the same embedded PTX through the same functions as the C ABI, and takes
//! event spans with the harness's protocol (spans on an idle GPU, warm-up, an untimed lead-in, rounds
//! taken in short blocks back and forth so each round spans the whole window), plus the
//! CUDA-graph span; prints tidy CSV rows in mage's schema on stdout.
//!
//! rust_native --op layernorm --shape R=1024,C=1024 --shape-set field [--scalar] [--spans 300]
//!             [--rounds 3] [--block 10] [--warmup 10] [--device 0] [--no-graph] [--version V]
//! (--version picks a kernel version as the C ABI's `version` argument: matmul 1 or 2, triangle 0 or 1)
use mage_rust::driver::{check, driver, CUevent, CUgraph, CUgraphExec, CUstream, DevPtr};
use mage_rust::{plan, Error, NeighborArgs};
use std::collections::BTreeMap;
use std::ffi::c_void;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // SplitMix64
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f32 {
        let (u, v) = (self.uniform().max(1e-300), self.uniform());
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
    }
    fn normals(&mut self, n: usize, scale: f32, shift: f32) -> Vec<f32> {
        (0..n).map(|_| self.normal() * scale + shift).collect()
    }
}

/// Device memory that frees itself.
struct Buf(DevPtr);

impl Buf {
    fn upload<T: Copy>(data: &[T]) -> Result<Buf, Error> {
        let d = driver()?;
        let bytes = std::mem::size_of_val(data).max(4);
        let mut p = 0;
        // SAFETY: out-pointer to a local; copies `bytes` from a live slice (or 4 zero bytes).
        unsafe {
            check((d.mem_alloc)(&mut p, bytes), "cuMemAlloc")?;
            check((d.memset_d32)(p, 0, bytes / 4), "cuMemsetD32")?;
            if !data.is_empty() {
                check((d.memcpy_htod)(p, data.as_ptr() as *const c_void, std::mem::size_of_val(data)), "cuMemcpyHtoD")?;
            }
        }
        Ok(Buf(p))
    }
    fn zeros(n: usize) -> Result<Buf, Error> {
        Buf::upload(&vec![0u32; n])
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        if let Ok(d) = driver() {
            // SAFETY: p came from cuMemAlloc.
            unsafe { (d.mem_free)(self.0) };
        }
    }
}

fn parse_shape(s: &str) -> BTreeMap<String, String> {
    s.split(',').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn num(shape: &BTreeMap<String, String>, k: &str) -> Result<i64, Error> {
    shape.get(k).and_then(|v| v.parse().ok()).ok_or((mage_rust::MAGE_BAD_ARGUMENT, format!("shape needs {k}=<int>")))
}

/// A CSR graph with mean degree `deg`, as mage.ops.random_graph: every row `deg` edges
/// ('uniform') or Pareto(1.2) degrees ('skewed'); columns sorted within a row.
fn graph(n: usize, deg: usize, dist: &str, rng: &mut Rng) -> (Vec<i32>, Vec<i32>, Vec<f32>) {
    let degrees: Vec<usize> = if dist == "skewed" {
        let raw: Vec<f64> = (0..n).map(|_| rng.uniform().max(1e-12).powf(-1.0 / 1.2) - 1.0).collect();
        let mean = raw.iter().sum::<f64>() / n.max(1) as f64;
        raw.iter().map(|r| ((r * deg as f64 / mean.max(1e-12)).floor() as usize).min(n)).collect()
    } else {
        vec![deg; n]
    };
    let mut rowptr = vec![0i32; n + 1];
    for r in 0..n {
        rowptr[r + 1] = rowptr[r] + degrees[r] as i32;
    }
    let mut col = Vec::with_capacity(rowptr[n] as usize);
    for &d in &degrees {
        let start = col.len();
        col.extend((0..d).map(|_| (rng.next() % n.max(1) as u64) as i32));
        col[start..].sort_unstable();
    }
    let w = (0..col.len()).map(|_| (rng.uniform() * 2.0 - 1.0) as f32).collect();
    (rowptr, col, w)
}

struct Args {
    op: String,
    shape: String,
    shape_set: String,
    scalar: bool,
    spans: usize,
    rounds: usize,
    block: usize,
    warmup: usize,
    device: i32,
    graph: bool,
    version: Option<i32>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args { op: String::new(), shape: String::new(), shape_set: "field".into(), scalar: false,
                       spans: 300, rounds: 3, block: 10, warmup: 10, device: 0, graph: true,
                       version: None };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < argv.len() {
        let val = |i: usize| argv.get(i + 1).cloned().ok_or(format!("{} needs a value", argv[i]));
        match argv[i].as_str() {
            "--op" => a.op = val(i)?,
            "--shape" => a.shape = val(i)?,
            "--shape-set" => a.shape_set = val(i)?,
            "--spans" => a.spans = val(i)?.parse().map_err(|e| format!("--spans: {e}"))?,
            "--rounds" => a.rounds = val(i)?.parse().map_err(|e| format!("--rounds: {e}"))?,
            "--block" => a.block = val(i)?.parse().map_err(|e| format!("--block: {e}"))?,
            "--warmup" => a.warmup = val(i)?.parse().map_err(|e| format!("--warmup: {e}"))?,
            "--device" => a.device = val(i)?.parse().map_err(|e| format!("--device: {e}"))?,
            "--version" => a.version = Some(val(i)?.parse().map_err(|e| format!("--version: {e}"))?),
            "--scalar" => { a.scalar = true; i += 1; continue; }
            "--no-graph" => { a.graph = false; i += 1; continue; }
            other => return Err(format!("unknown argument {other}")),
        }
        i += 2;
    }
    if a.op.is_empty() || a.shape.is_empty() {
        return Err("usage: rust_native --op OP --shape K=V,... [--shape-set field] [--scalar] [--spans 300] \
                    [--rounds 3] [--block 10] [--warmup 10] [--device 0] [--no-graph]".into());
    }
    Ok(a)
}

type Call = Box<dyn Fn(CUstream) -> Result<(), Error>>;

/// The inputs of one op at one shape, uploaded, and the call that launches its kernel.
fn prepare(a: &Args, bufs: &mut Vec<Buf>) -> Result<Call, Error> {
    let s = parse_shape(&a.shape);
    let mut rng = Rng(1234);
    let dev = a.device;
    let mut up = |v: Vec<f32>| -> Result<DevPtr, Error> {
        let b = Buf::upload(&v)?;
        let p = b.0;
        bufs.push(b);
        Ok(p)
    };
    Ok(match a.op.as_str() {
        "matmul" => {
            let (m, k, n) = (num(&s, "M")?, num(&s, "K")?, num(&s, "N")?);
            let (pa, pb) = (up(rng.normals((m * k) as usize, 1.0, 0.0))?, up(rng.normals((k * n) as usize, 1.0, 0.0))?);
            let pc = up(vec![0.0; (m * n) as usize])?;
            let version = if a.scalar { 0 } else { a.version.unwrap_or(1) };
            Box::new(move |st| mage_rust::matmul(dev, st, pa, pb, pc, m, k, n, version))
        }
        "bias_gelu" => {
            let (r, c) = (num(&s, "R")?, num(&s, "C")?);
            let (px, pb) = (up(rng.normals((r * c) as usize, 1.0, 0.0))?, up(rng.normals(c as usize, 0.5, 0.0))?);
            let py = up(vec![0.0; (r * c) as usize])?;
            Box::new(move |st| mage_rust::bias_gelu(dev, st, px, pb, py, r, c))
        }
        "layernorm" => {
            let (r, c) = (num(&s, "R")?, num(&s, "C")?);
            let px = up(rng.normals((r * c) as usize, 1.0, 0.5))?;
            let (pg, pbt) = (up(rng.normals(c as usize, 0.1, 1.0))?, up(rng.normals(c as usize, 0.1, 0.0))?);
            let py = up(vec![0.0; (r * c) as usize])?;
            Box::new(move |st| mage_rust::layernorm(dev, st, px, pg, pbt, py, r, c, 1e-5))
        }
        "triangle" => {
            let (n, c) = (num(&s, "N")?, num(&s, "C")?);
            let e = (n * n * c) as usize;
            let (pa, pb, po) = (up(rng.normals(e, 1.0, 0.0))?, up(rng.normals(e, 1.0, 0.0))?, up(vec![0.0; e])?);
            let version = a.version.unwrap_or(0);
            Box::new(move |st| mage_rust::triangle(dev, st, pa, pb, po, n, c, version))
        }
        "neighbor_agg" => {
            let (n, f, deg) = (num(&s, "n")? as usize, num(&s, "F")? as usize, num(&s, "deg")? as usize);
            let dist = s.get("dist").cloned().unwrap_or("uniform".into());
            let (rowptr, col, w) = graph(n, deg, &dist, &mut rng);
            let e = col.len();
            let p = plan::build(&rowptr, mage_rust::NEIGHBOR_SPLIT).map_err(|m| (mage_rust::MAGE_BAD_ARGUMENT, m))?;
            let mut keep = |b: Buf| { let q = b.0; bufs.push(b); q };
            let prow = keep(Buf::upload(&rowptr)?);
            let pcol = keep(Buf::upload(&col)?);
            let pw = keep(Buf::upload(&w)?);
            let px = keep(Buf::upload(&rng.normals(n * f, 1.0, 0.0))?);
            let py = keep(Buf::zeros(n * f)?);
            let pplan = if p.entries.is_empty() { 0 } else { keep(Buf::upload(&p.entries)?) };
            let pws = if p.parts == 0 { 0 } else { keep(Buf::zeros(p.parts * f)?) };
            let pflags = if p.parts == 0 { 0 } else { keep(Buf::zeros(p.parts)?) };
            let (tasks, parts) = (p.tasks as i64, p.parts as i64);
            Box::new(move |st| {
                let args = NeighborArgs { rowptr: prow, col: pcol, w: pw, x: px, y: py, plan: pplan, ws: pws, flags: pflags,
                                          n: n as i64, n_src: n as i64, e: e as i64, f: f as i64, tasks, parts };
                mage_rust::neighbor_agg(dev, st, &args)
            })
        }
        other => return Err((mage_rust::MAGE_BAD_ARGUMENT, format!("unknown op {other}"))),
    })
}

fn quantile(xs: &[f64], q: f64) -> f64 {
    if xs.len() == 1 {
        return xs[0];
    }
    let pos = q * (xs.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = (lo + 1).min(xs.len() - 1);
    xs[lo] + (xs[hi] - xs[lo]) * (pos - lo as f64)
}

fn stats(samples: &[f64], names: &[&str]) -> Vec<(String, f64)> {
    let mut xs = samples.to_vec();
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
    names.iter().map(|&n| {
        let v = match n {
            "n" => xs.len() as f64,
            "mean" => mean,
            "median" => quantile(&xs, 0.5),
            "p10" => quantile(&xs, 0.1),
            "p20" => quantile(&xs, 0.2),
            "p80" => quantile(&xs, 0.8),
            "p90" => quantile(&xs, 0.9),
            "min" => xs[0],
            _ => xs[xs.len() - 1],
        };
        (n.to_string(), v)
    }).collect()
}

struct Timer {
    start: CUevent,
    end: CUevent,
}

impl Timer {
    fn new() -> Result<Timer, Error> {
        let d = driver()?;
        let (mut start, mut end) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: out-pointers to locals.
        unsafe {
            check((d.event_create)(&mut start, 0), "cuEventCreate")?;
            check((d.event_create)(&mut end, 0), "cuEventCreate")?;
        }
        Ok(Timer { start, end })
    }
    /// Microseconds from an idle GPU through `f`'s work, as mage.timing.EventTimer.
    fn span(&self, st: CUstream, f: &dyn Fn(CUstream) -> Result<(), Error>) -> Result<f64, Error> {
        let d = driver()?;
        let mut ms = 0.0f32;
        // SAFETY: events and stream are live handles.
        unsafe {
            check((d.ctx_synchronize)(), "cuCtxSynchronize")?;
            check((d.event_record)(self.start, st), "cuEventRecord")?;
            f(st)?;
            check((d.event_record)(self.end, st), "cuEventRecord")?;
            check((d.event_synchronize)(self.end), "cuEventSynchronize")?;
            check((d.event_elapsed_time)(&mut ms, self.start, self.end), "cuEventElapsedTime")?;
        }
        Ok(ms as f64 * 1e3)
    }
}

/// Microseconds per call of `repeat` calls captured in one CUDA graph, median of `replays`.
fn graph_span(st: CUstream, call: &Call, timer: &Timer, repeat: usize, replays: usize) -> Result<f64, Error> {
    let d = driver()?;
    let mut g: CUgraph = std::ptr::null_mut();
    let mut exec: CUgraphExec = std::ptr::null_mut();
    // SAFETY: capture on our own stream (mode 2: relaxed); handles are live.
    unsafe {
        check((d.stream_begin_capture)(st, 2), "cuStreamBeginCapture")?;
        let mut captured = Ok(());
        for _ in 0..repeat {
            captured = captured.and_then(|_| call(st));
        }
        check((d.stream_end_capture)(st, &mut g), "cuStreamEndCapture")?;
        captured?;
        check((d.graph_instantiate)(&mut exec, g, 0), "cuGraphInstantiate")?;
        check((d.graph_launch)(exec, st), "cuGraphLaunch")?;
        check((d.stream_synchronize)(st), "cuStreamSynchronize")?;
    }
    let replay = |s: CUstream| -> Result<(), Error> {
        // SAFETY: exec is a live instantiated graph.
        check(unsafe { (d.graph_launch)(exec, s) }, "cuGraphLaunch")
    };
    let mut per: Vec<f64> = (0..replays).map(|_| timer.span(st, &replay)).collect::<Result<_, _>>()?;
    per.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Ok(quantile(&per, 0.5) / repeat as f64)
}

fn run(a: &Args) -> Result<(), Error> {
    let d = driver()?;
    mage_rust::module(a.device)?;
    let mut st: CUstream = std::ptr::null_mut();
    // SAFETY: out-pointer to a local; flag 1 = CU_STREAM_NON_BLOCKING.
    check(unsafe { (d.stream_create)(&mut st, 1) }, "cuStreamCreate")?;
    let mut bufs = Vec::new();
    let call = prepare(a, &mut bufs)?;
    call(st)?; // once before timing: loads the module, touches the inputs
    // SAFETY: live stream.
    check(unsafe { (d.stream_synchronize)(st) }, "cuStreamSynchronize")?;
    let timer = Timer::new()?;
    let imp = if a.scalar { "rust_native_scalar" } else { "rust_native" };
    let kernel = match (a.op.as_str(), a.scalar, a.version) {
        ("matmul", true, _) => "matmul_scalar",
        ("matmul", false, Some(2)) => "matmul_2cta",
        ("triangle", _, Some(1)) => "triangle_256",
        (op, _, _) => op,
    };
    let row = |view: &str, rnd: usize, stat: &str, v: f64| {
        println!("{},{},fp32,\"{}\",{},warm,{},{},{},{},us,rust,kernel={}", a.op, imp, a.shape, a.shape_set, view, rnd,
                 stat, v, kernel);
    };
    println!("op,impl,dtype,shape,shape_set,cache,view,round,stat,value,unit,family,config");
    let rounds = a.rounds.max(1);
    let per_round = (a.spans / rounds).max(1);
    let block = a.block.max(1);
    for _ in 0..a.warmup {
        call(st)?;
    }
    for _ in 0..block.min(per_round) {
        timer.span(st, &call)?; // the lead-in, in the timed rhythm, not kept (as mage.timing.spans)
    }
    // As mage.timing.schedule: each round's spans in blocks of `block`, the rounds' blocks taken
    // forwards then backwards (0, 1, 2, 2, 1, 0, ...).
    let mut xs: Vec<Vec<f64>> = vec![Vec::with_capacity(per_round); rounds];
    let mut cycle = 0;
    while xs.iter().any(|r| r.len() < per_round) {
        let order: Vec<usize> = if cycle % 2 == 0 { (0..rounds).collect() } else { (0..rounds).rev().collect() };
        cycle += 1;
        for r in order {
            let k = block.min(per_round - xs[r].len());
            for _ in 0..k {
                xs[r].push(timer.span(st, &call)?);
            }
        }
    }
    for (r, round) in xs.iter().enumerate() {
        for (stat, v) in stats(round, &["n", "mean", "median", "p20", "p80", "min"]) {
            row("event_span", r + 1, &stat, v);
        }
    }
    let all: Vec<f64> = xs.concat();
    for (stat, v) in stats(&all, &["n", "mean", "median", "p10", "p90", "min", "max"]) {
        row("event_span", 0, &stat, v);
    }
    if a.graph {
        row("graph_span", 0, "mean", graph_span(st, &call, &timer, 10, 20)?);
    }
    Ok(())
}

fn main() {
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("rust_native: {e}");
            std::process::exit(2);
        }
    };
    if let Err((code, msg)) = run(&a) {
        eprintln!("rust_native: error {code}: {msg}");
        std::process::exit(1);
    }
}
