//! The CUDA driver API functions this crate uses, loaded from libcuda.so.1 with dlopen (no crates
//! are reachable to provide bindings). Every call goes through `check`, which turns a CUresult into
//! `Err((code, "CUDA_ERROR_NAME: what failed"))`.
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

pub type CUresult = c_int;
pub type CUdevice = c_int;
pub type CUcontext = *mut c_void;
pub type CUmodule = *mut c_void;
pub type CUfunction = *mut c_void;
pub type CUstream = *mut c_void;
pub type CUevent = *mut c_void;
pub type CUgraph = *mut c_void;
pub type CUgraphExec = *mut c_void;
pub type DevPtr = u64;

#[link(name = "dl")]
extern "C" {
    fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlerror() -> *const c_char;
}
const RTLD_NOW: c_int = 2;

macro_rules! driver_api {
    ($($field:ident = $sym:literal : fn($($arg:ty),*);)*) => {
        /// Function pointers into libcuda, resolved once.
        #[allow(non_snake_case)]
        pub struct Driver { $(pub $field: unsafe extern "C" fn($($arg),*) -> CUresult,)* }
        impl Driver {
            fn load() -> Result<Driver, String> {
                // SAFETY: dlopen/dlsym with NUL-terminated names; each symbol is cast to the
                // signature the CUDA driver API documents for it.
                unsafe {
                    let h = dlopen(c"libcuda.so.1".as_ptr(), RTLD_NOW);
                    if h.is_null() {
                        let why = CStr::from_ptr(dlerror()).to_string_lossy().into_owned();
                        return Err(format!("cannot load the CUDA driver (libcuda.so.1): {why}"));
                    }
                    Ok(Driver { $($field: {
                        let p = dlsym(h, concat!($sym, "\0").as_ptr() as *const c_char);
                        if p.is_null() { return Err(format!("libcuda.so.1 has no {}", $sym)); }
                        std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> CUresult>(p)
                    },)* })
                }
            }
        }
    };
}

driver_api! {
    init = "cuInit": fn(c_uint);
    device_get = "cuDeviceGet": fn(*mut CUdevice, c_int);
    primary_ctx_retain = "cuDevicePrimaryCtxRetain": fn(*mut CUcontext, CUdevice);
    ctx_get_current = "cuCtxGetCurrent": fn(*mut CUcontext);
    ctx_set_current = "cuCtxSetCurrent": fn(CUcontext);
    ctx_synchronize = "cuCtxSynchronize": fn();
    module_load_data_ex = "cuModuleLoadDataEx": fn(*mut CUmodule, *const c_void, c_uint, *mut c_int, *mut *mut c_void);
    module_get_function = "cuModuleGetFunction": fn(*mut CUfunction, CUmodule, *const c_char);
    launch_kernel = "cuLaunchKernel": fn(CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CUstream, *mut *mut c_void, *mut *mut c_void);
    get_error_name = "cuGetErrorName": fn(CUresult, *mut *const c_char);
    get_error_string = "cuGetErrorString": fn(CUresult, *mut *const c_char);
    // used by the native benchmark only
    mem_alloc = "cuMemAlloc_v2": fn(*mut DevPtr, usize);
    mem_free = "cuMemFree_v2": fn(DevPtr);
    memcpy_htod = "cuMemcpyHtoD_v2": fn(DevPtr, *const c_void, usize);
    memcpy_dtoh = "cuMemcpyDtoH_v2": fn(*mut c_void, DevPtr, usize);
    memset_d32 = "cuMemsetD32_v2": fn(DevPtr, c_uint, usize);
    // the model blocks' residual copy and ones vector (stream-ordered, so a graph can capture them)
    memcpy_dtod_async = "cuMemcpyDtoDAsync_v2": fn(DevPtr, DevPtr, usize, CUstream);
    memset_d32_async = "cuMemsetD32Async": fn(DevPtr, c_uint, usize, CUstream);
    stream_create = "cuStreamCreate": fn(*mut CUstream, c_uint);
    stream_synchronize = "cuStreamSynchronize": fn(CUstream);
    event_create = "cuEventCreate": fn(*mut CUevent, c_uint);
    event_record = "cuEventRecord": fn(CUevent, CUstream);
    event_synchronize = "cuEventSynchronize": fn(CUevent);
    event_elapsed_time = "cuEventElapsedTime": fn(*mut f32, CUevent, CUevent);
    stream_begin_capture = "cuStreamBeginCapture_v2": fn(CUstream, c_int);
    stream_end_capture = "cuStreamEndCapture": fn(CUstream, *mut CUgraph);
    graph_instantiate = "cuGraphInstantiateWithFlags": fn(*mut CUgraphExec, CUgraph, u64);
    graph_launch = "cuGraphLaunch": fn(CUgraphExec, CUstream);
}

pub const CUDA_SUCCESS: CUresult = 0;

static DRIVER: OnceLock<Result<Driver, String>> = OnceLock::new();

/// The driver, loaded and initialised on first use.
pub fn driver() -> Result<&'static Driver, (i32, String)> {
    let d = DRIVER.get_or_init(|| {
        let d = Driver::load()?;
        // SAFETY: cuInit(0) has no preconditions.
        let rc = unsafe { (d.init)(0) };
        if rc != CUDA_SUCCESS {
            return Err(format!("cuInit failed: {}", error_name_with(&d, rc)));
        }
        Ok(d)
    });
    d.as_ref().map_err(|e| (crate::MAGE_NO_DRIVER, e.clone()))
}

fn error_name_with(d: &Driver, rc: CUresult) -> String {
    let mut p: *const c_char = std::ptr::null();
    // SAFETY: cuGetErrorName writes a pointer to a static string (or leaves it null).
    unsafe { (d.get_error_name)(rc, &mut p) };
    if p.is_null() {
        format!("CUDA error {rc}")
    } else {
        // SAFETY: a static NUL-terminated string owned by the driver.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// "CUDA_ERROR_ILLEGAL_ADDRESS" for a CUresult (a static string from cuGetErrorName).
pub fn error_name(rc: CUresult) -> String {
    match DRIVER.get() {
        Some(Ok(d)) => error_name_with(d, rc),
        _ => format!("CUDA error {rc}"),
    }
}

/// Turns a CUresult into a Result carrying the error's name and what was being done.
pub fn check(rc: CUresult, what: &str) -> Result<(), (i32, String)> {
    if rc == CUDA_SUCCESS {
        Ok(())
    } else {
        let mut detail: *const c_char = std::ptr::null();
        if let Some(Ok(d)) = DRIVER.get() {
            // SAFETY: as cuGetErrorName.
            unsafe { (d.get_error_string)(rc, &mut detail) };
        }
        let detail = if detail.is_null() {
            String::new()
        } else {
            // SAFETY: a static string owned by the driver.
            format!(" ({})", unsafe { CStr::from_ptr(detail) }.to_string_lossy())
        };
        Err((rc, format!("{}: {what}{detail}", error_name(rc))))
    }
}
