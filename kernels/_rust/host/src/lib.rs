//! mage's Rust launch path: a C ABI (for Python's ctypes) over the CUDA driver API that launches
//! the embedded PTX of `../device` in the device's primary context, on the caller's stream, so
//! PyTorch's tensors are used in place. One generic entry, `mage_rust_launch`, launches any kernel
//! by its table index with its arguments packed one u64 each; the checks and geometry of each kernel
//! are generated from its op's table (`kernels/<op>/rust_table.py`). Functions return 0 or an error code; the message of the
//! last error on this thread is `mage_rust_last_error()`, the code's name `mage_rust_error_name`.
pub mod driver;
pub mod launch;
pub mod plan;
pub mod plan_json;

use driver::{CUcontext, CUfunction, CUmodule, CUstream, check, driver};
use launch::Geometry;
use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::OnceLock;

/// The PTX module built by build.sh, embedded so the library cannot be paired with stale PTX.
pub static PTX: &str = concat!(include_str!("../../build/mage_kernels.ptx"), "\0");

// Codes of our own, above every CUresult.
pub const MAGE_BAD_ARGUMENT: i32 = 100_001;
pub const MAGE_NO_DRIVER: i32 = 100_002;
pub const MAGE_MODULE_LOAD: i32 = 100_003;

/// Edges per neighbor_agg task: longer rows are cut into chunks of this many edges.
pub const NEIGHBOR_SPLIT: usize = 128;

/// One PTX kernel, from its op's table (`kernels/<op>/rust_table.py`, through `build/gen`).
pub struct KernelInfo {
    pub name: &'static str,
    pub op: &'static str,
    /// (name, type) of each parameter, in order
    pub params: &'static [(&'static str, &'static str)],
    /// the largest block it may be launched with (the PTX's .maxntid)
    pub threads: u32,
    pub blocks_per_sm: u32,
    /// checks the packed arguments and gives the launch geometry (None: nothing to do)
    pub prepare: fn(&[u64]) -> launch::Checked<Option<Geometry>>,
}

include!("../../build/gen/host_table.rs");

/// The most parameters a kernel has (the packed argument buffer is copied to the stack).
pub const MAX_PARAMS: usize = 16;
const _: () = {
    let mut i = 0;
    while i < KERNELS.len() {
        assert!(KERNELS[i].params.len() <= MAX_PARAMS);
        i += 1;
    }
};

/// The table index of kernel `name`.
pub fn kernel_index(name: &str) -> Result<usize, Error> {
    KERNELS.iter().position(|k| k.name == name).ok_or_else(|| bad(format!("no kernel named {name:?}")))
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
    let rc = unsafe {
        (d.module_load_data_ex)(&mut module, PTX.as_ptr() as *const c_void, 2, opts.as_mut_ptr(), vals.as_mut_ptr())
    };
    if rc != 0 {
        let text = String::from_utf8_lossy(&log).trim_end_matches('\0').to_string();
        let (_, msg) = check(rc, "cuModuleLoadDataEx").unwrap_err();
        return Err((MAGE_MODULE_LOAD, format!("{msg}; JIT log: {text}")));
    }
    let mut funcs = [std::ptr::null_mut(); KERNELS.len()];
    for (f, name) in funcs.iter_mut().zip(KERNELS.iter().map(|k| k.name)) {
        let cname = CString::new(name).map_err(|_| bad(format!("kernel name {name:?} holds a NUL")))?;
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
#[allow(clippy::not_unsafe_ptr_arg_deref)] // `stream` is an opaque driver handle, passed on, never read here
pub fn launch(m: &Module, k: usize, g: Geometry, stream: CUstream, args: &mut [*mut c_void]) -> Result<(), Error> {
    let d = driver()?;
    // SAFETY: the function belongs to the loaded module; `args` holds one pointer per parameter of
    // kernel k, each to a value of at least the parameter's size (see `launch_packed`).
    let rc = unsafe {
        (d.launch_kernel)(
            m.funcs[k],
            g.grid.0,
            g.grid.1,
            g.grid.2,
            g.block.0,
            g.block.1,
            g.block.2,
            0,
            stream,
            args.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    check(rc, &format!("cuLaunchKernel({})", KERNELS[k].name))
}

fn bad(msg: String) -> Error {
    (MAGE_BAD_ARGUMENT, msg)
}

/// Checks kernel `k`'s packed arguments (one u64 a parameter: addresses, sizes as i64, f32 as its
/// bits) against its table and gives its launch geometry; None when there is nothing to do.
pub fn prepare(k: usize, args: &[u64]) -> Result<Option<Geometry>, Error> {
    let info = KERNELS.get(k).ok_or_else(|| bad(format!("no kernel number {k}")))?;
    if args.len() != info.params.len() {
        return Err(bad(format!("{} takes {} arguments, got {}", info.name, info.params.len(), args.len())));
    }
    let g = (info.prepare)(args).map_err(bad)?;
    if let Some(g) = g {
        if g.threads_per_block() > info.threads {
            return Err(bad(format!(
                "{}: a block of {} threads exceeds its bound of {}",
                info.name,
                g.threads_per_block(),
                info.threads
            )));
        }
    }
    Ok(g)
}

/// Launches kernel `k` on `stream` of `device` with its packed arguments (see `prepare`). Each
/// parameter is passed as a pointer to its u64 slot: the driver reads the parameter's own size from
/// the start of the slot, which on a little-endian machine is the value (a u32 size or an f32's bits).
#[allow(clippy::not_unsafe_ptr_arg_deref)] // as `launch`: the stream is a handle
pub fn launch_packed(device: i32, stream: CUstream, k: usize, args: &[u64]) -> Result<(), Error> {
    let Some(g) = prepare(k, args)? else {
        return Ok(());
    };
    let md = module(device)?;
    let mut slots = [0u64; MAX_PARAMS];
    slots[..args.len()].copy_from_slice(args);
    let mut ptrs = [std::ptr::null_mut::<c_void>(); MAX_PARAMS];
    for (p, v) in ptrs.iter_mut().zip(slots.iter_mut()) {
        *p = v as *mut u64 as *mut c_void;
    }
    launch(md, k, g, stream, &mut ptrs[..args.len()])
}

const _: () = assert!(cfg!(target_endian = "little"), "packed arguments rely on little-endian slots");

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

/// How many kernels the library has; `mage_rust_kernel_name(i)` names kernel i.
#[no_mangle]
pub extern "C" fn mage_rust_kernel_count() -> c_int {
    KERNELS.len() as c_int
}

/// The name of kernel `k` (NUL-terminated, static), or null when there is none.
#[no_mangle]
pub extern "C" fn mage_rust_kernel_name(k: c_int) -> *const c_char {
    static NAMES: OnceLock<Vec<CString>> = OnceLock::new();
    let names = NAMES.get_or_init(|| KERNELS.iter().map(|k| CString::new(k.name).unwrap_or_default()).collect());
    usize::try_from(k).ok().and_then(|k| names.get(k)).map_or(std::ptr::null(), |n| n.as_ptr())
}

/// The packed arguments of a C call as a slice.
///
/// # Safety
/// `args` holds `n` u64 (or is anything with n = 0).
unsafe fn packed<'a>(args: *const u64, n: c_int) -> Result<&'a [u64], Error> {
    match usize::try_from(n) {
        Ok(0) => Ok(&[]),
        Ok(n) if !args.is_null() && n <= MAX_PARAMS => Ok(std::slice::from_raw_parts(args, n)),
        _ => Err(bad(format!("{n} packed arguments at {args:?}"))),
    }
}

/// The launch geometry of kernel `k` for its packed arguments (as `mage_rust_launch` takes them),
/// after the same checks: grid x, y, z, block x, y, z into `out`, all 0 when there is nothing to launch.
///
/// # Safety
/// `args` holds `n` u64; `out` holds 6 u32.
#[no_mangle]
pub unsafe extern "C" fn mage_rust_geometry(k: c_int, args: *const u64, n: c_int, out: *mut u32) -> c_int {
    status((|| {
        if out.is_null() {
            return Err(bad("geometry: out is null".into()));
        }
        let k = usize::try_from(k).map_err(|_| bad(format!("no kernel number {k}")))?;
        let v = match prepare(k, packed(args, n)?)? {
            Some(g) => [g.grid.0, g.grid.1, g.grid.2, g.block.0, g.block.1, g.block.2],
            None => [0; 6],
        };
        std::ptr::copy_nonoverlapping(v.as_ptr(), out, 6);
        Ok(())
    })())
}

/// Loads the module on `device` now (otherwise the first launch does).
#[no_mangle]
pub extern "C" fn mage_rust_init(device: c_int) -> c_int {
    status(module(device).map(|_| ()))
}

/// Launches kernel `k` on stream `s` of `device`: `args` are its `n` parameters packed one u64 each
/// (device addresses; sizes as i64, checked here; f32 as its bits). Nothing runs when the checks fail.
///
/// # Safety
/// `args` holds `n` u64; the addresses point to device memory of the lengths the kernel's table says.
#[no_mangle]
pub unsafe extern "C" fn mage_rust_launch(device: c_int, s: u64, k: c_int, args: *const u64, n: c_int) -> c_int {
    status((|| {
        let k = usize::try_from(k).map_err(|_| bad(format!("no kernel number {k}")))?;
        launch_packed(device, stream(s), k, packed(args, n)?)
    })())
}

/// Builds the neighbor_agg plan from a host copy of rowptr (n + 1 entries). Call with cap 0 to
/// learn `tasks` and `parts`; then with an `out` of cap >= tasks * 6 int32 (untouched when no row
/// is split, which `parts` = 0 says).
///
/// # Safety
/// `rowptr` holds n + 1 int32; `out` holds `cap` int32 (or is null with cap 0).
#[no_mangle]
pub unsafe extern "C" fn mage_rust_neighbor_plan(
    rowptr: *const i32,
    n: i64,
    split: i64,
    out: *mut i32,
    cap: i64,
    tasks: *mut i64,
    parts: *mut i64,
) -> c_int {
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
        // the driver refuses the block before it reads a parameter; zeros stand in for them
        let mut slots = [0u64; MAX_PARAMS];
        let mut ptrs: Vec<*mut c_void> = slots.iter_mut().map(|v| v as *mut u64 as *mut c_void).collect();
        launch(md, 0, g, stream(s), &mut ptrs[..KERNELS[0].params.len()])
    })())
}

// --------------------------------------------------------- device math, tested on the host
#[cfg(test)]
#[path = "../../device/math.rs"]
mod device_math;

#[cfg(test)]
mod math_tests;
