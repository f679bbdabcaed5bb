//! The slice of XLA's typed FFI (`xla/ffi/api/c_api.h`, as jaxlib 0.12 ships it) that
//! tpusim's custom call uses: the call frame's buffers, errors, and futures (a handler
//! that returns a future lets XLA's device thread go on; the call completes when the
//! future is set). Each struct mirrors the header up to the last field read here.

use std::ffi::{c_char, c_void, CString};
use std::ptr::null_mut;

#[repr(C)]
pub struct Extension {
    struct_size: usize,
    pub kind: i32,
    next: *mut Extension,
}

#[repr(C)]
pub struct ApiVersion {
    struct_size: usize,
    extension_start: *mut Extension,
    major: i32,
    minor: i32,
}

#[repr(C)]
pub struct Metadata {
    struct_size: usize,
    api_version: ApiVersion,
    traits: u32,
    state_type_id: i64,
}

#[repr(C)]
pub struct MetadataExtension {
    base: Extension,
    metadata: *mut Metadata,
}

#[repr(C)]
pub struct Buffer {
    struct_size: usize,
    extension_start: *mut Extension,
    pub dtype: i32,
    pub data: *mut c_void,
    pub rank: i64,
    pub dims: *const i64,
}

/// `XLA_FFI_Args` and `XLA_FFI_Rets` (the same layout).
#[repr(C)]
pub struct Buffers {
    struct_size: usize,
    extension_start: *mut Extension,
    pub size: i64,
    types: *const i32,
    pub items: *const *mut Buffer,
}

#[repr(C)]
struct Attrs {
    struct_size: usize,
    extension_start: *mut Extension,
    size: i64,
    types: *const i32,
    names: *const c_void,
    attrs: *const c_void,
}

/// An opaque `XLA_FFI_Future`.
#[repr(C)]
pub struct RawFuture {
    _private: [u8; 0],
}

#[repr(C)]
pub struct CallFrame {
    struct_size: usize,
    pub extension_start: *mut Extension,
    pub api: *const Api,
    ctx: *mut c_void,
    pub stage: i32,
    pub args: Buffers,
    pub rets: Buffers,
    attrs: Attrs,
    /// Out: the future of an asynchronous call.
    pub future: *mut RawFuture,
}

#[repr(C)]
struct ErrorCreateArgs {
    struct_size: usize,
    extension_start: *mut Extension,
    message: *const c_char,
    errc: i32,
}

#[repr(C)]
struct FutureCreateArgs {
    struct_size: usize,
    extension_start: *mut Extension,
    future: *mut RawFuture,
}

#[repr(C)]
struct FutureSetAvailableArgs {
    struct_size: usize,
    extension_start: *mut Extension,
    future: *mut RawFuture,
}

#[repr(C)]
struct FutureSetErrorArgs {
    struct_size: usize,
    extension_start: *mut Extension,
    future: *mut RawFuture,
    error: *mut c_void,
}

type Fn1<A> = unsafe extern "C" fn(*mut A) -> *mut c_void;

#[repr(C)]
pub struct Api {
    struct_size: usize,
    extension_start: *mut Extension,
    api_version: ApiVersion,
    internal_api: *const c_void,
    error_create: Fn1<ErrorCreateArgs>,
    error_get_details: *const c_void,
    error_destroy: *const c_void,
    handler_register: *const c_void,
    stream_get: *const c_void,
    type_register: *const c_void,
    invoke_context_get: *const c_void,
    state_set: *const c_void,
    state_get: *const c_void,
    device_memory_allocate: *const c_void,
    device_memory_free: *const c_void,
    thread_pool_schedule: *const c_void,
    thread_pool_num_threads: *const c_void,
    future_create: Fn1<FutureCreateArgs>,
    future_set_available: Fn1<FutureSetAvailableArgs>,
    future_set_error: Fn1<FutureSetErrorArgs>,
}

/// The header's `XLA_FFI_API_MAJOR`/`MINOR` (jaxlib 0.12) and constants used here.
const API_MAJOR: i32 = 0;
const API_MINOR: i32 = 5;
pub const EXTENSION_METADATA: i32 = 1;
pub const STAGE_EXECUTE: i32 = 3;
const ERROR_INTERNAL: i32 = 13;
pub const DTYPE_S32: i32 = 4;

/// Bytes per element of an XLA primitive type, for the types a pallas operand can have.
pub fn element_bytes(dtype: i32) -> Option<usize> {
    Some(match dtype {
        1 | 2 | 6 => 1,       // pred, s8, u8
        3 | 7 | 10 | 16 => 2, // s16, u16, f16, bf16
        4 | 8 | 11 => 4,      // s32, u32, f32
        5 | 9 | 12 | 15 => 8, // s64, u64, f64, c64
        18 => 16,             // c128
        _ => return None,
    })
}

/// The struct size the header's `XLA_FFI_DEFINE_STRUCT_TRAITS` gives: up to the end of
/// its last field.
macro_rules! size_to {
    ($t:ty, $field:ident, $ft:ty) => {
        std::mem::offset_of!($t, $field) + std::mem::size_of::<$ft>()
    };
}

/// A new error with `message` (owned by whoever it is handed to).
///
/// # Safety
/// `api` is the API of a live call frame.
pub unsafe fn error(api: *const Api, message: &str) -> *mut c_void {
    let msg = CString::new(message.replace('\0', " ")).unwrap_or_default();
    let mut args = ErrorCreateArgs {
        struct_size: size_to!(ErrorCreateArgs, errc, i32),
        extension_start: null_mut(),
        message: msg.as_ptr(),
        errc: ERROR_INTERNAL,
    };
    ((*api).error_create)(&mut args)
}

/// Answers XLA's metadata query (the API version this handler was built for) when
/// `frame` is one; true if it was.
///
/// # Safety
/// `frame` is XLA's call frame.
pub unsafe fn answer_metadata(frame: &CallFrame) -> bool {
    let ext = frame.extension_start;
    if ext.is_null() || (*ext).kind != EXTENSION_METADATA {
        return false;
    }
    let m = &mut *(*(ext as *mut MetadataExtension)).metadata;
    m.api_version = ApiVersion {
        struct_size: std::mem::size_of::<ApiVersion>(),
        extension_start: null_mut(),
        major: API_MAJOR,
        minor: API_MINOR,
    };
    m.traits = 0;
    m.state_type_id = 0;
    true
}

/// A pending call's future: XLA keeps the call's buffers alive until it is set, once.
pub struct Future {
    api: *const Api,
    raw: *mut RawFuture,
}

// XLA's futures may be set from any thread.
unsafe impl Send for Future {}

impl Future {
    /// A new future (`Err` where XLA refused one).
    ///
    /// # Safety
    /// `api` is the API of a live call frame.
    pub unsafe fn create(api: *const Api) -> Result<Future, ()> {
        let mut args = FutureCreateArgs {
            struct_size: size_to!(FutureCreateArgs, extension_start, *mut Extension),
            extension_start: null_mut(),
            future: null_mut(),
        };
        if !((*api).future_create)(&mut args).is_null() || args.future.is_null() {
            return Err(());
        }
        Ok(Future {
            api,
            raw: args.future,
        })
    }

    /// The raw future, for the call frame.
    pub fn raw(&self) -> *mut RawFuture {
        self.raw
    }

    /// Completes the call: `Ok` or the error's message.
    pub fn set(self, outcome: Result<(), &str>) {
        // SAFETY: a future XLA made, set once (`self` is consumed).
        unsafe {
            match outcome {
                Ok(()) => {
                    let mut args = FutureSetAvailableArgs {
                        struct_size: size_to!(FutureSetAvailableArgs, future, *mut RawFuture),
                        extension_start: null_mut(),
                        future: self.raw,
                    };
                    ((*self.api).future_set_available)(&mut args);
                }
                Err(msg) => {
                    let mut args = FutureSetErrorArgs {
                        struct_size: size_to!(FutureSetErrorArgs, error, *mut c_void),
                        extension_start: null_mut(),
                        future: self.raw,
                        error: error(self.api, msg),
                    };
                    ((*self.api).future_set_error)(&mut args);
                }
            }
        }
    }
}
