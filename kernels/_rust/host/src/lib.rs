//! mage's Rust launch path: a C ABI (for Python's ctypes) over the CUDA driver API that launches
//! the embedded PTX of `../device` in the device's primary context, on the caller's stream, so
//! PyTorch's tensors are used in place. One generic entry, `mage_rust_launch`, launches any kernel
//! by its table index with its arguments packed one u64 each; the checks and geometry of each kernel
//! are generated from its op's table (`kernels/<op>/rust_table.py`). Functions return 0 or an error code; the message of the
//! last error on this thread is `mage_rust_last_error()`, the code's name `mage_rust_error_name`.
pub mod block_run;
pub mod blocks;
pub mod cabi;
pub mod cublas;
pub mod driver;
pub mod gemm;
pub mod launch;
pub mod plan;
pub mod plan_json;

use driver::{CUcontext, CUfunction, CUmodule, CUstream, check, driver};
use launch::Geometry;
use std::ffi::{CString, c_int, c_void};
use std::sync::OnceLock;

/// The PTX module built by build.sh, embedded so the library cannot be paired with stale PTX.
pub static PTX: &str = concat!(include_str!("../../build/mage_kernels.ptx"), "\0");

// Codes of our own, above every CUresult.
pub const MAGE_BAD_ARGUMENT: i32 = 100_001;
pub const MAGE_NO_DRIVER: i32 = 100_002;
pub const MAGE_MODULE_LOAD: i32 = 100_003;
/// cuBLAS (the model blocks' GEMMs) could not be loaded, or a cuBLAS call failed.
pub const MAGE_NO_CUBLAS: i32 = 100_004;
pub const MAGE_CUBLAS_FAILED: i32 = 100_005;

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

// --------------------------------------------------------- device math, tested on the host
#[cfg(test)]
#[path = "../../device/math.rs"]
mod device_math;

#[cfg(test)]
mod math_tests;
