//! cuBLAS, loaded at run time with dlopen as `driver` loads libcuda: the model blocks' GEMMs. Which
//! library: `MAGE_CUBLAS` (a path to libcublas.so.N, or the folder holding it) when set, else the
//! sonames the CUDA 12 and 13 toolkits ship, which the dynamic loader finds on its path or already
//! loaded in the process (PyTorch's CUDA wheels load pip's nvidia-cublas before any block runs).
//! One handle per device, made in its primary context, with a workspace of its own so a call can be
//! captured in a CUDA graph (cuBLAS would otherwise allocate during capture). FP32 GEMMs are
//! cublasSgemm; bf16 ones cublasGemmEx with bf16 A, B and C and CUBLAS_COMPUTE_32F (FP32 products and
//! sums, C rounded to bf16 once): the one call that takes bf16 operands on the handle the FP32 path
//! already has (cublasLt would need its own handle, descriptors and heuristics for the same kernels).
use crate::driver::{CUstream, DevPtr, check, driver};
use crate::{Error, MAGE_NO_CUBLAS};
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::{Mutex, OnceLock};

pub type Handle = *mut c_void;
type Status = c_int;

extern "C" {
    fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlerror() -> *const c_char;
}
const RTLD_NOW: c_int = 2;
const RTLD_GLOBAL: c_int = 0x100;

/// The sonames tried when MAGE_CUBLAS is not set, newest API first that the GEMM calls exist in.
pub const SONAMES: [&str; 3] = ["libcublas.so.12", "libcublas.so.13", "libcublas.so"];
pub const OP_N: c_int = 0;
pub const OP_T: c_int = 1;
/// cudaDataType CUDA_R_16BF, cublasComputeType_t CUBLAS_COMPUTE_32F, cublasGemmAlgo_t CUBLAS_GEMM_DEFAULT
/// (library_types.h, cublas_api.h).
pub const CUDA_R_16BF: c_int = 14;
pub const COMPUTE_32F: c_int = 68;
pub const GEMM_DEFAULT: c_int = -1;
/// 32 MiB: what NVIDIA recommends for Hopper's cuBLAS workspace.
const WORKSPACE: usize = 32 << 20;

#[allow(clippy::type_complexity)]
pub struct Cublas {
    /// which file was loaded (for messages)
    pub path: String,
    create: unsafe extern "C" fn(*mut Handle) -> Status,
    set_stream: unsafe extern "C" fn(Handle, CUstream) -> Status,
    set_math_mode: unsafe extern "C" fn(Handle, c_int) -> Status,
    set_workspace: unsafe extern "C" fn(Handle, *mut c_void, usize) -> Status,
    pub(crate) sgemm: unsafe extern "C" fn(
        Handle,
        c_int,
        c_int,
        c_int,
        c_int,
        c_int,
        *const f32,
        *const f32,
        c_int,
        *const f32,
        c_int,
        *const f32,
        *mut f32,
        c_int,
    ) -> Status,
    /// cublasGemmEx: transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc,
    /// computeType, algo
    pub(crate) gemm_ex: unsafe extern "C" fn(
        Handle,
        c_int,
        c_int,
        c_int,
        c_int,
        c_int,
        *const f32,
        *const c_void,
        c_int,
        c_int,
        *const c_void,
        c_int,
        c_int,
        *const f32,
        *mut c_void,
        c_int,
        c_int,
        c_int,
        c_int,
    ) -> Status,
    status_name: Option<unsafe extern "C" fn(Status) -> *const c_char>,
}
// SAFETY: function pointers into a library that stays loaded.
unsafe impl Send for Cublas {}
unsafe impl Sync for Cublas {}

fn last_dl_error() -> String {
    // SAFETY: dlerror returns a NUL-terminated string or null.
    let p = unsafe { dlerror() };
    if p.is_null() { "unknown reason".into() } else { unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned() }
}

/// The files to try, in order: MAGE_CUBLAS's (a file, or libcublas.so.12/13 in a folder), else SONAMES.
pub fn candidates(env: Option<&str>) -> Vec<String> {
    match env.filter(|e| !e.is_empty()) {
        Some(p) if std::path::Path::new(p).is_dir() => {
            SONAMES[..2].iter().map(|s| format!("{}/{s}", p.trim_end_matches('/'))).collect()
        }
        Some(p) => vec![p.to_string()],
        None => SONAMES.iter().map(|s| s.to_string()).collect(),
    }
}

unsafe fn open(path: &str) -> Result<*mut c_void, String> {
    let c = CString::new(path).map_err(|_| format!("{path:?} holds a NUL"))?;
    // libcublas needs libcublasLt of the same release: load it first from the same folder, globally,
    // so a file named by path finds it without that folder on the loader's path
    if let Some((dir, file)) = path.rsplit_once('/') {
        if let Some(ver) = file.strip_prefix("libcublas.so") {
            if let Ok(lt) = CString::new(format!("{dir}/libcublasLt.so{ver}")) {
                dlopen(lt.as_ptr(), RTLD_NOW | RTLD_GLOBAL);
            }
        }
    }
    let h = dlopen(c.as_ptr(), RTLD_NOW);
    if h.is_null() { Err(format!("{path}: {}", last_dl_error())) } else { Ok(h) }
}

unsafe fn sym<T>(h: *mut c_void, path: &str, name: &str) -> Result<T, String> {
    let c = CString::new(name).expect("symbol names hold no NUL");
    let p = dlsym(h, c.as_ptr());
    if p.is_null() {
        return Err(format!("{path} has no {name}"));
    }
    Ok(std::mem::transmute_copy::<*mut c_void, T>(&p))
}

fn load() -> Result<Cublas, String> {
    let env = std::env::var("MAGE_CUBLAS").ok();
    let mut tried = Vec::new();
    for path in candidates(env.as_deref()) {
        // SAFETY: dlopen/dlsym by NUL-terminated names; each symbol cast to the signature cuBLAS's
        // header declares for it.
        unsafe {
            let h = match open(&path) {
                Ok(h) => h,
                Err(e) => {
                    tried.push(e);
                    continue;
                }
            };
            let status_name = sym(h, &path, "cublasGetStatusName").ok();
            return Ok(Cublas {
                create: sym(h, &path, "cublasCreate_v2")?,
                set_stream: sym(h, &path, "cublasSetStream_v2")?,
                set_math_mode: sym(h, &path, "cublasSetMathMode")?,
                set_workspace: sym(h, &path, "cublasSetWorkspace_v2")?,
                sgemm: sym(h, &path, "cublasSgemm_v2")?,
                gemm_ex: sym(h, &path, "cublasGemmEx")?,
                status_name,
                path,
            });
        }
    }
    Err(format!(
        "cannot load cuBLAS (tried {}): set MAGE_CUBLAS to the path of libcublas.so.12 or its folder (pip's \
         nvidia-cublas-cu12 puts it in site-packages/nvidia/cublas/lib)",
        tried.join("; ")
    ))
}

static CUBLAS: OnceLock<Cublas> = OnceLock::new();

/// cuBLAS for the model block `block` (named in the error when it cannot be loaded). A failure is not
/// remembered, so setting MAGE_CUBLAS and calling again works.
pub fn cublas(block: &str) -> Result<&'static Cublas, Error> {
    if let Some(c) = CUBLAS.get() {
        return Ok(c);
    }
    let c = load().map_err(|e| (MAGE_NO_CUBLAS, format!("{block}: {e}")))?;
    Ok(CUBLAS.get_or_init(|| c))
}

impl Cublas {
    pub(crate) fn check(&self, st: Status, what: &str) -> Result<(), Error> {
        if st == 0 {
            return Ok(());
        }
        let name = self
            .status_name
            // SAFETY: cublasGetStatusName returns a static string.
            .map(|f| unsafe { CStr::from_ptr(f(st)) }.to_string_lossy().into_owned())
            .unwrap_or_else(|| format!("cuBLAS status {st}"));
        Err((crate::MAGE_CUBLAS_FAILED, format!("{name}: {what}")))
    }
}

/// A device's handle and its workspace; the mutex keeps one caller at a time between setting the
/// stream and the GEMMs that run on it.
pub struct Device {
    pub(crate) handle: Handle,
    _workspace: DevPtr,
}
// SAFETY: the handle is only used under the mutex.
unsafe impl Send for Device {}

const MAX_DEVICES: usize = 16;
static HANDLES: [OnceLock<Result<Mutex<Device>, Error>>; MAX_DEVICES] = [const { OnceLock::new() }; MAX_DEVICES];

fn make_handle(c: &Cublas) -> Result<Mutex<Device>, Error> {
    let d = driver()?;
    let mut h: Handle = std::ptr::null_mut();
    let mut ws: DevPtr = 0;
    // SAFETY: out-pointers to locals; the caller made the device's primary context current.
    unsafe {
        c.check((c.create)(&mut h), "cublasCreate")?;
        c.check((c.set_math_mode)(h, 0), "cublasSetMathMode(CUBLAS_DEFAULT_MATH)")?; // IEEE FP32 FMA
        check((d.mem_alloc)(&mut ws, WORKSPACE), "cuMemAlloc (cuBLAS workspace)")?;
        c.check((c.set_workspace)(h, ws as *mut c_void, WORKSPACE), "cublasSetWorkspace")?;
    }
    Ok(Mutex::new(Device { handle: h, _workspace: ws }))
}

/// Row-major GEMMs on one stream: C[M, N] = alpha A B + beta C, as cuBLAS sees the transposes; every
/// operand FP32, or with `bf16` every operand bf16 (FP32 math).
/// Its calls are in gemm.rs.
pub struct Gemms<'a> {
    pub(crate) c: &'static Cublas,
    pub(crate) dev: std::sync::MutexGuard<'a, Device>,
    pub(crate) bf16: bool,
}

/// The handle of `device` (whose primary context is current) bound to `stream`, for `block`'s GEMMs
/// (on bf16 operands when `bf16`).
pub(crate) fn gemms(block: &str, device: i32, stream: CUstream, bf16: bool) -> Result<Gemms<'static>, Error> {
    let c = cublas(block)?;
    let slot = HANDLES
        .get(device as usize)
        .ok_or_else(|| (crate::MAGE_BAD_ARGUMENT, format!("{block}: device {device} is out of range")))?;
    let m = slot.get_or_init(|| make_handle(c)).as_ref().map_err(|(k, e)| (*k, format!("{block}: {e}")))?;
    let dev = m.lock().unwrap_or_else(|p| p.into_inner());
    // SAFETY: a live handle; the stream is the caller's.
    c.check(unsafe { (c.set_stream)(dev.handle, stream) }, "cublasSetStream")?;
    Ok(Gemms { c, dev, bf16 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_follow_the_override() {
        assert_eq!(candidates(None), SONAMES.map(String::from).to_vec());
        assert_eq!(candidates(Some("")), SONAMES.map(String::from).to_vec());
        assert_eq!(candidates(Some("/x/libcublas.so.12")), vec!["/x/libcublas.so.12".to_string()]);
        let dir = std::env::temp_dir();
        let got = candidates(Some(dir.to_str().unwrap()));
        assert!(got[0].ends_with("/libcublas.so.12") && got[1].ends_with("/libcublas.so.13"), "{got:?}");
    }
}
