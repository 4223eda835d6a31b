//! mage's Rust launch path: a C ABI (for Python's ctypes) over the CUDA driver API that launches
//! the embedded PTX of `../device` in the device's primary context, on the caller's stream, so
//! PyTorch's tensors are used in place. Functions return 0 or an error code; the message of the
//! last error on this thread is `mage_rust_last_error()`, the code's name `mage_rust_error_name`.
pub mod driver;
pub mod launch;
pub mod plan;

use driver::{check, driver, CUcontext, CUfunction, CUmodule, CUstream, DevPtr};
use launch::Geometry;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

/// The PTX module built by build.sh, embedded so the library cannot be paired with stale PTX.
pub static PTX: &str = concat!(include_str!("../../build/mage_kernels.ptx"), "\0");

// Codes of our own, above every CUresult.
pub const MAGE_BAD_ARGUMENT: i32 = 100_001;
pub const MAGE_NO_DRIVER: i32 = 100_002;
pub const MAGE_MODULE_LOAD: i32 = 100_003;

/// Edges per neighbor_agg task: longer rows are cut into chunks of this many edges.
pub const NEIGHBOR_SPLIT: usize = 128;

pub const KERNELS: [&str; 8] =
    ["matmul_scalar", "matmul", "bias_gelu", "layernorm", "triangle", "neighbor_agg", "matmul_2cta", "triangle_256"];

#[derive(Clone, Copy)]
pub enum Kernel {
    MatmulScalar = 0,
    Matmul,
    BiasGelu,
    Layernorm,
    Triangle,
    NeighborAgg,
    Matmul2Cta,
    Triangle256,
}

pub type Error = (i32, String);

/// The module loaded once per device, in that device's primary context.
pub struct Module {
    pub ctx: CUcontext,
    pub module: CUmodule,
    pub funcs: [CUfunction; KERNELS.len()],
}
// SAFETY: CUDA handles may be used from any thread once created.
unsafe impl Send for Module {}
unsafe impl Sync for Module {}

const MAX_DEVICES: usize = 16;
static MODULES: [OnceLock<Result<Module, Error>>; MAX_DEVICES] = [const { OnceLock::new() }; MAX_DEVICES];

fn load_module(device: i32) -> Result<Module, Error> {
    let d = driver()?;
    let mut dev = 0;
    let mut ctx: CUcontext = std::ptr::null_mut();
    // SAFETY: out-pointers to locals; the driver is initialised.
    unsafe {
        check((d.device_get)(&mut dev, device), &format!("cuDeviceGet({device})"))?;
        check((d.primary_ctx_retain)(&mut ctx, dev), "cuDevicePrimaryCtxRetain")?;
        check((d.ctx_set_current)(ctx), "cuCtxSetCurrent")?;
    }
    // ask the JIT for its error log, so a PTX the driver refuses says why
    let mut log = vec![0u8; 8192];
    let mut opts: [c_int; 2] = [5 /* CU_JIT_ERROR_LOG_BUFFER */, 6 /* ..._SIZE_BYTES */];
    let mut vals: [*mut c_void; 2] = [log.as_mut_ptr() as *mut c_void, log.len() as *mut c_void];
    let mut module: CUmodule = std::ptr::null_mut();
    // SAFETY: PTX is NUL-terminated; option arrays have 2 entries as stated.
    let rc = unsafe { (d.module_load_data_ex)(&mut module, PTX.as_ptr() as *const c_void, 2, opts.as_mut_ptr(), vals.as_mut_ptr()) };
    if rc != 0 {
        let text = String::from_utf8_lossy(&log).trim_end_matches('\0').to_string();
        let (_, msg) = check(rc, "cuModuleLoadDataEx").unwrap_err();
        return Err((MAGE_MODULE_LOAD, format!("{msg}; JIT log: {text}")));
    }
    let mut funcs = [std::ptr::null_mut(); KERNELS.len()];
    for (f, name) in funcs.iter_mut().zip(KERNELS) {
        let cname = CString::new(name).unwrap();
        // SAFETY: module is loaded; out-pointer to the array slot.
        check(unsafe { (d.module_get_function)(f, module, cname.as_ptr()) }, &format!("cuModuleGetFunction({name})"))?;
    }
    Ok(Module { ctx, module, funcs })
}

/// The module of `device`, loaded on first use, with its primary context made current.
pub fn module(device: i32) -> Result<&'static Module, Error> {
    if device < 0 || device as usize >= MAX_DEVICES {
        return Err((MAGE_BAD_ARGUMENT, format!("device {device} is outside 0..{MAX_DEVICES}")));
    }
    let m = MODULES[device as usize].get_or_init(|| load_module(device)).as_ref().map_err(|e| e.clone())?;
    let d = driver()?;
    let mut cur: CUcontext = std::ptr::null_mut();
    // SAFETY: out-pointer to a local.
    unsafe {
        check((d.ctx_get_current)(&mut cur), "cuCtxGetCurrent")?;
        if cur != m.ctx {
            check((d.ctx_set_current)(m.ctx), "cuCtxSetCurrent")?;
        }
    }
    Ok(m)
}

/// One kernel launch. `args` are pointers to the kernel's parameters, in order.
pub fn launch(m: &Module, k: Kernel, g: Geometry, stream: CUstream, args: &mut [*mut c_void]) -> Result<(), Error> {
    let d = driver()?;
    // SAFETY: the function belongs to the loaded module; args match the kernel's parameter list
    // (each caller below passes exactly the kernel's parameters).
    let rc = unsafe {
        (d.launch_kernel)(m.funcs[k as usize], g.grid.0, g.grid.1, g.grid.2, g.block.0, g.block.1, g.block.2, 0,
                          stream, args.as_mut_ptr(), std::ptr::null_mut())
    };
    check(rc, &format!("cuLaunchKernel({})", KERNELS[k as usize]))
}

fn bad(msg: String) -> Error {
    (MAGE_BAD_ARGUMENT, msg)
}

macro_rules! args {
    ($($v:ident),*) => { [$(&mut $v as *mut _ as *mut c_void),*] };
}

// ------------------------------------------------------------------ the launches, in Rust
/// `version`: 0 the scalar kernel, 1 the tiled one, 2 the tiled one built for two blocks per SM.
pub fn matmul(dev: i32, s: CUstream, a: DevPtr, b: DevPtr, c: DevPtr, m: i64, k: i64, n: i64, version: i32) -> Result<(), Error> {
    let (mut m, mut k, mut n) = (launch::dim("M", m).map_err(bad)?, launch::dim("K", k).map_err(bad)?, launch::dim("N", n).map_err(bad)?);
    let (ma, kb, mc) = (m as u64 * k as u64, k as u64 * n as u64, m as u64 * n as u64);
    for (name, p, e) in [("A", a, ma), ("B", b, kb), ("C", c, mc)] {
        launch::ptr(name, p, e).map_err(bad)?;
    }
    if mc == 0 {
        return Ok(());
    }
    let kernel = match version {
        0 => Kernel::MatmulScalar,
        1 => Kernel::Matmul,
        2 => Kernel::Matmul2Cta,
        v => return Err(bad(format!("matmul has versions 0 (scalar), 1 (tiled), 2 (tiled, 2 blocks/SM), not {v}"))),
    };
    let g = launch::matmul(m, n, version != 0).map_err(bad)?;
    let md = module(dev)?;
    let (mut a, mut b, mut c) = (a, b, c);
    launch(md, kernel, g, s, &mut args!(a, b, c, m, k, n))
}

pub fn bias_gelu(dev: i32, s: CUstream, x: DevPtr, b: DevPtr, y: DevPtr, r: i64, c: i64) -> Result<(), Error> {
    let (mut r, mut c) = (launch::dim("R", r).map_err(bad)?, launch::dim("C", c).map_err(bad)?);
    let e = r as u64 * c as u64;
    for (name, p, n) in [("x", x, e), ("b", b, c as u64), ("y", y, e)] {
        launch::ptr(name, p, n).map_err(bad)?;
    }
    if e == 0 {
        return Ok(());
    }
    let g = launch::bias_gelu(r, c).map_err(bad)?;
    let md = module(dev)?;
    let (mut x, mut b, mut y) = (x, b, y);
    launch(md, Kernel::BiasGelu, g, s, &mut args!(x, b, y, r, c))
}

pub fn layernorm(dev: i32, s: CUstream, x: DevPtr, gamma: DevPtr, beta: DevPtr, y: DevPtr, r: i64, c: i64, eps: f32) -> Result<(), Error> {
    let (mut r, mut c) = (launch::dim("R", r).map_err(bad)?, launch::dim("C", c).map_err(bad)?);
    let e = r as u64 * c as u64;
    for (name, p, n) in [("x", x, e), ("gamma", gamma, c as u64), ("beta", beta, c as u64), ("y", y, e)] {
        launch::ptr(name, p, n).map_err(bad)?;
    }
    if r > 0 && c == 0 {
        return Err(bad("C = 0: a row needs at least one column to normalise over".into()));
    }
    if e == 0 {
        return Ok(());
    }
    let g = launch::layernorm(r).map_err(bad)?;
    let md = module(dev)?;
    let (mut x, mut gamma, mut beta, mut y, mut eps) = (x, gamma, beta, y, eps);
    launch(md, Kernel::Layernorm, g, s, &mut args!(x, gamma, beta, y, r, c, eps))
}

/// `version`: 0 the 64 x 64 tile of 512 threads, 1 the 64 x 32 tile of 256 threads.
pub fn triangle(dev: i32, s: CUstream, a: DevPtr, b: DevPtr, o: DevPtr, n: i64, c: i64, version: i32) -> Result<(), Error> {
    let (mut n, mut c) = (launch::dim("N", n).map_err(bad)?, launch::dim("C", c).map_err(bad)?);
    let e = n as u64 * n as u64 * c as u64;
    for (name, p) in [("A", a), ("B", b), ("O", o)] {
        launch::ptr(name, p, e).map_err(bad)?;
    }
    if e == 0 {
        return Ok(());
    }
    if !(0..=1).contains(&version) {
        return Err(bad(format!("triangle has versions 0 (512 threads) and 1 (256 threads), not {version}")));
    }
    let g = launch::triangle(n, c, version == 0).map_err(bad)?;
    let md = module(dev)?;
    let (mut a, mut b, mut o) = (a, b, o);
    let kernel = if version == 0 { Kernel::Triangle } else { Kernel::Triangle256 };
    launch(md, kernel, g, s, &mut args!(a, b, o, n, c))
}

/// Pointers and sizes of one neighbor_agg call; `plan` 0 means no row is split.
pub struct NeighborArgs {
    pub rowptr: DevPtr, pub col: DevPtr, pub w: DevPtr, pub x: DevPtr, pub y: DevPtr,
    pub plan: DevPtr, pub ws: DevPtr, pub flags: DevPtr,
    pub n: i64, pub n_src: i64, pub e: i64, pub f: i64, pub tasks: i64, pub parts: i64,
}

pub fn neighbor_agg(dev: i32, s: CUstream, a: &NeighborArgs) -> Result<(), Error> {
    let mut n = launch::dim("n", a.n).map_err(bad)?;
    let mut n_src = launch::dim("n_src", a.n_src).map_err(bad)?;
    let mut e = launch::dim("E", a.e).map_err(bad)?;
    let mut f = launch::dim("F", a.f).map_err(bad)?;
    let mut tasks = launch::dim("tasks", a.tasks).map_err(bad)?;
    let mut parts = launch::dim("parts", a.parts).map_err(bad)?;
    let out = n as u64 * f as u64;
    for (name, p, k) in [("rowptr", a.rowptr, n as u64 + 1), ("col", a.col, e as u64), ("w", a.w, e as u64),
                         ("x", a.x, if e > 0 { n_src as u64 * f as u64 } else { 0 }), ("y", a.y, out),
                         ("ws", a.ws, parts as u64 * f as u64), ("flags", a.flags, parts as u64)] {
        launch::ptr(name, p, k).map_err(bad)?;
    }
    if a.plan == 0 && tasks != n {
        return Err(bad(format!("without a plan there is one task per row: tasks = {tasks}, n = {n}")));
    }
    if out == 0 {
        return Ok(());
    }
    let g = launch::neighbor_agg(tasks as u64).map_err(bad)?;
    let md = module(dev)?;
    let (mut rowptr, mut col, mut w, mut x, mut y) = (a.rowptr, a.col, a.w, a.x, a.y);
    let (mut plan, mut ws, mut flags) = (a.plan, a.ws, a.flags);
    launch(md, Kernel::NeighborAgg, g, s,
           &mut args!(rowptr, col, w, x, y, plan, ws, flags, n, n_src, e, f, tasks, parts))
}

// ------------------------------------------------------------------------- the C ABI
thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

fn status(r: Result<(), Error>) -> c_int {
    match r {
        Ok(()) => 0,
        Err((code, msg)) => {
            LAST.with(|l| *l.borrow_mut() = CString::new(msg.replace('\0', " ")).unwrap_or_default());
            code
        }
    }
}

fn stream(s: u64) -> CUstream {
    s as usize as CUstream
}

/// The message of the last failed call on this thread ("" if none).
#[no_mangle]
pub extern "C" fn mage_rust_last_error() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}

/// The name of an error code: a CUDA_ERROR_* name, or one of this library's MAGE_* names.
#[no_mangle]
pub extern "C" fn mage_rust_error_name(code: c_int) -> *const c_char {
    let name: &'static CStr = match code {
        0 => c"SUCCESS",
        MAGE_BAD_ARGUMENT => c"MAGE_BAD_ARGUMENT",
        MAGE_NO_DRIVER => c"MAGE_NO_DRIVER",
        MAGE_MODULE_LOAD => c"MAGE_MODULE_LOAD",
        _ => {
            if let Ok(d) = driver() {
                let mut p: *const c_char = std::ptr::null();
                // SAFETY: cuGetErrorName writes a pointer to a static string.
                unsafe { (d.get_error_name)(code, &mut p) };
                if !p.is_null() {
                    return p;
                }
            }
            c"UNKNOWN_ERROR"
        }
    };
    name.as_ptr()
}

/// The embedded PTX (NUL-terminated), for launch paths that load it themselves.
#[no_mangle]
pub extern "C" fn mage_rust_ptx() -> *const c_char {
    PTX.as_ptr() as *const c_char
}

#[no_mangle]
pub extern "C" fn mage_rust_neighbor_split() -> i64 {
    NEIGHBOR_SPLIT as i64
}

/// The launch geometry of kernel `kernel` (index into KERNELS) for sizes (a, b): matmul and
/// matmul_scalar (M, N), bias_gelu (R, C), layernorm (R, -), triangle (N, C), neighbor_agg
/// (tasks, -). Writes grid x, y, z, block x, y, z to `out`; for launch paths outside this crate.
///
/// # Safety
/// `out` holds 6 u32.
#[no_mangle]
pub unsafe extern "C" fn mage_rust_geometry(kernel: c_int, a: i64, b: i64, out: *mut u32) -> c_int {
    status((|| {
        let (a, b) = (launch::dim("size", a).map_err(bad)?, launch::dim("size", b).map_err(bad)?);
        let g = match kernel {
            0 => launch::matmul(a, b, false),
            1 => launch::matmul(a, b, true),
            2 => launch::bias_gelu(a, b),
            3 => launch::layernorm(a),
            4 => launch::triangle(a, b, true),
            5 => launch::neighbor_agg(a as u64),
            6 => launch::matmul(a, b, true),
            7 => launch::triangle(a, b, false),
            _ => Err(format!("no kernel number {kernel}")),
        }.map_err(bad)?;
        if out.is_null() {
            return Err(bad("geometry: out is null".into()));
        }
        let v = [g.grid.0, g.grid.1, g.grid.2, g.block.0, g.block.1, g.block.2];
        std::ptr::copy_nonoverlapping(v.as_ptr(), out, 6);
        Ok(())
    })())
}

/// Loads the module on `device` now (otherwise the first launch does).
#[no_mangle]
pub extern "C" fn mage_rust_init(device: c_int) -> c_int {
    status(module(device).map(|_| ()))
}

#[no_mangle]
pub extern "C" fn mage_rust_matmul(device: c_int, s: u64, a: u64, b: u64, c: u64, m: i64, k: i64, n: i64, version: c_int) -> c_int {
    status(matmul(device, stream(s), a, b, c, m, k, n, version))
}

#[no_mangle]
pub extern "C" fn mage_rust_bias_gelu(device: c_int, s: u64, x: u64, b: u64, y: u64, r: i64, c: i64) -> c_int {
    status(bias_gelu(device, stream(s), x, b, y, r, c))
}

#[no_mangle]
pub extern "C" fn mage_rust_layernorm(device: c_int, s: u64, x: u64, g: u64, b: u64, y: u64, r: i64, c: i64, eps: f32) -> c_int {
    status(layernorm(device, stream(s), x, g, b, y, r, c, eps))
}

#[no_mangle]
pub extern "C" fn mage_rust_triangle(device: c_int, s: u64, a: u64, b: u64, o: u64, n: i64, c: i64, version: c_int) -> c_int {
    status(triangle(device, stream(s), a, b, o, n, c, version))
}

#[no_mangle]
pub extern "C" fn mage_rust_neighbor_agg(device: c_int, s: u64, rowptr: u64, col: u64, w: u64, x: u64, y: u64,
                                         plan: u64, ws: u64, flags: u64, n: i64, n_src: i64, e: i64, f: i64,
                                         tasks: i64, parts: i64) -> c_int {
    let a = NeighborArgs { rowptr, col, w, x, y, plan, ws, flags, n, n_src, e, f, tasks, parts };
    status(neighbor_agg(device, stream(s), &a))
}

/// Builds the neighbor_agg plan from a host copy of rowptr (n + 1 entries). Call with cap 0 to
/// learn `tasks` and `parts`; then with an `out` of cap >= tasks * 6 int32 (untouched when no row
/// is split, which `parts` = 0 says).
///
/// # Safety
/// `rowptr` holds n + 1 int32; `out` holds `cap` int32 (or is null with cap 0).
#[no_mangle]
pub unsafe extern "C" fn mage_rust_neighbor_plan(rowptr: *const i32, n: i64, split: i64, out: *mut i32, cap: i64,
                                                 tasks: *mut i64, parts: *mut i64) -> c_int {
    status((|| {
        if rowptr.is_null() || n < 0 || split <= 0 || tasks.is_null() || parts.is_null() {
            return Err(bad("neighbor_plan: null rowptr/tasks/parts, negative n or split <= 0".into()));
        }
        let rp = std::slice::from_raw_parts(rowptr, n as usize + 1);
        let p = plan::build(rp, split as usize).map_err(bad)?;
        *tasks = p.tasks as i64;
        *parts = p.parts as i64;
        if cap > 0 && !p.entries.is_empty() {
            if out.is_null() || (cap as usize) < p.entries.len() {
                return Err(bad(format!("neighbor_plan: out holds {cap} int32, the plan needs {}", p.entries.len())));
            }
            std::ptr::copy_nonoverlapping(p.entries.as_ptr(), out, p.entries.len());
        }
        Ok(())
    })())
}

/// A deliberately invalid launch (a block of 2048 threads, over the limit of 1024), so tests can
/// see a real CUDA error come back as its name without corrupting the context.
#[no_mangle]
pub extern "C" fn mage_rust_bad_launch(device: c_int, s: u64) -> c_int {
    status((|| {
        let md = module(device)?;
        let g = Geometry { grid: (1, 1, 1), block: (2048, 1, 1) };
        let (mut x, mut b, mut y, mut r, mut c) = (0u64, 0u64, 0u64, 0u32, 0u32);
        launch(md, Kernel::BiasGelu, g, stream(s), &mut args!(x, b, y, r, c))
    })())
}

// --------------------------------------------------------- device math, tested on the host
#[cfg(test)]
#[path = "../../device/src/math.rs"]
mod device_math;

#[cfg(test)]
mod math_tests;
