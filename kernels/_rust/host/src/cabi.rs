//! The C ABI that Python's ctypes calls: every function returns 0 or an error code, and the message
//! of the last error on this thread is `mage_rust_last_error()`. Each function is a thin shell over
//! the crate's Rust functions.
use crate::driver::CUstream;
use crate::launch::Geometry;
use crate::*;
use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_int, c_void};

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
        MAGE_NO_CUBLAS => c"MAGE_NO_CUBLAS",
        MAGE_CUBLAS_FAILED => c"MAGE_CUBLAS_FAILED",
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

// ------------------------------------------------------------------------------ the model blocks
/// The most packed arguments a block takes (mp_block's 23).
const MAX_BLOCK_PARAMS: usize = 32;

/// # Safety
/// `name` is NUL-terminated or null.
unsafe fn block_of(name: *const c_char) -> Result<usize, Error> {
    if name.is_null() {
        return Err(bad("block: the name is null".into()));
    }
    blocks::block_index(&CStr::from_ptr(name).to_string_lossy())
}

/// # Safety
/// `args` holds `n` u64.
unsafe fn block_packed<'a>(args: *const u64, n: c_int) -> Result<&'a [u64], Error> {
    match usize::try_from(n) {
        Ok(0) => Ok(&[]),
        Ok(n) if !args.is_null() && n <= MAX_BLOCK_PARAMS => Ok(std::slice::from_raw_parts(args, n)),
        _ => Err(bad(format!("{n} packed block arguments at {args:?}"))),
    }
}

/// Checks block `name`'s packed arguments (as `mage_rust_block_run` takes them) without a GPU.
///
/// # Safety
/// `name` is NUL-terminated; `args` holds `n` u64.
#[no_mangle]
pub unsafe extern "C" fn mage_rust_block_check(name: *const c_char, args: *const u64, n: c_int) -> c_int {
    status((|| blocks::check_args(block_of(name)?, block_packed(args, n)?).map(|_| ()))())
}

/// Floats of scratch block `name` needs at these sizes (rows T or n, width d or F, hidden H), and the
/// kernels it launches per call with at least one row, into `out` [2].
///
/// # Safety
/// `name` is NUL-terminated; `out` holds 2 u64.
#[no_mangle]
pub unsafe extern "C" fn mage_rust_block_info(
    name: *const c_char,
    rows: u64,
    width: u64,
    hidden: u64,
    out: *mut u64,
) -> c_int {
    status((|| {
        let b = block_of(name)?;
        if out.is_null() {
            return Err(bad("block_info: out is null".into()));
        }
        *out = blocks::scratch_floats(b, rows, width, hidden);
        *out.add(1) = blocks::launches(b) as u64;
        Ok(())
    })())
}

/// Loads cuBLAS for block `name` (needs no GPU): 0, or MAGE_NO_CUBLAS with a message naming the block,
/// what was tried and MAGE_CUBLAS. The loaded file's path into `path` (`cap` bytes) when given.
///
/// # Safety
/// `name` is NUL-terminated; `path` holds `cap` bytes (or is null).
#[no_mangle]
pub unsafe extern "C" fn mage_rust_block_cublas(name: *const c_char, path: *mut c_char, cap: usize) -> c_int {
    status((|| {
        let b = block_of(name)?;
        let c = cublas::cublas(blocks::name(b))?;
        if !path.is_null() && cap > 0 {
            let bytes = c.path.as_bytes();
            let k = bytes.len().min(cap - 1);
            std::ptr::copy_nonoverlapping(bytes.as_ptr() as *const c_char, path, k);
            *path.add(k) = 0;
        }
        Ok(())
    })())
}

/// Runs block `name` on stream `s` of `device`: its kernels and cuBLAS GEMMs in order (blocks.rs).
/// Nothing runs when the checks fail.
///
/// # Safety
/// `args` holds `n` u64; the addresses point to device memory of the lengths the block's sizes say.
#[no_mangle]
pub unsafe extern "C" fn mage_rust_block_run(
    name: *const c_char,
    device: c_int,
    s: u64,
    args: *const u64,
    n: c_int,
) -> c_int {
    status((|| blocks::run(block_of(name)?, device, stream(s), block_packed(args, n)?))())
}
