//! The GPU driver, loaded at run time with `libloading`: HIP's module API (`libamdhip64.so`,
//! ROCm 5, 6 or 7) or the CUDA driver API (`libcuda.so.1`). They map one to one (module load,
//! get function, launch, malloc, memcpy, memset, events; HIP on NVIDIA is this mapping), so one
//! table of function pointers serves both; only device naming differs.
//!
//! `MXMOE_HIP_LIBRARY=/path/to/lib` chooses the library (a name containing "cuda" is taken as the
//! CUDA driver); `MXMOE_HIP_DEVICE=n` the device (default 0). Every failure is an error that says
//! which library, call and code, so `HipBackend::new` can report why the backend is unavailable.
//!
//! Without the GPUs, `hip/test/hip_emu.cpp` builds a stand-in for `libamdhip64.so` that runs the
//! kernels on the CPU as an MI350 or MI300 (`MXMOE_HIP_EMU_ARCH=gfx950|gfx942`), and
//! `hip/test/cuda_emu.cpp` one for the CUDA driver as an H200 (sm_90);
//! `MXMOE_HIP_EMU_STATS=1` makes either list the kernels that ran, and `MXMOE_HIP_LIBRARY`
//! points here at them (tests/backend_ops.rs `hip_backend_on_emulated_gpus`, scripts/hip_emu.sh).
//!
//! Over 700 lines, one seam short of a split: the symbol table, the device (allocation pool,
//! page-locked staging, copies) and the module/launch calls all go through the same function
//! pointers and error mapping.

use crate::backend::BackendError;
use libloading::Library;
use std::ffi::{c_char, c_void, CStr};
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vendor {
    Cuda,
    Hip,
}

type R = i32;
type Ptr = *mut c_void;

/// The function table (CUDA names; HIP's equivalents are bound to the same slots).
struct Fns {
    init: unsafe extern "C" fn(u32) -> R,
    device_count: unsafe extern "C" fn(*mut i32) -> R,
    device_get: unsafe extern "C" fn(*mut i32, i32) -> R,
    device_name: unsafe extern "C" fn(*mut c_char, i32, i32) -> R,
    device_total_mem: unsafe extern "C" fn(*mut usize, i32) -> R,
    driver_version: unsafe extern "C" fn(*mut i32) -> R,
    module_load: unsafe extern "C" fn(*mut Ptr, *const c_void) -> R,
    module_function: unsafe extern "C" fn(*mut Ptr, Ptr, *const c_char) -> R,
    #[allow(clippy::type_complexity, reason = "the C signature")]
    launch:
        unsafe extern "C" fn(Ptr, u32, u32, u32, u32, u32, u32, u32, Ptr, *mut Ptr, *mut Ptr) -> R,
    malloc: unsafe extern "C" fn(*mut u64, usize) -> R,
    free: unsafe extern "C" fn(u64) -> R,
    htod: unsafe extern "C" fn(u64, *const c_void, usize) -> R,
    dtoh: unsafe extern "C" fn(*mut c_void, u64, usize) -> R,
    memset32: unsafe extern "C" fn(u64, u32, usize) -> R,
    synchronize: unsafe extern "C" fn() -> R,
    event_create: unsafe extern "C" fn(*mut Ptr, u32) -> R,
    event_record: unsafe extern "C" fn(Ptr, Ptr) -> R,
    event_synchronize: unsafe extern "C" fn(Ptr) -> R,
    event_elapsed: unsafe extern "C" fn(*mut f32, Ptr, Ptr) -> R,
    event_destroy: unsafe extern "C" fn(Ptr) -> R,
    /// Page-locked host memory (cuMemHostAlloc / hipHostMalloc: pointer, bytes, flags) and its
    /// free; optional (the staging buffer falls back to ordinary memory).
    host_alloc: Option<unsafe extern "C" fn(*mut *mut c_void, usize, u32) -> R>,
    host_free: Option<unsafe extern "C" fn(*mut c_void) -> R>,
    /// A copy to the device that returns at once (page-locked host memory; the null stream, in
    /// order with the kernels).
    htod_async: Option<unsafe extern "C" fn(u64, *const c_void, usize, Ptr) -> R>,
    /// A device-to-device copy (cuMemcpyDtoD_v2 / hipMemcpyDtoD: dst, src, bytes); optional
    /// (only `mxmoe bench`'s measured floor uses it).
    dtod: Option<unsafe extern "C" fn(u64, u64, usize) -> R>,
    /// Set a function attribute (cuFuncSetAttribute(CUfunction, CUfunction_attribute, int) /
    /// hipFuncSetAttribute(const void*, hipFuncAttribute, int)); optional (only the v2 GEMM,
    /// whose dynamic shared memory passes 48 KB, needs it).
    func_set_attribute: Option<unsafe extern "C" fn(Ptr, i32, i32) -> R>,
    // CUDA only.
    cu_error_string: Option<unsafe extern "C" fn(R, *mut *const c_char) -> R>,
    cu_attribute: Option<unsafe extern "C" fn(*mut i32, i32, i32) -> R>,
    cu_primary_ctx: Option<unsafe extern "C" fn(*mut Ptr, i32) -> R>,
    cu_set_ctx: Option<unsafe extern "C" fn(Ptr) -> R>,
    // HIP only.
    hip_error_string: Option<unsafe extern "C" fn(R) -> *const c_char>,
    hip_set_device: Option<unsafe extern "C" fn(i32) -> R>,
    hip_properties: Option<unsafe extern "C" fn(*mut c_void, i32) -> R>,
}

/// A loaded driver library.
pub struct Driver {
    pub vendor: Vendor,
    /// The library's file name as opened.
    pub path: String,
    fns: Fns,
    _lib: Library,
}

const HIP_LIBS: [&str; 5] = [
    "libamdhip64.so",
    "libamdhip64.so.7",
    "libamdhip64.so.6",
    "libamdhip64.so.5",
    "/opt/rocm/lib/libamdhip64.so",
];
const CUDA_LIBS: [&str; 2] = ["libcuda.so.1", "libcuda.so"];

fn unavailable(reason: String) -> BackendError {
    BackendError::Unavailable {
        backend: "hip",
        reason,
    }
}

impl Driver {
    /// The libraries to try, in order, with their vendor (`MXMOE_HIP_LIBRARY` alone when set).
    fn candidates() -> Vec<(String, Vendor)> {
        match std::env::var("MXMOE_HIP_LIBRARY") {
            Ok(p) if !p.is_empty() => {
                let v = if p.contains("cuda") {
                    Vendor::Cuda
                } else {
                    Vendor::Hip
                };
                vec![(p, v)]
            }
            _ => HIP_LIBS
                .iter()
                .map(|s| (s.to_string(), Vendor::Hip))
                .chain(CUDA_LIBS.iter().map(|s| (s.to_string(), Vendor::Cuda)))
                .collect(),
        }
    }

    fn open(path: &str, vendor: Vendor) -> Result<Driver, String> {
        // SAFETY: loading a vendor driver library runs its initializers; that is what a GPU
        // program does at start-up.
        let lib = unsafe { Library::new(path) }.map_err(|e| e.to_string())?;
        let fns = unsafe { bind(&lib, vendor) }?;
        Ok(Driver {
            vendor,
            path: path.to_string(),
            fns,
            _lib: lib,
        })
    }

    /// The first driver library that loads AND opens a device (a machine may carry a HIP
    /// runtime without an AMD GPU, e.g. inside a Python wheel, beside the CUDA driver).
    /// `Unavailable` with what each library said otherwise.
    pub fn open_device() -> Result<Device, BackendError> {
        let tried = Driver::candidates();
        let mut errs = Vec::new();
        let mut found_lib = false;
        for (path, vendor) in &tried {
            match Driver::open(path, *vendor) {
                Ok(d) => {
                    found_lib = true;
                    match Device::open(Arc::new(d)) {
                        Ok(dev) => return Ok(dev),
                        Err(e) => errs.push(match e {
                            BackendError::Unavailable { reason, .. } => reason,
                            e => format!("{path}: {e}"),
                        }),
                    }
                }
                Err(e) if e.contains("symbol") => {
                    found_lib = true;
                    errs.push(format!("{path}: {e}"));
                }
                Err(_) => {}
            }
        }
        Err(unavailable(if found_lib {
            errs.join("; ")
        } else {
            format!(
                "no GPU driver library found (tried {}; set MXMOE_HIP_LIBRARY to its path)",
                tried
                    .iter()
                    .map(|(p, _)| p.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }))
    }

    fn error_text(&self, code: R) -> String {
        unsafe {
            let p = match (self.fns.cu_error_string, self.fns.hip_error_string) {
                (Some(f), _) => {
                    let mut p: *const c_char = std::ptr::null();
                    f(code, &mut p);
                    p
                }
                (None, Some(f)) => f(code),
                _ => std::ptr::null(),
            };
            if p.is_null() {
                format!("error {code}")
            } else {
                format!("{} ({code})", CStr::from_ptr(p).to_string_lossy())
            }
        }
    }

    /// `Err(Device("<call>: <driver's message>"))` unless `code` is success.
    pub fn check(&self, call: &str, code: R) -> Result<(), BackendError> {
        if code == 0 {
            Ok(())
        } else if code == 2 && call.contains("alloc") {
            Err(BackendError::OutOfMemory(format!(
                "{call}: {}",
                self.error_text(code)
            )))
        } else {
            Err(BackendError::Device(format!(
                "{call}: {}",
                self.error_text(code)
            )))
        }
    }
}

macro_rules! sym {
    ($lib:expr, $name:literal) => {
        *$lib
            .get(concat!($name, "\0").as_bytes())
            .map_err(|e| format!("symbol {}: {e}", $name))?
    };
}
macro_rules! opt {
    ($lib:expr, $name:literal) => {
        $lib.get(concat!($name, "\0").as_bytes()).ok().map(|s| *s)
    };
}

/// Bind the table from `lib`.
unsafe fn bind(lib: &Library, v: Vendor) -> Result<Fns, String> {
    Ok(match v {
        Vendor::Cuda => Fns {
            init: sym!(lib, "cuInit"),
            device_count: sym!(lib, "cuDeviceGetCount"),
            device_get: sym!(lib, "cuDeviceGet"),
            device_name: sym!(lib, "cuDeviceGetName"),
            device_total_mem: sym!(lib, "cuDeviceTotalMem_v2"),
            driver_version: sym!(lib, "cuDriverGetVersion"),
            module_load: sym!(lib, "cuModuleLoadData"),
            module_function: sym!(lib, "cuModuleGetFunction"),
            launch: sym!(lib, "cuLaunchKernel"),
            malloc: sym!(lib, "cuMemAlloc_v2"),
            free: sym!(lib, "cuMemFree_v2"),
            htod: sym!(lib, "cuMemcpyHtoD_v2"),
            dtoh: sym!(lib, "cuMemcpyDtoH_v2"),
            memset32: sym!(lib, "cuMemsetD32_v2"),
            synchronize: sym!(lib, "cuCtxSynchronize"),
            event_create: sym!(lib, "cuEventCreate"),
            event_record: sym!(lib, "cuEventRecord"),
            event_synchronize: sym!(lib, "cuEventSynchronize"),
            event_elapsed: sym!(lib, "cuEventElapsedTime"),
            event_destroy: sym!(lib, "cuEventDestroy_v2"),
            host_alloc: opt!(lib, "cuMemHostAlloc"),
            host_free: opt!(lib, "cuMemFreeHost"),
            htod_async: opt!(lib, "cuMemcpyHtoDAsync_v2"),
            dtod: opt!(lib, "cuMemcpyDtoD_v2"),
            func_set_attribute: opt!(lib, "cuFuncSetAttribute"),
            cu_error_string: opt!(lib, "cuGetErrorString"),
            cu_attribute: opt!(lib, "cuDeviceGetAttribute"),
            cu_primary_ctx: opt!(lib, "cuDevicePrimaryCtxRetain"),
            cu_set_ctx: opt!(lib, "cuCtxSetCurrent"),
            hip_error_string: None,
            hip_set_device: None,
            hip_properties: None,
        },
        Vendor::Hip => Fns {
            init: sym!(lib, "hipInit"),
            device_count: sym!(lib, "hipGetDeviceCount"),
            device_get: sym!(lib, "hipDeviceGet"),
            device_name: sym!(lib, "hipDeviceGetName"),
            device_total_mem: sym!(lib, "hipDeviceTotalMem"),
            driver_version: sym!(lib, "hipDriverGetVersion"),
            module_load: sym!(lib, "hipModuleLoadData"),
            module_function: sym!(lib, "hipModuleGetFunction"),
            launch: sym!(lib, "hipModuleLaunchKernel"),
            malloc: sym!(lib, "hipMalloc"),
            free: sym!(lib, "hipFree"),
            htod: sym!(lib, "hipMemcpyHtoD"),
            dtoh: sym!(lib, "hipMemcpyDtoH"),
            memset32: sym!(lib, "hipMemsetD32"),
            synchronize: sym!(lib, "hipDeviceSynchronize"),
            event_create: sym!(lib, "hipEventCreateWithFlags"),
            event_record: sym!(lib, "hipEventRecord"),
            event_synchronize: sym!(lib, "hipEventSynchronize"),
            event_elapsed: sym!(lib, "hipEventElapsedTime"),
            event_destroy: sym!(lib, "hipEventDestroy"),
            host_alloc: opt!(lib, "hipHostMalloc"),
            host_free: opt!(lib, "hipHostFree"),
            htod_async: opt!(lib, "hipMemcpyHtoDAsync"),
            dtod: opt!(lib, "hipMemcpyDtoD"),
            func_set_attribute: opt!(lib, "hipFuncSetAttribute"),
            cu_error_string: None,
            cu_attribute: None,
            cu_primary_ctx: None,
            cu_set_ctx: None,
            hip_error_string: opt!(lib, "hipGetErrorString"),
            hip_set_device: opt!(lib, "hipSetDevice"),
            // ROCm 6+ exports the current layout as ...R0600; older ones only the plain name.
            hip_properties: opt!(lib, "hipGetDevicePropertiesR0600")
                .or_else(|| opt!(lib, "hipGetDeviceProperties")),
        },
    })
}

/// One device of a driver, with its context made current on demand.
pub struct Device {
    pub driver: Arc<Driver>,
    pub ordinal: i32,
    ctx: Ptr,
    pub name: String,
    /// "sm_90" (compute capability 9.0) or "gfx942" (the base of HIP's gcnArchName).
    pub arch: String,
    pub total_mem: usize,
    pub driver_version: i32,
    /// Multiprocessors (CUDA: CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT); 0 where not asked (HIP).
    pub sms: u32,
    /// Freed allocations kept for reuse (see [`Device::alloc`]).
    pool: std::sync::Mutex<Pool>,
    /// The host staging buffer of [`Device::upload_parts`] and [`DevBuf::read_with`].
    staging: std::sync::Mutex<Staging>,
}

/// A grow-only host buffer for copies between host and device: page-locked when the driver
/// offers it (the DMA engine reads / writes it directly, several times faster than the driver's
/// own staging of ordinary memory), else ordinary memory.
struct Staging {
    ptr: *mut u8,
    cap: usize,
    pinned: bool,
    fallback: Vec<u8>,
}

impl Default for Staging {
    fn default() -> Self {
        Staging {
            ptr: std::ptr::null_mut(),
            cap: 0,
            pinned: false,
            fallback: Vec::new(),
        }
    }
}

/// Uploads go in chunks of this size, each chunk's host-side copy overlapping the transfer of the
/// chunk before. (Reading back in chunks, each waited for by an event and copied out on its own,
/// measured slower than one transfer and one parallel copy: docs/h200-2026-12-01-hipdecode.)
const COPY_CHUNK: usize = 4 << 20;

/// Copy `src` into `dst` (equal lengths), on several threads when large (a copy of many
/// megabytes is bound by one core's memory bandwidth and by first-touch page faults).
pub fn par_copy(dst: &mut [u8], src: &[u8]) {
    use rayon::prelude::*;
    const CHUNK: usize = 1 << 20;
    if src.len() <= 2 * CHUNK {
        dst.copy_from_slice(src);
    } else {
        dst.par_chunks_mut(CHUNK)
            .zip(src.par_chunks(CHUNK))
            .for_each(|(d, s)| d.copy_from_slice(s));
    }
}

/// Device allocations kept after their [`DevBuf`] drops, by capacity, so that a forward's
/// scratch and output buffers cost no malloc/free after the first forward of a shape (the
/// driver's free synchronizes the device, its malloc is slow). Only allocations up to
/// [`Pool::MAX_BUF`] are kept (weights are freed for real), at most [`Pool::MAX_KEPT`] bytes in
/// all. Safe to reuse at once: every launch and copy goes to the one (null) stream, in order.
#[derive(Default)]
struct Pool {
    free: std::collections::HashMap<usize, Vec<u64>>,
    kept: usize,
}

impl Pool {
    const MAX_BUF: usize = 1 << 30;
    const MAX_KEPT: usize = 4 << 30;

    /// The capacity an allocation of `n` bytes gets: `n` up to 64 KiB, else rounded up to an
    /// eighth of its power of two (less than 25 % waste; 8 capacities per power of two).
    fn capacity(n: usize) -> usize {
        if n <= 64 << 10 {
            return n.next_multiple_of(256);
        }
        let q = n.next_power_of_two() / 8;
        n.next_multiple_of(q)
    }
}

// SAFETY: the context handle is only used under the backend's op lock, after `make_current`.
unsafe impl Send for Device {}
unsafe impl Sync for Device {}

impl Device {
    /// Initialize the driver and open device `ordinal` (`MXMOE_HIP_DEVICE`, default 0).
    pub fn open(driver: Arc<Driver>) -> Result<Device, BackendError> {
        let ordinal: i32 = std::env::var("MXMOE_HIP_DEVICE")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let f = &driver.fns;
        let lib = driver.path.clone();
        unsafe {
            let r = (f.init)(0);
            if r != 0 {
                return Err(unavailable(format!(
                    "{lib}: driver initialization failed: {} (no usable GPU or driver)",
                    driver.error_text(r)
                )));
            }
            let mut n = 0;
            let r = (f.device_count)(&mut n);
            if r != 0 || n == 0 {
                return Err(unavailable(format!("{lib}: no device found")));
            }
            if ordinal < 0 || ordinal >= n {
                return Err(unavailable(format!(
                    "{lib}: MXMOE_HIP_DEVICE={ordinal} but {n} device(s)"
                )));
            }
            let mut handle = 0;
            driver.check("device get", (f.device_get)(&mut handle, ordinal))?;
            let mut buf = [0 as c_char; 256];
            driver.check(
                "device name",
                (f.device_name)(buf.as_mut_ptr(), 255, handle),
            )?;
            let name = CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned();
            let mut total_mem = 0usize;
            driver.check(
                "device memory",
                (f.device_total_mem)(&mut total_mem, handle),
            )?;
            let mut driver_version = 0;
            (f.driver_version)(&mut driver_version);
            let mut ctx: Ptr = std::ptr::null_mut();
            let mut sms = 0i32;
            let arch = match driver.vendor {
                Vendor::Cuda => {
                    let attr = f
                        .cu_attribute
                        .ok_or_else(|| unavailable("no cuDeviceGetAttribute".into()))?;
                    let (mut maj, mut min) = (0, 0);
                    // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR (cuda.h).
                    driver.check("device attribute", attr(&mut maj, 75, handle))?;
                    driver.check("device attribute", attr(&mut min, 76, handle))?;
                    // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT (cuda.h); 0 if refused.
                    if attr(&mut sms, 16, handle) != 0 {
                        sms = 0;
                    }
                    let retain = f
                        .cu_primary_ctx
                        .ok_or_else(|| unavailable("no cuDevicePrimaryCtxRetain".into()))?;
                    driver.check("primary context", retain(&mut ctx, handle))?;
                    format!("sm_{maj}{min}")
                }
                Vendor::Hip => {
                    if let Some(set) = f.hip_set_device {
                        driver.check("hipSetDevice", set(ordinal))?;
                    }
                    hip_arch(&driver, ordinal).unwrap_or_else(|| "gfx?".into())
                }
            };
            Ok(Device {
                driver,
                ordinal,
                ctx,
                name,
                arch,
                total_mem,
                driver_version,
                sms: sms.max(0) as u32,
                pool: Default::default(),
                staging: Default::default(),
            })
        }
    }

    /// Make this device current on the calling thread (CUDA: its primary context; HIP: the
    /// device).
    pub fn make_current(&self) -> Result<(), BackendError> {
        let f = &self.driver.fns;
        unsafe {
            match self.driver.vendor {
                Vendor::Cuda => match f.cu_set_ctx {
                    Some(set) => self.driver.check("cuCtxSetCurrent", set(self.ctx)),
                    None => Ok(()),
                },
                Vendor::Hip => match f.hip_set_device {
                    Some(set) => self.driver.check("hipSetDevice", set(self.ordinal)),
                    None => Ok(()),
                },
            }
        }
    }

    /// Load a code object (PTX text must end with a NUL byte) and resolve `names`.
    pub fn load_module(
        &self,
        image: &[u8],
        names: &[&'static str],
    ) -> Result<Vec<Ptr>, BackendError> {
        let f = &self.driver.fns;
        let mut module: Ptr = std::ptr::null_mut();
        unsafe {
            self.driver.check(
                "module load",
                (f.module_load)(&mut module, image.as_ptr().cast()),
            )?;
            names
                .iter()
                .map(|n| {
                    let c = std::ffi::CString::new(*n).unwrap();
                    let mut func: Ptr = std::ptr::null_mut();
                    self.driver.check(
                        &format!("kernel {n}"),
                        (f.module_function)(&mut func, module, c.as_ptr()),
                    )?;
                    Ok(func)
                })
                .collect()
        }
    }

    /// Allow `func` launches with up to `bytes` of dynamic shared memory (beyond the 48 KB every
    /// launch may take without asking). CUDA: cuFuncSetAttribute with
    /// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8 (cuda.h, enum CUfunction_attribute;
    /// NVIDIA's CUDA Driver API reference, "CUfunction_attribute"). HIP: hipFuncSetAttribute
    /// with hipFuncAttributeMaxDynamicSharedMemorySize = 8 (ROCm's include/hip/hip_runtime_api.h,
    /// enum hipFuncAttribute, which notes that AMD devices ignore these hints: an AMD launch may
    /// use the LDS up to the device's size without asking, so HIP errors are not fatal up to
    /// 64 KB, gfx942's LDS).
    pub fn set_max_dynamic_shared(&self, func: Ptr, bytes: u32) -> Result<(), BackendError> {
        const MAX_DYNAMIC_SHARED_SIZE_BYTES: i32 = 8;
        let Some(set) = self.driver.fns.func_set_attribute else {
            return if bytes <= 48 << 10 {
                Ok(())
            } else {
                Err(BackendError::Device(format!(
                    "{}: no cuFuncSetAttribute / hipFuncSetAttribute to allow {bytes} bytes of \
                     dynamic shared memory",
                    self.driver.path
                )))
            };
        };
        let code = unsafe { set(func, MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes as i32) };
        match self.driver.vendor {
            Vendor::Hip if bytes <= 64 << 10 => Ok(()),
            _ => self.driver.check(
                &format!("function attribute: {bytes} bytes of dynamic shared memory"),
                code,
            ),
        }
    }

    /// Launch `func` on a `grid` of `block`-thread blocks with `shared` bytes of dynamic shared
    /// memory per block (0 for most kernels; above 48 KB only after
    /// [`Device::set_max_dynamic_shared`] for `func`); `args` point at each argument's value
    /// (which the driver copies before returning).
    pub fn launch_shared(
        &self,
        func: Ptr,
        grid: (u32, u32),
        block: u32,
        shared: u32,
        args: &mut [Ptr],
    ) -> Result<(), BackendError> {
        let f = &self.driver.fns;
        unsafe {
            self.driver.check(
                "kernel launch",
                (f.launch)(
                    func,
                    grid.0,
                    grid.1,
                    1,
                    block,
                    1,
                    1,
                    shared,
                    std::ptr::null_mut(),
                    args.as_mut_ptr(),
                    std::ptr::null_mut(),
                ),
            )
        }
    }

    pub fn synchronize(&self) -> Result<(), BackendError> {
        unsafe {
            self.driver
                .check("synchronize", (self.driver.fns.synchronize)())
        }
    }

    /// A device allocation of `bytes` (at least 4), returned on drop: to the device's pool of
    /// reusable buffers when small enough, else freed.
    pub fn alloc(self: &Arc<Self>, bytes: usize) -> Result<DevBuf, BackendError> {
        let n = bytes.max(4).next_multiple_of(4);
        let cap = if n <= Pool::MAX_BUF {
            Pool::capacity(n)
        } else {
            n
        };
        let reused = {
            let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
            let p = pool.free.get_mut(&cap).and_then(Vec::pop);
            if p.is_some() {
                pool.kept -= cap;
            }
            p
        };
        let p = match reused {
            Some(p) => p,
            None => {
                let mut p = 0u64;
                unsafe {
                    self.driver.check(
                        &format!("alloc of {cap} bytes"),
                        (self.driver.fns.malloc)(&mut p, cap),
                    )?;
                }
                p
            }
        };
        Ok(DevBuf {
            dev: self.clone(),
            ptr: p,
            bytes: n,
            cap,
        })
    }

    /// Take back an allocation of capacity `cap`: keep it for reuse, or free it.
    fn release(&self, ptr: u64, cap: usize) {
        if cap <= Pool::MAX_BUF {
            let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
            if pool.kept + cap <= Pool::MAX_KEPT {
                pool.kept += cap;
                pool.free.entry(cap).or_default().push(ptr);
                return;
            }
        }
        unsafe {
            (self.driver.fns.free)(ptr);
        }
    }

    /// An allocation holding `data`.
    pub fn upload(self: &Arc<Self>, data: &[u8]) -> Result<DevBuf, BackendError> {
        let b = self.alloc(data.len())?;
        if !data.is_empty() {
            unsafe {
                self.driver.check(
                    "copy to device",
                    (self.driver.fns.htod)(b.ptr, data.as_ptr().cast(), data.len()),
                )?;
            }
        }
        Ok(b)
    }

    /// The device's copy bandwidth for `mxmoe bench`'s floor: `warm` untimed device-to-device
    /// copies of `bytes`, then `reps` copies each timed by an event pair, each as GB/s (read +
    /// write: 2 x `bytes` over the time). None where the driver has no such copy.
    pub fn copy_bandwidth(
        self: &Arc<Self>,
        bytes: usize,
        warm: usize,
        reps: usize,
    ) -> Result<Option<Vec<f64>>, BackendError> {
        let Some(dtod) = self.driver.fns.dtod else {
            return Ok(None);
        };
        let src = self.alloc(bytes)?;
        let dst = self.alloc(bytes)?;
        src.fill(0x5A5A_5A5A, src.bytes / 4)?;
        dst.fill(0, dst.bytes / 4)?;
        let copy = || unsafe {
            self.driver
                .check("device copy", dtod(dst.ptr, src.ptr, src.bytes))
        };
        for _ in 0..warm {
            copy()?;
        }
        let mut gbps = Vec::with_capacity(reps);
        for _ in 0..reps.max(1) {
            let (a, b) = (self.event()?, self.event()?);
            a.record()?;
            copy()?;
            b.record()?;
            let ms = a.elapsed_to(&b)?.max(1e-6);
            gbps.push(2.0 * src.bytes as f64 / (ms * 1e-3) / 1e9);
        }
        let head = dst.read(4096.min(dst.bytes))?;
        if head.iter().any(|&b| b != 0x5A) {
            return Err(BackendError::Device(
                "copy bandwidth: the device copy's output differs from its input".into(),
            ));
        }
        Ok(Some(gbps))
    }

    /// Whether the staging buffer is page-locked (asynchronous copies allowed). Before the first
    /// use: whether the driver offers page-locked memory.
    fn staging_pinned(&self) -> bool {
        let st = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        st.pinned || (st.cap == 0 && self.driver.fns.host_alloc.is_some())
    }

    /// Run `f` on the staging buffer grown to at least `n` bytes (page-locked when possible).
    fn with_staging<T>(
        &self,
        n: usize,
        f: impl FnOnce(&mut [u8]) -> Result<T, BackendError>,
    ) -> Result<T, BackendError> {
        let mut st = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        if st.cap < n {
            let fns = &self.driver.fns;
            // Asynchronous copies may still read the old buffer.
            self.synchronize()?;
            if st.pinned {
                if let Some(free) = fns.host_free {
                    unsafe { free(st.ptr.cast()) };
                }
                st.pinned = false;
                st.ptr = std::ptr::null_mut();
                st.cap = 0;
            }
            // Grow by at least half again, so that a batch growing token by token does not
            // re-pin every call.
            let cap = n.max(st.cap + st.cap / 2).next_multiple_of(1 << 16);
            let mut p: *mut c_void = std::ptr::null_mut();
            let ok = fns
                .host_alloc
                .is_some_and(|a| unsafe { a(&mut p, cap, 0) } == 0 && !p.is_null());
            if ok {
                st.ptr = p.cast();
                st.pinned = true;
                st.fallback = Vec::new();
            } else {
                st.fallback = vec![0u8; cap];
                st.ptr = st.fallback.as_mut_ptr();
            }
            st.cap = cap;
        }
        // SAFETY: `ptr` holds `cap >= n` bytes owned by the staging buffer, which the lock
        // keeps to this call.
        let buf = unsafe { std::slice::from_raw_parts_mut(st.ptr, n) };
        f(buf)
    }

    /// One device allocation holding `parts` one after the other, each at a multiple of 256
    /// bytes, and the device address of each: one host-to-device copy through the staging
    /// buffer instead of one per part.
    pub fn upload_parts(
        self: &Arc<Self>,
        parts: &[&[u8]],
    ) -> Result<(DevBuf, Vec<u64>), BackendError> {
        let mut offs = Vec::with_capacity(parts.len());
        let mut n = 0usize;
        for p in parts {
            offs.push(n);
            n += p.len().next_multiple_of(256);
        }
        let b = self.alloc(n)?;
        if n > 0 {
            let pinned = self.staging_pinned();
            let fns = &self.driver.fns;
            self.with_staging(n, |st| match fns.htod_async.filter(|_| pinned) {
                // Page-locked: copy chunk by chunk into the staging buffer and start each chunk's
                // transfer at once, so that the host copies of later chunks overlap the DMA.
                Some(htod_async) => {
                    for (p, &o) in parts.iter().zip(&offs) {
                        for (i, c) in p.chunks(COPY_CHUNK).enumerate() {
                            let at = o + i * COPY_CHUNK;
                            par_copy(&mut st[at..at + c.len()], c);
                            unsafe {
                                self.driver.check(
                                    "copy to device",
                                    htod_async(
                                        b.ptr + at as u64,
                                        st[at..].as_ptr().cast(),
                                        c.len(),
                                        std::ptr::null_mut(),
                                    ),
                                )?;
                            }
                        }
                    }
                    Ok(())
                }
                None => {
                    for (p, &o) in parts.iter().zip(&offs) {
                        par_copy(&mut st[o..o + p.len()], p);
                    }
                    unsafe {
                        self.driver
                            .check("copy to device", (fns.htod)(b.ptr, st.as_ptr().cast(), n))
                    }
                }
            })?;
        }
        let ptrs = offs.iter().map(|&o| b.ptr + o as u64).collect();
        Ok((b, ptrs))
    }

    pub fn event(self: &Arc<Self>) -> Result<Event, BackendError> {
        let mut e: Ptr = std::ptr::null_mut();
        unsafe {
            self.driver
                .check("event create", (self.driver.fns.event_create)(&mut e, 0))?
        };
        Ok(Event {
            dev: self.clone(),
            e,
        })
    }
}

/// HIP's gcnArchName ("gfx942:sramecc+:xnack-") without its features, from
/// hipGetDeviceProperties. The struct's layout changed between ROCm 5 and 6, so the name is
/// found by its content: the first NUL-terminated string starting with "gfx" in a generously
/// sized buffer.
fn hip_arch(d: &Driver, ordinal: i32) -> Option<String> {
    let props = d.fns.hip_properties?;
    let mut buf = vec![0u8; 16384];
    if unsafe { props(buf.as_mut_ptr().cast(), ordinal) } != 0 {
        return None;
    }
    let pos = buf.windows(4).position(|w| w == b"gfx9" || w == b"gfx1")?;
    let end = buf[pos..].iter().position(|&b| b == 0)? + pos;
    let s = String::from_utf8_lossy(&buf[pos..end]).into_owned();
    Some(s.split(':').next().unwrap_or(&s).to_string())
}

/// A device allocation.
pub struct DevBuf {
    dev: Arc<Device>,
    pub ptr: u64,
    /// The bytes asked for (rounded up to 4).
    pub bytes: usize,
    /// The bytes allocated (see `Pool::capacity`).
    cap: usize,
}

// SAFETY: a device address; used under the op lock.
unsafe impl Send for DevBuf {}
unsafe impl Sync for DevBuf {}

impl DevBuf {
    /// Copy the first `n` bytes back.
    pub fn read(&self, n: usize) -> Result<Vec<u8>, BackendError> {
        let mut v = vec![0u8; n];
        if n > 0 {
            unsafe {
                self.dev.driver.check(
                    "copy from device",
                    (self.dev.driver.fns.dtoh)(v.as_mut_ptr().cast(), self.ptr, n),
                )?;
            }
        }
        Ok(v)
    }

    /// Copy the first `n` bytes back through the device's staging buffer and hand them to `f`
    /// (one copy from the device; `f` copies out what it keeps).
    pub fn read_with<T>(
        &self,
        n: usize,
        f: impl FnOnce(&[u8]) -> Result<T, BackendError>,
    ) -> Result<T, BackendError> {
        self.dev.with_staging(n, |st| {
            if n > 0 {
                unsafe {
                    self.dev.driver.check(
                        "copy from device",
                        (self.dev.driver.fns.dtoh)(st.as_mut_ptr().cast(), self.ptr, n),
                    )?;
                }
            }
            f(st)
        })
    }

    /// Fill the first `n` 32-bit words with `value`.
    pub fn fill(&self, value: u32, words: usize) -> Result<(), BackendError> {
        unsafe {
            self.dev.driver.check(
                "memset",
                (self.dev.driver.fns.memset32)(self.ptr, value, words),
            )
        }
    }
}

impl Drop for Device {
    /// Free the pooled allocations (every `DevBuf` holds the device, so none is in use).
    fn drop(&mut self) {
        let _ = self.make_current();
        let pool = self.pool.get_mut().unwrap_or_else(|e| e.into_inner());
        for p in pool.free.drain().flat_map(|(_, v)| v) {
            unsafe {
                (self.driver.fns.free)(p);
            }
        }
        let st = self.staging.get_mut().unwrap_or_else(|e| e.into_inner());
        if st.pinned {
            if let Some(free) = self.driver.fns.host_free {
                unsafe { free(st.ptr.cast()) };
            }
        }
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        self.dev.release(self.ptr, self.cap);
    }
}

pub struct Event {
    dev: Arc<Device>,
    e: Ptr,
}

unsafe impl Send for Event {}

impl Event {
    pub fn record(&self) -> Result<(), BackendError> {
        unsafe {
            self.dev.driver.check(
                "event record",
                (self.dev.driver.fns.event_record)(self.e, std::ptr::null_mut()),
            )
        }
    }
    /// Milliseconds from `self` to `end` (both recorded; waits for `end`).
    pub fn elapsed_to(&self, end: &Event) -> Result<f64, BackendError> {
        let f = &self.dev.driver.fns;
        let mut ms = 0f32;
        unsafe {
            self.dev
                .driver
                .check("event sync", (f.event_synchronize)(end.e))?;
            self.dev
                .driver
                .check("event time", (f.event_elapsed)(&mut ms, self.e, end.e))?;
        }
        Ok(ms as f64)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        unsafe {
            (self.dev.driver.fns.event_destroy)(self.e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Pool;

    /// Capacities hold the request, waste at most a quarter, stay 4-byte aligned, and repeat
    /// across nearby sizes (so buffers of a forward of one shape find each other again).
    #[test]
    fn pool_capacities() {
        for n in (4..=(64usize << 20))
            .step_by(4093 * 4)
            .chain([4, 256, 65536, 65540, 1 << 28])
        {
            let c = Pool::capacity(n);
            assert!(c >= n && c.is_multiple_of(4), "{n} -> {c}");
            assert!(
                n <= 64 << 10 || c - n <= n / 4 + 4,
                "{n} -> {c}: more than 25 % waste"
            );
        }
        assert_eq!(Pool::capacity(100), 256);
        assert_eq!(Pool::capacity(3 << 20), 3 << 20);
        assert_eq!(Pool::capacity((3 << 20) + 4), 7 << 19);
        assert_eq!(Pool::capacity(5 << 20), 5 << 20);
        assert_eq!(Pool::capacity((5 << 20) + 4), 6 << 20);
    }
}
