//! rust_native: the Rust launch path with no Python at all. It uploads the arguments it is given,
//! launches the kernel by name through the same library as the C ABI (the same checks, geometry and
//! embedded PTX), and executes the span plan it is given (mage.timing.SpanPlan: the protocol is decided
//! there, once): warm-up calls and seconds, untimed lead-in passes, then the timed blocks in order. It
//! prints the raw spans as JSON: {"spans_us": [[..] per round], "host_us": [[..] per round],
//! "graph_us": per-call span of a replayed CUDA graph or null, "kernel_names": "..."}.
//!
//! rust_native --kernel NAME --args FILE --plan JSON [--device 0] [--no-graph]
//! rust_native --block NAME --args FILE --plan JSON [...]   a whole model block (mage_rust::blocks):
//!                                           its kernels and cuBLAS GEMMs, the FILE in its packed order;
//!                                           --out PATH writes its output after the first call
//! rust_native --dry-run --plan JSON     the round of every timed pass, in order (needs no GPU)
//!
//! FILE holds the kernel's arguments in its table's order (little-endian): a u32 count, then per
//! argument a tag byte and a u64: 0 a value (a size, f32 bits, or a null address), 1 that many bytes
//! that follow, uploaded to the device, 2 that many zero bytes on the device.
//! JSON is the plan itself, or @PATH to read it from a file.
use mage_rust::driver::{CUevent, CUgraph, CUgraphExec, CUstream, DevPtr, check, driver};
use mage_rust::plan_json::{SpanPlan, parse_plan};
use mage_rust::{Error, MAGE_BAD_ARGUMENT};
use std::ffi::c_void;
use std::time::Instant;

/// Device memory that frees itself.
struct Buf(DevPtr);

impl Buf {
    /// `bytes` on the device: a copy of `data` when given, else zeros (4 bytes at least).
    fn new(bytes: usize, data: Option<&[u8]>) -> Result<Buf, Error> {
        let d = driver()?;
        let size = bytes.max(4).next_multiple_of(4);
        let mut p = 0;
        // SAFETY: out-pointer to a local; copies `bytes` from a live slice of that length.
        unsafe {
            check((d.mem_alloc)(&mut p, size), "cuMemAlloc")?;
            let buf = Buf(p);
            check((d.memset_d32)(p, 0, size / 4), "cuMemsetD32")?;
            if let Some(data) = data.filter(|d| !d.is_empty()) {
                check((d.memcpy_htod)(p, data.as_ptr() as *const c_void, data.len()), "cuMemcpyHtoD")?;
            }
            Ok(buf)
        }
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        if let Ok(d) = driver() {
            // SAFETY: the pointer came from cuMemAlloc and is freed once.
            unsafe { (d.mem_free)(self.0) };
        }
    }
}

fn bad(msg: String) -> Error {
    (MAGE_BAD_ARGUMENT, msg)
}

/// The packed arguments from the argument file, with the device buffers they point to.
fn upload_args(bytes: &[u8], bufs: &mut Vec<Buf>) -> Result<Vec<u64>, Error> {
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], Error> {
        let s = bytes.get(at..at + n).ok_or_else(|| bad(format!("argument file ends at byte {at}")))?;
        at += n;
        Ok(s)
    };
    let count = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes"));
    let mut args = Vec::with_capacity(count as usize);
    for i in 0..count {
        let tag = take(1)?[0];
        let v = u64::from_le_bytes(take(8)?.try_into().expect("8 bytes"));
        args.push(match tag {
            0 => v,
            1 | 2 => {
                let data = if tag == 1 { Some(take(v as usize)?) } else { None };
                let b = Buf::new(v as usize, data)?;
                let p = b.0;
                bufs.push(b);
                p
            }
            t => return Err(bad(format!("argument {i}: unknown tag {t}"))),
        });
    }
    Ok(args)
}

/// What the plan is executed against: a real kernel, or the dry run that only records rounds.
trait Passes {
    /// One untimed call (warm-up).
    fn call(&mut self, sync: bool) -> Result<(), Error>;
    /// One pass: its span and the host's time inside the call (us); `round` None for the lead-in.
    fn span(&mut self, round: Option<usize>) -> Result<(f64, f64), Error>;
}

/// Microseconds per round: the spans, and the host's times inside the calls.
type Rounds = (Vec<Vec<f64>>, Vec<Vec<f64>>);

/// Executes `plan` as mage.timing.spans does for one implementation: spans and host times per round.
fn execute(plan: &SpanPlan, p: &mut dyn Passes) -> Result<Rounds, Error> {
    let t0 = Instant::now();
    let mut calls = 0;
    while calls < plan.warmup || t0.elapsed().as_secs_f64() < plan.warm_s {
        p.call(plan.warm_s > 0.0)?; // with a time to fill, the wall clock must count GPU work
        calls += 1;
    }
    for _ in 0..plan.lead_in {
        p.span(None)?;
    }
    let mut spans = vec![Vec::with_capacity(plan.per_round); plan.rounds];
    let mut host = vec![Vec::with_capacity(plan.per_round); plan.rounds];
    for &(r, k) in &plan.blocks {
        for _ in 0..k {
            let (s, h) = p.span(Some(r))?;
            spans[r].push(s);
            host[r].push(h);
        }
    }
    Ok((spans, host))
}

struct DryRun(Vec<usize>);

impl Passes for DryRun {
    fn call(&mut self, _: bool) -> Result<(), Error> {
        Ok(())
    }
    fn span(&mut self, round: Option<usize>) -> Result<(f64, f64), Error> {
        self.0.extend(round);
        Ok((0.0, 0.0))
    }
}

/// What one call launches: one kernel by its table index, or a whole model block.
enum Work {
    Kernel(usize),
    Block(usize),
}

struct Kernel {
    device: i32,
    work: Work,
    args: Vec<u64>,
    stream: CUstream,
    start: CUevent,
    end: CUevent,
}

impl Kernel {
    fn launch(&self, st: CUstream) -> Result<(), Error> {
        match self.work {
            Work::Kernel(k) => mage_rust::launch_packed(self.device, st, k, &self.args),
            Work::Block(b) => mage_rust::blocks::run(b, self.device, st, &self.args),
        }
    }
    /// Microseconds from an idle GPU through `f`'s work, and the host's time inside `f`, as
    /// mage.timing.EventTimer.
    fn timed(&self, f: &dyn Fn(CUstream) -> Result<(), Error>) -> Result<(f64, f64), Error> {
        let d = driver()?;
        let mut ms = 0.0f32;
        // SAFETY: events and stream are live handles.
        unsafe {
            check((d.ctx_synchronize)(), "cuCtxSynchronize")?;
            check((d.event_record)(self.start, self.stream), "cuEventRecord")?;
            let t0 = Instant::now();
            f(self.stream)?;
            let host = t0.elapsed().as_secs_f64() * 1e6;
            check((d.event_record)(self.end, self.stream), "cuEventRecord")?;
            check((d.event_synchronize)(self.end), "cuEventSynchronize")?;
            check((d.event_elapsed_time)(&mut ms, self.start, self.end), "cuEventElapsedTime")?;
            Ok((ms as f64 * 1e3, host))
        }
    }
    /// Microseconds per call of `repeat` calls captured in one CUDA graph, median of `replays`.
    fn graph_span(&self, repeat: usize, replays: usize) -> Result<f64, Error> {
        let d = driver()?;
        let st = self.stream;
        let mut g: CUgraph = std::ptr::null_mut();
        let mut exec: CUgraphExec = std::ptr::null_mut();
        // SAFETY: capture on our own stream (mode 2: relaxed); handles are live.
        unsafe {
            check((d.stream_begin_capture)(st, 2), "cuStreamBeginCapture")?;
            let mut captured = Ok(());
            for _ in 0..repeat {
                captured = captured.and_then(|_| self.launch(st));
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
        let mut per: Vec<f64> = (0..replays).map(|_| self.timed(&replay).map(|t| t.0)).collect::<Result<_, _>>()?;
        per.sort_by(f64::total_cmp);
        let mid = (per.len() - 1) as f64 / 2.0; // the median, as mage.timing's quantile(0.5)
        let (lo, hi) = (per[mid.floor() as usize], per[mid.ceil() as usize]);
        Ok((lo + (hi - lo) * mid.fract()) / repeat as f64)
    }
}

impl Passes for Kernel {
    fn call(&mut self, sync: bool) -> Result<(), Error> {
        self.launch(self.stream)?;
        if sync {
            // SAFETY: a live stream.
            check(unsafe { (driver()?.stream_synchronize)(self.stream) }, "cuStreamSynchronize")?;
        }
        Ok(())
    }
    fn span(&mut self, _: Option<usize>) -> Result<(f64, f64), Error> {
        self.timed(&|st| self.launch(st))
    }
}

struct Args {
    kernel: String,
    block: String,
    out: String,
    args: String,
    plan: String,
    device: i32,
    graph: bool,
    dry_run: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        kernel: String::new(),
        block: String::new(),
        out: String::new(),
        args: String::new(),
        plan: String::new(),
        device: 0,
        graph: true,
        dry_run: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--kernel" => a.kernel = val()?,
            "--block" => a.block = val()?,
            "--out" => a.out = val()?,
            "--args" => a.args = val()?,
            "--plan" => a.plan = val()?,
            "--device" => a.device = val()?.parse().map_err(|e| format!("--device: {e}"))?,
            "--no-graph" => a.graph = false,
            "--dry-run" => a.dry_run = true,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let what = usize::from(!a.kernel.is_empty()) + usize::from(!a.block.is_empty());
    if a.plan.is_empty() || (!a.dry_run && (what != 1 || a.args.is_empty())) {
        return Err("usage: rust_native --kernel NAME --args FILE --plan JSON|@FILE [--device 0] [--no-graph]\n\
                    \x20      rust_native --block NAME --args FILE --plan JSON|@FILE [--device 0] [--no-graph]\n\
                    \x20      rust_native --dry-run --plan JSON|@FILE"
            .into());
    }
    Ok(a)
}

fn json_rows(rows: &[Vec<f64>]) -> String {
    let row = |r: &Vec<f64>| format!("[{}]", r.iter().map(|v| format!("{v:?}")).collect::<Vec<_>>().join(", "));
    format!("[{}]", rows.iter().map(row).collect::<Vec<_>>().join(", "))
}

fn run(a: &Args) -> Result<String, Error> {
    let text = match a.plan.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).map_err(|e| bad(format!("--plan {path}: {e}")))?,
        None => a.plan.clone(),
    };
    let plan = parse_plan(&text).map_err(|e| bad(format!("--plan: {e}")))?;
    if a.dry_run {
        let mut dry = DryRun(Vec::new());
        execute(&plan, &mut dry)?;
        let seq: Vec<String> = dry.0.iter().map(|r| r.to_string()).collect();
        return Ok(format!("{{\"round_sequence\": [{}], \"lead_in\": {}}}", seq.join(", "), plan.lead_in));
    }
    let work = if a.block.is_empty() {
        Work::Kernel(mage_rust::kernel_index(&a.kernel)?)
    } else {
        Work::Block(mage_rust::blocks::block_index(&a.block)?)
    };
    let d = driver()?;
    mage_rust::module(a.device)?;
    let bytes = std::fs::read(&a.args).map_err(|e| bad(format!("--args {}: {e}", a.args)))?;
    let mut bufs = Vec::new();
    let args = upload_args(&bytes, &mut bufs)?;
    let (mut stream, mut start, mut end) = (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: out-pointers to locals; stream flag 1 = CU_STREAM_NON_BLOCKING.
    unsafe {
        check((d.stream_create)(&mut stream, 1), "cuStreamCreate")?;
        check((d.event_create)(&mut start, 0), "cuEventCreate")?;
        check((d.event_create)(&mut end, 0), "cuEventCreate")?;
    }
    let mut k = Kernel { device: a.device, work, args, stream, start, end };
    match k.work {
        // refuse bad arguments before anything is timed
        Work::Kernel(i) => mage_rust::prepare(i, &k.args).map(|_| ())?,
        Work::Block(b) => mage_rust::blocks::check_args(b, &k.args).map(|_| ())?,
    }
    k.call(true)?; // once before the plan: loads the module, touches the inputs
    if let (false, Work::Block(b)) = (a.out.is_empty(), &k.work) {
        // --out FILE: the block's output after that first call, raw little-endian floats
        let (y, bytes) = mage_rust::blocks::output(*b, &k.args)?;
        let mut host = vec![0u8; bytes];
        if bytes > 0 {
            // SAFETY: y holds `bytes` bytes on the device (checked); host is as long.
            check(unsafe { (d.memcpy_dtoh)(host.as_mut_ptr() as *mut c_void, y, bytes) }, "cuMemcpyDtoH")?;
        }
        std::fs::write(&a.out, host).map_err(|e| bad(format!("--out {}: {e}", a.out)))?;
    }
    let (spans, host) = execute(&plan, &mut k)?;
    let graph = if a.graph { format!("{:?}", k.graph_span(10, 20)?) } else { "null".into() };
    Ok(format!(
        "{{\"spans_us\": {}, \"host_us\": {}, \"graph_us\": {graph}, \"kernel_names\": \"{}\"}}",
        json_rows(&spans),
        json_rows(&host),
        if a.block.is_empty() { &a.kernel } else { &a.block }
    ))
}

fn main() {
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("rust_native: {e}");
            std::process::exit(2);
        }
    };
    match run(&a) {
        Ok(json) => println!("{json}"),
        Err((code, msg)) => {
            eprintln!("rust_native: error {code}: {msg}");
            std::process::exit(1);
        }
    }
}
